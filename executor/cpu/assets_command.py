"""`executor cpu-assets DIR`: the tiny model (warm-started) and the maths dataset a CPU plan runs on."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

# about half of the sampled answers right afterwards, so GRPO groups often mix right and wrong answers (with
# 130 steps 10 of 16 groups of 4 mixed, with 200 only 3: an almost deterministic model gives zero advantages)
WARM_START_STEPS = 150


def cpu_assets(
    out_dir: Annotated[Path, typer.Argument(help="directory to create: model/ and data/ go inside")],
    seed: Annotated[int, typer.Option(help="seed of the weights and of the problems")] = 0,
    warm_start_steps: Annotated[int, typer.Option(min=0, help="supervised steps on easy problems first, so that "
                                                              "some sampled answers are right (0: random weights)")]
    = WARM_START_STEPS,
    train_problems: Annotated[int, typer.Option(min=1)] = 64,
    test_problems: Annotated[int, typer.Option(min=1)] = 8,
) -> None:
    """Write the tiny Qwen2 model and a maths dataset in verl's parquet format, offline; then run
    `executor run PLAN --model-path DIR/model --data-dir DIR/data` on a plan for cluster kind cpu."""
    from rich.console import Console

    from executor.cpu.assets import make_math_dataset, make_tiny_model
    from executor.cpu.math_problems import make_problems
    from executor.cpu.warm_start import warm_start
    from twin.errors import TwinError

    if (out_dir / "model").exists() or (out_dir / "data").exists():
        raise TwinError(f"{out_dir} already holds model/ or data/; choose an empty directory")
    model = make_tiny_model(out_dir / "model", seed=seed)
    if warm_start_steps:
        warm_start(model, make_problems(1000, seed=seed + 1, kinds=("identity",)), steps=warm_start_steps, seed=seed)
    train, test = make_math_dataset(out_dir / "data", n_train=train_problems, n_test=test_problems, seed=seed,
                                    kinds=("identity",))
    Console().print(f"model: {model}\ndata: {train}, {test}", highlight=False)
