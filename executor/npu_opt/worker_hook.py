"""Imported in every verl process through VERL_USE_EXTERNAL_MODULES (verl/__init__.py imports it).

Reads the ids to patch from EXECUTOR_NPU_PATCHES, checks that this process has each patch's packages,
applies each patch (`apply_in_worker`), writes what it did to EXECUTOR_PATCH_REPORT_DIR/<host>-<pid>.json,
and raises when a patch cannot be applied: a worker with missing targets must not run silently unpatched. Where
the run asks, it also times the rollout's prompt groups (executor/rollout_timing.py).
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from pathlib import Path

from executor.npu_opt.base import PatchTargetMissing, WorkerPatchResult
from executor.npu_opt.worker_hook_env import PATCHES_ENV, REPORT_DIR_ENV
from executor.rollout_timing import install as install_rollout_timing
from executor.versions import installed_version


def _apply(opt_id: str) -> WorkerPatchResult:
    from executor.npu_opt.registry import find

    opt = find(opt_id)
    if opt is None:
        return WorkerPatchResult(id=opt_id, error=f"unknown optimization id {opt_id!r}")
    missing = [d for d in opt.worker_dists if installed_version(d) is None]
    if missing:
        return WorkerPatchResult(id=opt_id, error=f"{opt_id}: {missing[0]} not installed in this worker process")
    try:
        return opt.apply_in_worker()
    except PatchTargetMissing as exc:
        return WorkerPatchResult(id=opt_id, error=str(exc))


def _write_report(results: list[WorkerPatchResult]) -> None:
    report_dir = os.environ.get(REPORT_DIR_ENV)
    if not report_dir:
        return
    path = Path(report_dir) / f"{socket.gethostname()}-{os.getpid()}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    body = {"pid": os.getpid(), "host": socket.gethostname(), "argv": sys.argv[:3], "time": time.time(),
            "results": [r.model_dump() for r in results]}
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(body, indent=2))
    tmp.replace(path)


def run() -> list[WorkerPatchResult]:
    """Apply the requested patches in this process; raise PatchTargetMissing naming every failure. A patch that
    waits for its module and fails when it loads is written into the report then (the import raises after)."""
    from executor.npu_opt.patching import on_late_failure

    ids = [i for i in os.environ.get(PATCHES_ENV, "").split(",") if i]
    results = [_apply(i) for i in ids]
    _write_report(results)

    def late(opt_id: str, error: str) -> None:
        for r in results:
            if r.id == opt_id:
                r.error = error
        _write_report(results)

    on_late_failure(late)
    errors = [r.error for r in results if r.error]
    if errors:
        raise PatchTargetMissing("; ".join(errors))
    return results


run()
install_rollout_timing()
