"""Start Ray worker processes with a launch's runtime environment and collect what the worker hook did.

Every verl process imports `executor.npu_opt.worker_hook` (VERL_USE_EXTERNAL_MODULES); each writes a
report with its pid. Probing a few workers before the trainer starts shows, in processes that are not
the driver, that the environment arrived and that every requested patch found its targets.
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
    results: list[WorkerPatchResult]


def read_reports(report_dir: Path, pids: set[int] | None = None) -> list[WorkerReport]:
    reports = [WorkerReport.model_validate(json.loads(p.read_text())) for p in sorted(report_dir.glob("*.json"))]
    return [r for r in reports if pids is None or r.pid in pids]


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
            failed = read_reports(report_dir)
            errors = [r.error for rep in failed for r in rep.results if r.error]
            raise ExecutorError(f"worker hook failed in a Ray worker: {errors[0] if errors else exc}") from None
    finally:
        ray.shutdown()
    return read_reports(report_dir, pids)
