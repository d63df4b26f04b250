"""Fixtures for the executor tests (a probe in a fresh process among them)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from executor.npu_opt.host import HostEnv
from executor.options import LaunchOptions
from executor.spec import LaunchSpec
from executor.targets import target_for
from twin.plan import load_plan, save_plan
from twin.planner import fixed_plan
from twin.scenario import load_scenario

REPO = Path(__file__).resolve().parents[2]
C1 = REPO / "scenarios" / "c1-dsr1-a3-128.yaml"


@pytest.fixture
def make_plan(tmp_path: Path):
    """make_plan(scenario, without=(), **workload_changes) -> a plan.json for the scenario's own layout (minus the
    optimizations in `without`), written by the twin's planner (`twin plan --scenario ... --keep-layout`)."""

    def make(scenario_path: Path = C1, without: tuple[str, ...] = (), **workload_changes) -> Path:
        scenario = load_scenario(scenario_path)
        if without:
            scenario = scenario.model_copy(
                update={"optimizations": tuple(o for o in scenario.optimizations if o not in without)})
        if workload_changes:
            scenario = scenario.model_copy(update={"workload": scenario.workload.model_copy(update=workload_changes)})
        path = tmp_path / f"plan-{len(list(tmp_path.glob('plan-*.json')))}.json"
        save_plan(fixed_plan(scenario), path)
        return path

    return make


def _build(plan_path: Path, workdir: Path) -> LaunchSpec:
    plan = load_plan(plan_path)
    return target_for(plan.scenario.cluster.kind).build(plan, LaunchOptions(workdir=workdir), HostEnv())


def _as_dict(overrides: list[str]) -> dict[str, str]:
    """`key=value` strings -> {key (with its '+' when added): value as spelled}."""
    return dict(o.split("=", 1) for o in overrides)


@pytest.fixture
def build():
    """build(plan_path, workdir) -> the LaunchSpec for this host."""
    return _build


@pytest.fixture
def as_dict():
    return _as_dict


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
