"""What the worker hook did in a run's processes, read from their reports, and a probe of a Ray cluster's workers.

Every verl process imports `executor.npu_opt.worker_hook` (VERL_USE_EXTERNAL_MODULES); each writes a
report with its pid. After a run, `hook_problem` reads the reports the run's own processes wrote: a hook that
failed names the process and the patch, and a run that asked for patches must have reports from processes that
are not verl's driver (its Ray workers), or its environment did not reach them. Before a run on an existing Ray
cluster (RAY_ADDRESS), whose nodes need not be this host, `probe_workers` starts Ray workers there with the
launch's environment and refuses the launch when the hook fails in one.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from pydantic import BaseModel

from executor.errors import ExecutorError
from executor.npu_opt.base import WorkerPatchResult
from executor.npu_opt.worker_hook_env import REPORT_DIR_ENV
from executor.spec import LaunchSpec


class WorkerReport(BaseModel):
    """The worker hook's report from one process."""

    pid: int
    host: str
    argv: list[str] = []
    time: float = 0.0  # when the hook ran (epoch seconds)
    results: list[WorkerPatchResult]

    @property
    def errors(self) -> list[str]:
        return [r.error for r in self.results if r.error]


def read_reports(report_dir: Path, pids: set[int] | None = None, since: float = 0.0) -> list[WorkerReport]:
    """The hook's reports in `report_dir` (of `pids` only, when given; written at `since` or later); one that cannot
    be read is an ExecutorError naming it."""
    reports = []
    for path in sorted(report_dir.glob("*.json")):
        try:
            reports.append(WorkerReport.model_validate(json.loads(path.read_text())))
        except (OSError, UnicodeDecodeError, ValueError) as exc:  # json's and pydantic's errors are ValueErrors
            raise ExecutorError(f"worker hook report {path} cannot be read ({type(exc).__name__})") from None
    return [r for r in reports if (pids is None or r.pid in pids) and r.time >= since]


def hook_problem(report_dir: Path, since: float, driver_pid: int, patches: str, expect_workers: bool) -> str | None:
    """What the reports of a run started at `since` (verl's driver `driver_pid`) say went wrong, in one line: the
    first process whose hook failed; or, where its workers' reports are expected here (`expect_workers`: a local
    session's run that ran) and it asked for `patches` (comma-separated ids), no report from any process but the
    driver. None when nothing did."""
    reports = read_reports(report_dir, since=since)  # none where the directory is absent
    failed = next((r for r in reports if r.errors), None)
    if failed is not None:
        program = Path(failed.argv[0]).name if failed.argv else "its program unknown"
        where = "verl's driver" if failed.pid == driver_pid else f"process {failed.pid} ({program})"
        return f"worker hook failed in {where}: {failed.errors[0]}"
    if expect_workers and patches and not any(r.pid != driver_pid for r in reports):
        return (f"no Ray worker of the run reported the worker hook (reports in {report_dir}): the patches "
                f"{patches} did not reach verl's workers, so the run's statuses do not hold")
    return None


def _probe_actor():
    import ray

    @ray.remote(num_cpus=0)
    class Probe:
        def import_verl(self) -> int:
            import verl  # noqa: F401 - importing verl runs the worker hook

            return os.getpid()

    return Probe


def probe_workers(spec: LaunchSpec, report_dir: Path, count: int = 1) -> list[WorkerReport]:
    """Start `count` Ray actors with the spec's environment (RAY_ADDRESS or a local cluster) and report."""
    import ray

    runtime_env = {"env_vars": {**spec.env, REPORT_DIR_ENV: str(report_dir)}}
    ray.init(address=os.environ.get("RAY_ADDRESS"), runtime_env=runtime_env, logging_level="ERROR",
             include_dashboard=False)
    try:
        probe = _probe_actor()
        actors = [probe.remote() for _ in range(count)]
        try:
            pids = set(ray.get([a.import_verl.remote() for a in actors], timeout=300))
        except ray.exceptions.RayError as exc:
            errors = [e for rep in read_reports(report_dir) for e in rep.errors]
            raise ExecutorError(f"worker hook failed in a Ray worker: {errors[0] if errors else exc}") from None
    finally:
        ray.shutdown()
    return read_reports(report_dir, pids)
