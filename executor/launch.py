"""Start verl's trainer for a built launch, stream its log, and keep the run record up to date."""

from __future__ import annotations

import os
import platform
import socket
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import NamedTuple

from executor.npu_opt.base import OptReport
from executor.options import RunPaths
from executor.run_record import OptimizationStatus, RunRecord, save_record, sha256_file
from executor.spec import LaunchSpec
from executor.versions import installed_versions
from twin.plan import Plan


def _status(report: OptReport) -> OptimizationStatus:
    mechanism = report.mechanism if report.state == "applied" else report.state
    return OptimizationStatus(id=report.id, mechanism=mechanism, status=report.state, detail=report.detail)


def new_record(plan_path: Path, plan: Plan, spec: LaunchSpec, paths: RunPaths) -> RunRecord:
    """The record written when the run starts (no end time, no exit status yet)."""
    return RunRecord(
        plan_path=str(plan_path.resolve()), plan_sha256=sha256_file(plan_path), scenario=plan.scenario.name,
        cluster_kind=plan.scenario.cluster.kind, cards=plan.predictions.cards, devices=plan.predictions.devices,
        command=spec.command, env=spec.env, versions=installed_versions(),
        host={"hostname": socket.gethostname(), "platform": platform.platform(), "python": sys.version.split()[0],
              "ray_address": os.environ.get("RAY_ADDRESS", "local")},
        workdir=str(paths.workdir), log_path=str(paths.log), metrics_path=str(paths.metrics),
        optimizations=[_status(r) for r in spec.optimizations], engines=spec.engines,
        patch_reports_dir=str(paths.patch_reports),
        started_at=datetime.now(timezone.utc),
    )


class TrainerExit(NamedTuple):
    """How verl's trainer ended: its exit status and its process id (verl's driver)."""

    status: int
    pid: int


def run_trainer(spec: LaunchSpec, paths: RunPaths, record: RunRecord) -> TrainerExit:
    """Run `python -m verl.trainer.main_ppo ...`, tee its output to the log, record start and end."""
    paths.workdir.mkdir(parents=True, exist_ok=True)
    save_record(record, paths.record)
    env = {**os.environ, **spec.env}
    status = 1
    try:
        with paths.log.open("w") as log, subprocess.Popen(
            spec.command, env=env, cwd=paths.workdir, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            bufsize=1,
        ) as proc:
            pid = proc.pid
            try:
                for line in proc.stdout:
                    sys.stdout.write(line)
                    log.write(line)
                status = proc.wait()
            except KeyboardInterrupt:
                proc.terminate()
                status = proc.wait()
    finally:
        save_record(record.model_copy(update={"ended_at": datetime.now(timezone.utc), "exit_status": status}),
                    paths.record)
    return TrainerExit(status, pid)
