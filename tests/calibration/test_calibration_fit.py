"""`calibration fit`: parameters recovered from measurements the cost models generate, profiles never
overwritten, provenance recorded."""

from __future__ import annotations

import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest
import yaml

from calibration.fit_jobs import JobFit
from calibration.measurements import (
    DeviceFacts,
    GroupInfo,
    HostFacts,
    JobMeasurement,
    MeasurementWriter,
    Stats,
    Versions,
)
from twin.cost_models.comm import collective_time
from twin.profile import embedded_profile
from twin.topology.routing import Cluster

ROOT = Path(__file__).resolve().parents[2]
TRUE = {"shm_efficiency_scale": 1.7, "collective_step_latency_us": 80.0, "a2a_base_latency_us": 150.0,
        "a2a_per_peer_latency_us": 20.0}


def _record(op: str, nbytes: int, seconds: float, ranks: list[int]) -> JobMeasurement:
    return JobMeasurement(
        key=f"collectives|{op}|{nbytes}|{len(ranks)}", job="collectives", timestamp=datetime.now(timezone.utc), op=op,
        params={"size": nbytes}, dtype="fp32", backend="gloo",
        group=GroupInfo(world_size=4, group_size=len(ranks), groups=1, layout="contiguous", ranks=ranks),
        stats=Stats.from_samples([seconds] * 3, warmup=1), bytes=nbytes,
        device=DeviceFacts(kind="cpu", name="test-cpu", count=1, threads=1),
        host=HostFacts(hostname="h", cpu_model="c", cores=2, memory_gb=24.0), versions=Versions(python="3.11"))


def _synthetic_collectives() -> list[JobMeasurement]:
    """Timings the twin's collective model gives for known parameters (what a perfect host would measure)."""
    truth = embedded_profile("cpu").with_values(TRUE, "truth")
    cluster = Cluster("cpu", 4)
    out = []
    for op, twin_op in (("all_reduce", "all_reduce"), ("all_gather", "all_gather"),
                        ("reduce_scatter", "reduce_scatter"), ("all_to_all_single", "all_to_all"),
                        ("broadcast", "broadcast")):
        for nbytes in (1 << 12, 1 << 16, 1 << 20, 1 << 24):
            for ranks in ([0, 1], [0, 1, 2, 3]):
                out.append(_record(op, nbytes, collective_time(cluster, truth, ranks, twin_op, nbytes), ranks))
    return out


def test_job_fit_recovers_the_collective_parameters():
    outcome = JobFit(embedded_profile("cpu"), _synthetic_collectives(), "fp32").run("recovered", ["synthetic"])
    for name, value in TRUE.items():
        assert outcome.profile[name] == pytest.approx(value, rel=0.05), name
        assert outcome.profile.params[name].fitted
        assert "collectives job" in outcome.profile.params[name].source
    assert max(abs(e) for e in outcome.errors["collectives"]) < 0.02
    assert outcome.profile.parent == "cpu-base-1" and outcome.profile.provenance.inputs == ["synthetic"]
    untouched = embedded_profile("cpu").params["rollout_poll_s"]
    assert outcome.profile.params["rollout_poll_s"] == untouched  # the jobs cannot see it: kept as sourced


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "calibration", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300)


def test_fit_writes_a_new_profile_and_never_overwrites(tmp_path):
    with MeasurementWriter(tmp_path / "m.jsonl") as w:
        for r in _synthetic_collectives():
            w.write(r)
    ok = _cli("fit", "m.jsonl", "--kind", "cpu", "-o", "fitted.yaml", cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr
    profile = yaml.safe_load((tmp_path / "fitted.yaml").read_text())
    assert profile["id"] == "fitted" and profile["parent"] == "cpu-base-1"
    assert profile["provenance"]["inputs"] == ["m.jsonl"] and profile["provenance"]["fitted_on"]
    before = (tmp_path / "fitted.yaml").read_bytes()
    again = _cli("fit", "m.jsonl", "--kind", "cpu", "-o", "fitted.yaml", cwd=tmp_path)
    assert again.returncode == 2 and "never overwritten" in again.stderr
    assert (tmp_path / "fitted.yaml").read_bytes() == before
    own = _cli("fit", "m.jsonl", "--profile", "fitted.yaml", "-o", "fitted.yaml", cwd=tmp_path)
    assert own.returncode == 2 and len(own.stderr.strip().splitlines()) == 1
    nothing = _cli("fit", "-o", "x.yaml", cwd=tmp_path)
    assert nothing.returncode == 2 and "give measurements" in nothing.stderr


def test_case_fit_uses_only_fit_cases_and_records_them(tmp_path):
    judge = _cli("fit", "--cases", str(ROOT / "scenarios" / "c5-qwen25-7b-a3-16dies.yaml"), "--kind", "a3",
                 "-o", "x.yaml", cwd=tmp_path)
    assert judge.returncode == 2 and "use: fit" in judge.stderr  # a judge case is never fitted
    ok = _cli("fit", "--cases", str(ROOT / "scenarios" / "c1-dsr1-a3-128.yaml"), "--kind", "a3", "--outer", "1",
              "-o", "c1.yaml", cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr
    profile = yaml.safe_load((tmp_path / "c1.yaml").read_text())
    assert profile["parent"] == "a3-reference-1" and profile["provenance"]["cases"] == ["c1-dsr1-a3-128"]
    residuals = profile["provenance"]["residuals"]
    assert abs(residuals["c1-dsr1-a3-128: step"]) < 0.05
