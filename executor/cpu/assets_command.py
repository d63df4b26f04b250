"""`executor cpu-assets DIR`: the tiny model (warm-started) and the maths dataset a CPU plan runs on."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
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
    from executor.console import out
    from executor.cpu.assets import TINY_MODELS
    from twin.errors import TwinError
    from twin.fileio import output_dir

    if model not in TINY_MODELS:
        raise TwinError(f"--model {model!r}: choose one of {', '.join(TINY_MODELS)}")
    label = f"output directory {out_dir}"
    out_dir = output_dir(out_dir, label)  # an existing file, a device, a missing parent: one line, nothing made
    try:
        if (out_dir / "model").exists() or (out_dir / "data").exists():
            raise TwinError(f"{out_dir} already holds model/ or data/; choose an empty directory")
        with staged(out_dir, ("model", "data")) as tmp:
            _write_assets(tmp, seed, warm_start_steps, train_problems, test_problems, model)
    except OSError as exc:  # a full disk, a directory made unwritable meanwhile: nothing half-written is left
        raise TwinError(f"{label}: cannot write ({exc.strerror or exc})") from None
    out.print(f"model: {out_dir / 'model'}\ndata: {out_dir / 'data' / 'train.parquet'}, "
              f"{out_dir / 'data' / 'test.parquet'}", markup=False)  # unwrapped, a '[' in a path kept


def _write_assets(root: Path, seed: int, warm_start_steps: int, train_problems: int, test_problems: int,
                  model: str) -> None:
    """The tiny model in root/model (warm-started for `warm_start_steps`) and the dataset in root/data."""
    from executor.cpu.assets import make_math_dataset, make_tiny_model
    from executor.cpu.math_problems import make_problems
    from executor.cpu.warm_start import warm_start

    model_dir = make_tiny_model(root / "model", seed=seed, model=model)
    if warm_start_steps:
        problems = make_problems(1000, seed=seed + 1, kinds=("identity",))
        warm_start(model_dir, problems, steps=warm_start_steps, seed=seed)
    make_math_dataset(root / "data", n_train=train_problems, n_test=test_problems, seed=seed, kinds=("identity",))


@contextmanager
def staged(out_dir: Path, names: tuple[str, ...]) -> Iterator[Path]:
    """A temporary directory inside `out_dir`; once the block has written them there, `names` are moved into
    `out_dir` (each a rename: there whole, or not at all). The temporary directory is removed in any case."""
    tmp = Path(tempfile.mkdtemp(prefix=".cpu-assets-", dir=out_dir))
    try:
        yield tmp
        for name in names:
            os.rename(tmp / name, out_dir / name)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
