"""The launch path on a local CPU Ray cluster, up to where hardware is needed.

Evidence that the worker hook runs inside Ray worker processes (not the driver): each worker writes its
own report, with its pid, naming the patch targets it resolved in its own interpreter.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from executor.errors import ExecutorError
from executor.launch import new_record, run_trainer
from executor.npu_opt.directed_reshard import REGISTRY
from executor.npu_opt.worker_hook_env import PATCHES_ENV
from executor.options import RunPaths
from executor.probe import probe_workers
from executor.run_record import load_record, sha256_file
from executor.versions import installed_version
from twin.plan import load_plan


def _with_patches(spec, ids: str):
    return spec.model_copy(update={"env": {**spec.env, PATCHES_ENV: ids}})


def test_worker_hook_runs_in_ray_workers(make_plan, build, tmp_path: Path) -> None:
    spec = _with_patches(build(make_plan(), tmp_path), "directed_reshard")
    reports = probe_workers(spec, tmp_path / "reports", count=2)
    assert len({r.pid for r in reports}) == 2
    assert os.getpid() not in {r.pid for r in reports}
    for report in reports:
        (result,) = report.results
        assert result.id == "directed_reshard" and result.error is None
        assert result.applied == [REGISTRY.label]  # resolved inside the worker's own verl
        assert "naive" in result.detail  # the registry's contents as seen by that worker


@pytest.mark.skipif(installed_version("vllm") is not None, reason="vllm is installed: the patch would apply")
def test_worker_without_patch_package_fails_loudly(make_plan, build, tmp_path: Path) -> None:
    spec = _with_patches(build(make_plan(), tmp_path), "hccl_eos_sync")
    with pytest.raises(ExecutorError, match="hccl_eos_sync: vllm not installed in this worker process"):
        probe_workers(spec, tmp_path / "reports")
    (report_file,) = (tmp_path / "reports").glob("*.json")
    report = json.loads(report_file.read_text())
    assert report["pid"] != os.getpid()
    assert report["results"][0]["error"] == "hccl_eos_sync: vllm not installed in this worker process"


def test_run_trainer_streams_log_and_records_start_and_end(make_plan, build, tmp_path: Path, capfd) -> None:
    plan_path = make_plan(without=("directed_reshard",))  # C1 as it can run: its layout refuses the reshard
    # a value verl's own entry point rejects in validate_config, before it starts Ray
    spec = build(plan_path, tmp_path)
    spec = spec.model_copy(update={"overrides": [*spec.overrides, "actor_rollout_ref.actor.ppo_mini_batch_size=1024"]})
    paths = RunPaths(workdir=tmp_path / "run")
    record = new_record(plan_path, load_plan(plan_path), spec, paths)
    status, pid = run_trainer(spec, paths, record)
    assert status != 0 and pid != os.getpid()
    assert "must be >= actor.ppo_mini_batch_size (1024)" in paths.log.read_text()
    assert "must be >= actor.ppo_mini_batch_size (1024)" in capfd.readouterr().out
    saved = load_record(paths.record)
    assert saved.exit_status == status and saved.ended_at is not None and saved.ended_at >= saved.started_at
    assert saved.command == spec.command and saved.plan_sha256 == sha256_file(plan_path)
    assert (saved.log_path, saved.metrics_path) == (str(paths.log), str(paths.metrics))
    assert {o.id for o in saved.optimizations} == {r.id for r in spec.optimizations}
    assert saved.versions["verl"] == installed_version("verl")
