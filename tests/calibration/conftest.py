"""Shared fixtures of the calibration tests: a CPU run context and a record sanity check."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from calibration.devices import device_facts, open_device
from calibration.facts import host_facts, versions
from calibration.jobs.base import RunContext
from calibration.measurements import JobMeasurement

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def cpu_ctx() -> RunContext:
    device = open_device("cpu")
    return RunContext(device, device_facts(device), host_facts(), versions(), repeats=3, warmup=1, world=2)


@pytest.fixture
def assert_sane():
    """A check of one job record (a fixture so that test modules need no import of this file)."""
    return check_sane


def check_sane(record: JobMeasurement) -> None:
    """Positive ordered timings, one sample per repeat, and rates that follow from work and median."""
    stats = record.stats
    assert stats.repeats == len(stats.samples_s) >= 1
    assert all(s > 0 for s in stats.samples_s)
    assert 0 < stats.min_s <= stats.median_s <= stats.max_s
    assert stats.min_s == min(stats.samples_s) and stats.max_s == max(stats.samples_s)
    if record.flops is not None:
        assert math.isclose(record.derived["tflops"], record.flops / stats.median_s / 1e12, rel_tol=1e-9)
    if record.bytes is not None:
        assert math.isclose(record.derived["gbps"], record.bytes / stats.median_s / 1e9, rel_tol=1e-9)
    assert record.device.kind == "cpu" and record.host.cores >= 1 and record.versions.torch


@pytest.fixture
def run_cli():
    """`run_cli(*args)`: run `python -m calibration ARGS` and capture its output."""
    return _run_cli


@pytest.fixture
def popen_cli():
    """`popen_cli(*args)`: start `python -m calibration ARGS` without waiting."""
    return _popen_cli


def _env() -> dict[str, str]:
    """Wide tables; one torch thread so that timings stay steady on a busy 2-core CI host."""
    return {**os.environ, "COLUMNS": "200", "OMP_NUM_THREADS": "1"}


def _run_cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "calibration", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=REPO, env=_env())


def _popen_cli(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "calibration", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=REPO, env=_env())
