"""Fixtures for the CPU target's tests: the tiny model, made once per session."""

from __future__ import annotations

from pathlib import Path

import pytest

from executor.cpu.assets import make_tiny_model


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_model(tmp_path_factory.mktemp("tiny") / "model", seed=0)
