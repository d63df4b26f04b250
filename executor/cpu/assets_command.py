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
    model: Annotated[str, typer.Option(help="tiny (Qwen2), tiny-moe (Qwen3-MoE, 4 experts, top-2) or tiny-deepseek "
                                            "(DeepSeek-V3: MLA, shared expert, 4 routed experts): the plan's "
                                            "model")] = "tiny",
) -> None:
    """Write a tiny model (dense Qwen2, Qwen3-MoE or DeepSeek-V3) and a maths dataset in verl's parquet format,
    offline; then run `executor run PLAN --model-path DIR/model --data-dir DIR/data` on a plan for cluster kind cpu."""
    from rich.console import Console

    from executor.cpu.assets import TINY_MODELS, make_math_dataset, make_tiny_model
    from executor.cpu.math_problems import make_problems
    from executor.cpu.warm_start import warm_start
    from twin.errors import TwinError

    if model not in TINY_MODELS:
        raise TwinError(f"--model {model!r}: choose one of {', '.join(TINY_MODELS)}")
    if (out_dir / "model").exists() or (out_dir / "data").exists():
        raise TwinError(f"{out_dir} already holds model/ or data/; choose an empty directory")
    model_dir = make_tiny_model(out_dir / "model", seed=seed, model=model)
    if warm_start_steps:
        problems = make_problems(1000, seed=seed + 1, kinds=("identity",))
        warm_start(model_dir, problems, steps=warm_start_steps, seed=seed)
    train, test = make_math_dataset(out_dir / "data", n_train=train_problems, n_test=test_problems, seed=seed,
                                    kinds=("identity",))
    Console().print(f"model: {model_dir}\ndata: {train}, {test}", highlight=False)
