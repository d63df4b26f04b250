"""Fixtures for the CPU target's tests: the tiny model, made once per session; a probe in a fresh process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from executor.cpu.assets import make_tiny_model


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_model(tmp_path_factory.mktemp("tiny") / "model", seed=0)


PROBE_PREFIX = "PROBE "


def _run_probe(code: str, env: dict[str, str] | None = None) -> dict:
    """Run `code` in a fresh Python (this environment, one torch thread, plus `env`) and return the JSON object it
    printed on its line starting with PROBE_PREFIX."""
    proc = subprocess.run([sys.executable, "-c", code], env={**os.environ, "OMP_NUM_THREADS": "1", **(env or {})},
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(line for line in proc.stdout.splitlines() if line.startswith(PROBE_PREFIX))
    return json.loads(line.removeprefix(PROBE_PREFIX))


@pytest.fixture
def run_probe() -> Callable[..., dict]:
    """`run_probe(code, env)`: the JSON object a probe printed in a fresh process (its `PROBE ` line)."""
    return _run_probe
