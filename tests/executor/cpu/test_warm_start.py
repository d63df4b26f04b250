"""The supervised warm start: it trains, in place, deterministically."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest

from executor.cpu.math_problems import make_problems
from executor.cpu.warm_start import warm_start


def _weights_digest(model_dir: Path) -> str:
    return hashlib.sha256((model_dir / "model.safetensors").read_bytes()).hexdigest()


def test_warm_start_trains_in_place_and_is_deterministic(tiny_model: Path, tmp_path: Path) -> None:
    problems = make_problems(200, seed=1, kinds=("identity",))
    first, second = tmp_path / "a", tmp_path / "b"
    shutil.copytree(tiny_model, first)
    shutil.copytree(tiny_model, second)
    loss = warm_start(first, problems, steps=40, seed=0)
    assert loss < 2.0  # from ln(vocab) ~ 5.9 for the random model
    assert _weights_digest(first) != _weights_digest(tiny_model)
    assert warm_start(second, problems, steps=40, seed=0) == loss
    assert _weights_digest(second) == _weights_digest(first)


def test_warm_start_needs_steps_and_problems(tiny_model: Path) -> None:
    with pytest.raises(ValueError):
        warm_start(tiny_model, [], steps=10)
