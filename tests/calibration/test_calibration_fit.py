"""`calibration fit`: parameters recovered from measurements the cost models generate, profiles never
overwritten, provenance recorded."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pytest
import yaml

from calibration.crossval import leave_one_out
from calibration.fit import CaseFit
from calibration.fit_jobs import JobFit
from calibration.identify import Identifiability
from calibration.measurements import (
    DeviceFacts,
    GroupInfo,
    HostFacts,
    JobMeasurement,
    MeasurementWriter,
    Stats,
    Versions,
)
from calibration.targets import Target, case_targets, distinct_targets
from twin.cost_models.comm import collective_time
from twin.disaggregated import SyncEvaluation
from twin.evaluate import Evaluation
from twin.profile import Profile, embedded_profile, reference_profile
from twin.scenario import Measured, Scenario, load_scenario
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


def _decode_records(truth: Profile, graph: bool, params: dict) -> list[JobMeasurement]:
    """The decode job's points, recorded with `params`, as the twin's decode step prices them under `truth` (tiny
    Qwen2, in graph or eager mode)."""
    from calibration.fit_jobs import decode_step_seconds
    from calibration.jobs.decode import TINY_QWEN2
    from twin.catalog.config import parse_config
    from twin.catalog.inventory import build_inventory

    inv = build_inventory(parse_config(dict(TINY_QWEN2), "tiny-qwen2"))
    sc = Scenario(name="t", model="tiny", cluster={"kind": "cpu", "cards": 1})
    out = []
    tp = int(params.get("tp", 1))
    for batch in (1, 4):
        for ctx in (64, 256):
            seconds = decode_step_seconds(inv, sc, Cluster("cpu", tp), truth, batch, ctx, graph, tp)
            out.append(JobMeasurement(
                key=f"decode|{params}|{batch}|{ctx}", job="decode", timestamp=datetime.now(timezone.utc),
                op="decode_step", params={"model": "tiny-qwen2", "batch": batch, "ctx": ctx, **params}, dtype="fp32",
                stats=Stats.from_samples([seconds] * 3, warmup=1),
                device=DeviceFacts(kind="cpu", name="test-cpu", count=1, threads=1),
                host=HostFacts(hostname="h", cpu_model="c", cores=2, memory_gb=24.0),
                versions=Versions(python="3.11")))
    return out


@pytest.mark.parametrize("params", [{"engine": "vllm", "graph": False}, {"engine": "transformers"}])
def test_job_fit_frees_the_eager_host_term_from_eager_decode_steps(params):
    base = embedded_profile("cpu")
    # as the job writes them now, and as it wrote transformers' (eager, without the flag)
    records = _decode_records(base.with_values({"decode_host_ms_eager": 1.3}, "truth"), False, params)
    fitted = JobFit(base, records, "fp32").run("eager", ["synthetic"]).profile
    assert fitted["decode_host_ms_eager"] == pytest.approx(1.3, rel=0.02)
    # one model's kernel count is fixed: its launch cost cannot be told from the per-step term, and stays sourced
    assert not fitted.params["eager_op_launch_us"].fitted and not fitted.params["decode_host_ms_graph"].fitted


def test_job_fit_takes_the_tp_all_reduce_extra_from_decode_steps_at_tp2():
    """The decode job's TP1 and TP2 points: the per-step host term and what each of TP2's all-reduces costs beyond
    the collective curves (`vllm_tp_collective_ms`) come back apart; TP1 points alone leave the second sourced."""
    base = embedded_profile("cpu")
    truth = base.with_values({"decode_host_ms_eager": 1.3, "vllm_tp_collective_ms": 2.0}, "truth")
    eager = {"engine": "vllm", "graph": False}
    records = _decode_records(truth, False, eager | {"tp": 1}) + _decode_records(truth, False, eager | {"tp": 2})
    fitted = JobFit(base, records, "fp32").run("tp2", ["synthetic"]).profile
    assert fitted["decode_host_ms_eager"] == pytest.approx(1.3, rel=0.02)
    name = "vllm_tp_collective_ms"
    assert fitted[name] == pytest.approx(2.0, rel=0.02) and fitted.params[name].fitted
    alone = JobFit(base, records[:4], "fp32").run("tp1", ["synthetic"]).profile
    assert alone[name] == base[name] and not alone.params[name].fitted


def test_a_job_fit_that_ends_on_a_lower_bound_says_so():
    """TP2 steps that cost no more than the collective curves say: the all-reduce extra ends on its lower bound, 0,
    and the fit notes it as a model error as it does for an upper bound."""
    base = embedded_profile("cpu")
    truth = base.with_values({"decode_host_ms_eager": 1.3, "vllm_tp_collective_ms": 0.0}, "truth")
    eager = {"engine": "vllm", "graph": False}
    records = _decode_records(truth, False, eager | {"tp": 1}) + _decode_records(truth, False, eager | {"tp": 2})
    outcome = JobFit(base, records, "fp32").run("tp2", ["synthetic"])
    assert outcome.profile["vllm_tp_collective_ms"] == pytest.approx(0.0, abs=1e-4)
    note = "vllm_tp_collective_ms: the eager decode fit ends on its lower bound"
    assert any(n.startswith(note) for n in outcome.notes)


def test_job_fit_takes_the_host_time_per_request_beside_the_calls_own_cost():
    """The decode job's request points (one-token generates of 16 and 64 requests at TP1 and TP2), timed as the
    twin's prefill plus 2.5 ms a request and 40 ms that an offline generate call costs whatever its requests: the fit
    finds the 2.5 ms again and leaves the call's cost out of it."""
    from calibration.fit_jobs import prefill_call_seconds
    from calibration.jobs.decode import TINY_QWEN2
    from twin.catalog.config import parse_config
    from twin.catalog.inventory import build_inventory

    base = embedded_profile("cpu")
    truth = base.with_values({"decode_host_ms_eager": 1.3, "vllm_tp_collective_ms": 2.0}, "t")
    eager = {"engine": "vllm", "graph": False}
    steps = _decode_records(truth, False, eager | {"tp": 1}) + _decode_records(truth, False, eager | {"tp": 2})
    inv = build_inventory(parse_config(dict(TINY_QWEN2), "tiny-qwen2"))
    sc = Scenario(name="t", model="tiny", cluster={"kind": "cpu", "cards": 1})
    requests = []
    for tp in (1, 2):
        for batch in (16, 64):
            seconds = prefill_call_seconds(inv, sc, Cluster("cpu", 2), truth, batch, 64, tp) + batch * 2.5e-3 + 0.040
            requests.append(steps[0].model_copy(update={
                "key": f"request|{tp}|{batch}", "op": "request", "stats": Stats.from_samples([seconds] * 3, warmup=1),
                "params": {"model": "tiny-qwen2", **eager, "tp": tp, "batch": batch, "ctx": 64}}))
    fitted = JobFit(base, steps + requests, "fp32").run("requests", ["synthetic"]).profile
    assert fitted["vllm_request_host_ms"] == pytest.approx(2.5, rel=0.02)
    assert "growth per request" in fitted.params["vllm_request_host_ms"].source


def _handover_records(template: JobMeasurement, fixed_ms: float, profile: Profile) -> list[JobMeasurement]:
    """The decode job's handover points of the tiny Qwen2 (15 entries at one layer, 27 at two), timed as the
    collective RPC, a hand-over of `fixed_ms` a sync plus the profile's per-entry terms, and vLLM's load."""
    out = []
    for layers, entries in ((1, 15), (2, 27)):
        seconds = (profile["vllm_collective_rpc_ms"] + fixed_ms) * 1e-3 + entries * (
            profile["weight_handover_entry_us"] + profile["vllm_load_entry_us"]) * 1e-6
        out.append(template.model_copy(update={
            "key": f"handover|{layers}", "op": "handover", "stats": Stats.from_samples([seconds] * 3, warmup=1),
            "params": {"model": "tiny-qwen2", "engine": "vllm", "graph": False, "tp": 2, "layers": layers},
            "derived": {"entries": entries / seconds}}))
    return out


def test_job_fit_takes_the_hand_overs_fixed_cost_from_whole_hand_overs_into_the_engine():
    """Hand-overs of 15 and 27 entries into the engine at 12 ms a sync beside the benchmarked per-entry terms: the
    fit finds the 12 ms; at 35 ms (above the parameter's sourced bound, 20 ms) it stops on the bound and says that
    this is a model error instead of moving the bound."""
    base = embedded_profile("cpu")
    steps = _decode_records(base, False, {"engine": "vllm", "graph": False})
    fitted = JobFit(base, steps + _handover_records(steps[0], 12.0, base), "fp32").run("h", ["synthetic"])
    name = "weight_handover_sync_ms"
    assert fitted.profile[name] == pytest.approx(12.0, rel=1e-3) and fitted.profile.params[name].fitted
    assert "handover job points" in fitted.profile.params[name].source
    assert not any(name in note for note in fitted.notes)
    over = JobFit(base, steps + _handover_records(steps[0], 35.0, base), "fp32").run("h", ["synthetic"])
    assert over.profile[name] == pytest.approx(base.params[name].bounds[1], rel=1e-6)
    assert any(note.startswith(f"{name}: the handover fit ends on its upper bound") for note in over.notes)


def test_a_file_with_compiled_points_before_eager_ones_still_fits_the_eager_term():
    """The job appends: a file may hold an older compiled sweep (no flag) before the eager one; each mode's points
    set their own term (the cpu profile's graph term is fixed, so it stays)."""
    base = embedded_profile("cpu")
    truth = base.with_values({"decode_host_ms_eager": 1.3, "decode_host_ms_graph": 0.4}, "truth")
    records = (_decode_records(truth, True, {"engine": "vllm"})
               + _decode_records(truth, False, {"engine": "vllm", "graph": False}))
    fitted = JobFit(base, records, "fp32").run("mixed", ["synthetic"]).profile
    assert fitted["decode_host_ms_eager"] == pytest.approx(1.3, rel=0.02)
    assert fitted["decode_host_ms_graph"] == base["decode_host_ms_graph"]


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


def _measurements(tmp_path: Path, extra: bytes = b"") -> Path:
    """Synthetic collectives records, followed by `extra` bytes."""
    path = tmp_path / "m.jsonl"
    with MeasurementWriter(path) as w:
        for r in _synthetic_collectives():
            w.write(r)
    with path.open("ab") as f:
        f.write(extra)
    return path


def test_bad_lines_are_summed_up_in_one_line(tmp_path):
    garbage = tmp_path / "g.bin"
    garbage.write_bytes(b"\x00\x01 binary\nname: x\n[1, 2]\n")
    result = _cli("fit", str(garbage), "--kind", "cpu", "-o", "out.yaml", cwd=tmp_path)
    assert result.returncode == 2 and "BadLine(" not in result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        f"calibration: error: measurements {garbage}: holds no records: 3 lines are not measurement records (line 1: "
        "Invalid JSON: ")
    assert "; line 2: Invalid JSON: " in lines[0] and lines[0].endswith("; 1 more)")
    some = _measurements(tmp_path, b"garbage\n{}\n")
    ok = _cli("fit", str(some), "--kind", "cpu", "-o", "out.yaml", cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr
    warnings = [line for line in ok.stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and "BadLine(" not in ok.stderr
    first = len(_synthetic_collectives()) + 1
    assert warnings[0].startswith(f"warning: measurements {some}: 2 lines are not measurement records (line {first}: ")
    assert f"; line {first + 1}: " in warnings[0] and warnings[0].endswith("); they were skipped")


@pytest.mark.parametrize(("option", "value", "message"), [
    ("--free", "gemm_efficiency_scale,nope", "--free: 'nope' is not a parameter a fit of profile cpu-base-1 may free; "
                                             "choose from framework_overhead_gb, "),
    ("--accept-bound-hits", "nope", "--accept-bound-hits: 'nope' is not a parameter a fit of profile cpu-base-1 may"),
    ("--free", "rollout_poll_s", "'rollout_poll_s' is not a parameter"),  # in the profile, but without bounds
    ("--free", "gemm_efficiency_scale", "--free applies to a case fit: give --cases"),
    ("--dtype", "int3", "--dtype 'int3' is not one of bf16, fp16, fp32"),
])
def test_unknown_parameters_and_dtypes_are_refused(tmp_path, option, value, message):
    result = _cli("fit", str(_measurements(tmp_path)), "--kind", "cpu", option, value, "-o", "out.yaml",
                  cwd=tmp_path)
    assert result.returncode == 2 and message in result.stderr, result.stderr
    assert len(result.stderr.splitlines()) == 1 and not (tmp_path / "out.yaml").exists()


def test_a_case_measuring_a_stage_the_twin_does_not_predict_is_refused(tmp_path):
    raw = yaml.safe_load((ROOT / "scenarios" / "cpu-tiny-grpo.yaml").read_text())
    case = tmp_path / "case.yaml"
    case.write_text(yaml.safe_dump({**raw, "measured": {"use": "fit", "stages_s": {"unknown_stage": 1}}}))
    result = _cli("fit", "--cases", str(case), "--kind", "cpu", "-o", "out.yaml", cwd=tmp_path)
    assert result.returncode == 2 and "Traceback" not in result.stderr and len(result.stderr.splitlines()) == 1
    assert f"scenario {case}: field '(top level)': measured.stages_s: 'unknown_stage' is not a stage" in result.stderr


def test_a_fit_refuses_a_start_point_that_predicts_a_zero_stage():
    """The CPU reference profile has no framework terms (the overhead job's): it predicts the advantage stage at 0 s,
    where no log-space Jacobian exists."""
    base = reference_profile("cpu")
    case = load_scenario(ROOT / "scenarios" / "cpu-tiny-grpo.yaml").model_copy(update={"measured": Measured(
        use="fit", step_s=7.5, stages_s={"rollout": 3.0, "advantage": 0.1, "update": 3.0})})
    with pytest.raises(ValueError, match=rf"^profile {base.id} predicts 0 for cpu-tiny-grpo: stage:advantage: a "
                                         r"log-space fit"):
        CaseFit(base, [case]).identify(["gemm_efficiency_scale"])


def test_case_fit_refuses_what_one_case_cannot_identify_and_bound_hits(tmp_path):
    c1 = str(ROOT / "scenarios" / "c1-dsr1-a3-128.yaml")
    judge = _cli("fit", "--cases", str(ROOT / "scenarios" / "c5-qwen25-7b-a3-16dies.yaml"), "--kind", "a3",
                 "-o", "x.yaml", cwd=tmp_path)
    assert judge.returncode == 2 and "use: fit" in judge.stderr  # a judge case is never fitted
    knob = _cli("fit", "--cases", c1, "--kind", "a3", "--free", "grouped_gemm_efficiency_scale,framework_overhead_gb",
                "-o", "x.yaml", cwd=tmp_path)
    assert knob.returncode == 2 and knob.stderr.strip().splitlines()[-1] == (
        "calibration: error: refusing to free grouped_gemm_efficiency_scale (2), framework_overhead_gb (0): each moves "
        "fewer than 3 of the 7 distinct measured numbers by 0.01 or more of its own relative change")
    assert "s1 = " in knob.stdout and not (tmp_path / "x.yaml").exists()
    hit = _cli("fit", "--cases", c1, "--kind", "a3", "--outer", "1", "-o", "c1.yaml", cwd=tmp_path)
    hits = "memory_efficiency_scale, ub_efficiency_scale"
    assert hit.returncode == 2 and f"on a bound (a model error): {hits};" in hit.stderr
    assert not (tmp_path / "c1.yaml").exists()
    ok = _cli("fit", "--cases", c1, "--kind", "a3", "--outer", "1", "--accept-bound-hits", hits.replace(" ", ""),
              "-o", "c1.yaml", cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr
    profile = yaml.safe_load((tmp_path / "c1.yaml").read_text())
    assert profile["parent"] == "a3-reference-1" and profile["provenance"]["cases"] == ["c1-dsr1-a3-128"]
    fit = profile["provenance"]["fit"]
    # C1 alone resolves two directions (the GEMM scale's column lies within 0.05 of the UB and memory scales' since a
    # full recompute reruns the layers, not the head GEMM)
    freed = ["memory_efficiency_scale", "ub_efficiency_scale"]
    assert fit["freed"] == freed and fit["bound_hits_accepted"] == ["memory_efficiency_scale", "ub_efficiency_scale"]
    assert fit["distinct_targets"] == 7 and fit["identifiable"] == 2
    assert [n for n, p in profile["params"].items() if p["fitted"]] == freed


SYNCS = [f"c9-{m}-per-tensor"
         for m in ("qwen25-math-7b-h20-4-4", "qwen3-30b-a3b-h20-16-16", "qwen3-235b-a22b-h20-64-64")]


def _generated_sync(name: str, truth: Profile) -> Scenario:
    """C9 scenario `name` marked for fitting, its weight sync the one the twin predicts under `truth`."""
    case = load_scenario(ROOT / "scenarios" / f"{name}.yaml")
    seconds = SyncEvaluation(case, truth).time().seconds
    return case.model_copy(update={"measured": case.measured.model_copy(update={
        "use": "fit", "stages_s": {"weight_sync": seconds}})})


def test_case_fit_reads_disaggregated_weight_syncs_and_cross_validates_them():
    base = reference_profile("h20")
    truth = base.with_values({"vllm_load_call_us": 700.0}, "truth")  # 300 us in the reference
    cases = [_generated_sync(n, truth) for n in SYNCS]
    fitter = CaseFit(base, cases)
    assert [(t.case, t.quantity) for t in fitter.distinct] == [(n, "stage:weight_sync") for n in SYNCS]
    identified = fitter.identify(["vllm_load_call_us"])
    assert identified.refusal() is None and len(identified.moved("vllm_load_call_us")) == 3
    outcome = fitter.run("recovered", identified, outer=1)
    assert outcome.profile["vllm_load_call_us"] == pytest.approx(700.0, rel=0.01)
    assert max(abs(e) for e in outcome.errors()) < 0.005 and outcome.errors("before")[1] < -0.05
    # each held-out sync refitted on the other two: recovered again, so each is predicted within a percent; a
    # sync case runs no sequences, so the domain records no sequence length
    cv = leave_one_out(outcome.profile, base, cases).result
    assert cv.cases == sorted(SYNCS) and cv.stages_rel_error["weight_sync"] < 0.01
    assert cv.domain["cluster_kind"] == ["h20"] and "seq_len" not in cv.domain


def test_a_disaggregated_case_fits_from_the_command_line(tmp_path):
    (tmp_path / "cases").mkdir()
    for name in SYNCS:  # the published syncs, marked for fitting: one freed parameter, three numbers move it
        text = (ROOT / "scenarios" / f"{name}.yaml").read_text()
        (tmp_path / "cases" / f"{name}.yaml").write_text(text.replace("use: judge", "use: fit"))
    out = _cli("fit", "--cases", "cases", "--profile", str(ROOT / "twin" / "profiles" / "gpu-reference.yaml"),
               "--free", "vllm_load_call_us", "-o", "x.yaml", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    profile = yaml.safe_load((tmp_path / "x.yaml").read_text())
    assert profile["provenance"]["cases"] == sorted(SYNCS)
    assert profile["provenance"]["fit"]["freed"] == ["vllm_load_call_us"]
    assert set(profile["provenance"]["residuals"]) == {f"{n}: stage:weight_sync" for n in SYNCS}
    # its leave-one-case-out error on the syncs becomes the band of every sync predicted from it
    cv = _cli("report", "--profile", "x.yaml", "--cases", "cases", "--cv", "--write-cv", "cv.yaml", cwd=tmp_path)
    assert cv.returncode == 0, cv.stderr
    err = yaml.safe_load((tmp_path / "cv.yaml").read_text())["cross_validation"]["stages_rel_error"]["weight_sync"]
    twin = [sys.executable, "-m", "twin", "weight-sync", f"cases/{SYNCS[1]}.yaml", "--profile", "cv.yaml"]
    out = json.loads(subprocess.run([*twin, "--json"], cwd=tmp_path, capture_output=True, text=True).stdout)
    assert out["band"] == pytest.approx([out["weight_sync_s"] * (1 - err), out["weight_sync_s"] * (1 + err)])
    text = subprocess.run(twin, cwd=tmp_path, capture_output=True, text=True).stdout
    assert f"band: {out['band'][0]:.2f}-{out['band'][1]:.2f} s" in text


# worker_call_s (0.5 s per call) is under a fifth of a percent of a C1/C3 stage since the Ray dispatch is measured:
# its direction falls under the identification threshold, so the fixed rollout time stands in for it
TRUTH = {"gemm_efficiency_scale": 0.8, "rollout_fixed_s": 30.0, "reward_us_per_token": 0.8}


def _generated(case: Scenario, truth: Profile) -> Scenario:
    """The case with the values the twin predicts under `truth` in place of its measured ones."""
    from twin.sim.step import simulate

    r = simulate(Evaluation(case, truth))[0]
    m = case.measured
    stages = {k: r.stages_s[k] for k in m.stages_s}
    return case.model_copy(update={"measured": m.model_copy(update={
        "stages_s": stages, "step_s": r.step_s if m.step_s else None,
        "tps_per_card": r.tps_per_card if m.tps_per_card else None})})


def test_case_fit_recovers_known_parameters_from_model_generated_timings():
    base = reference_profile("a3")
    truth = base.with_values(TRUTH, "truth")
    cases = [_generated(load_scenario(ROOT / "scenarios" / f"{n}.yaml"), truth)
             for n in ("c1-dsr1-a3-128", "c3-dsr1-a3-128-gloo-d2d", "c3-dsr1-a3-128-gloo-ray")]
    fitter = CaseFit(base, cases)
    # a TPS restates a step, C1's generated step is its stages' sum; C3-ray's step is not the sum of its four
    # listed stages (offload, reshard and advantage are 2.2 % of it, over the 1 % tolerance), so it counts
    assert len(fitter.targets) == 19 and len(fitter.distinct) == 15
    identified = fitter.identify(list(TRUTH))
    assert identified.refusal() is None and identified.identifiable == 3
    outcome = fitter.run("recovered", identified, outer=2)
    for name, value in TRUTH.items():
        assert outcome.profile[name] == pytest.approx(value, rel=0.03), name
    assert max(abs(e) for e in outcome.errors()) < 0.01 and outcome.bound_hits == []
    assert outcome.profile.provenance.fit.freed == list(TRUTH)
    too_many = fitter.identify([*TRUTH, "grouped_gemm_efficiency_scale", "attention_efficiency_scale",
                                "memory_efficiency_scale"])
    assert too_many.refusal() is not None and too_many.refusal().startswith("refusing to free")


def test_identifiability_counts_directions_and_movers_exactly():
    targets = [Target(f"c{i}", "step", 1.0) for i in range(4)]
    jac = np.array([[1.0, 2.0, 0.0], [1.0, 2.0, 0.005], [1.0, 2.0, 0.0], [0.0, 0.0, 0.5]])
    ident = Identifiability(["a", "b", "c"], targets, jac)
    assert ident.identifiable == 2  # b is twice a: one direction for both
    assert [len(ident.moved(n)) for n in "abc"] == [3, 3, 1]
    assert ident.refusal() == ("refusing to free c (1): each moves fewer than 3 of the 4 distinct measured numbers by "
                               "0.01 or more of its own relative change")
    assert ident.subset(["a", "b"]).refusal() == (
        "refusing to free 2 parameters: the Jacobian of 4 distinct measured numbers has 1 singular values above 0.05 "
        "of the largest; free at most 1 (without --free, the fit picks them)")
    assert ident.select() == ["b"]


def test_selection_never_frees_more_parameters_than_distinct_numbers():
    # three numbers, four parameters each moving all three: any three columns have three singular values, a fourth
    # column none of its own (found on the a2 cases: three numbers, five parameters picked, then refused by the fit)
    targets = [Target(f"c{i}", "step", 1.0) for i in range(3)]
    jac = np.array([[1.0, 0.1, 0.1, 0.5], [0.1, 1.0, 0.1, 0.5], [0.1, 0.1, 1.0, 0.5]])
    ident = Identifiability(["a", "b", "c", "d"], targets, jac)
    assert ident.identifiable == 3 and len(ident.select()) == 3
    assert ident.subset(ident.select()).refusal() is None


def test_distinct_targets_count_restated_numbers_once():
    scs = [load_scenario(ROOT / "scenarios" / f"{n}.yaml") for n in ("c1-dsr1-a3-128", "c2-dsr1-a3-128-graph-gloo")]
    labels = [t.label for t in distinct_targets(case_targets(scs), scs)]
    assert labels == [f"c1-dsr1-a3-128: stage:{s}" for s in ("rollout", "ref", "reward", "advantage", "update",
                                                             "reshard", "offload")] + [
        "c2-dsr1-a3-128-graph-gloo: stage:rollout"]


def _overhead(op: str, params: dict, seconds: float, nbytes: int | None = None, note: str = "") -> JobMeasurement:
    return JobMeasurement(
        key=f"overhead|{op}|{params}", job="overhead", timestamp=datetime.now(timezone.utc), op=op, params=params,
        stats=Stats.from_samples([seconds] * 3, warmup=1), bytes=nbytes, note=note,
        device=DeviceFacts(kind="cpu", name="test-cpu", count=1, threads=1),
        host=HostFacts(hostname="h", cpu_model="c", cores=2, memory_gb=24.0), versions=Versions(python="3.11"))


def test_job_fit_reads_the_per_call_terms_off_the_overhead_job():
    records = [_overhead("worker_call", {"workers": 1}, 0.0015), _overhead("worker_call", {"workers": 2}, 0.002),
               _overhead("worker_call_data", {"workers": 2, "payload_mb": 1}, 0.010, nbytes=200_000_000),
               _overhead("worker_call_data", {"workers": 2, "payload_mb": 2}, 0.030, nbytes=400_000_000),
               _overhead("rollout_poll", {"source": "verl code"}, 2.0, note="read from verl's code, not timed: x.py")]
    profile = JobFit(embedded_profile("cpu"), records, "fp32").run("overhead", ["synthetic"]).profile
    # 1.5 ms on one worker, 2.0 ms on two: 1.0 ms for the call, 0.5 ms per worker
    assert profile["worker_call_s"] == pytest.approx(0.001) and profile["dispatch_ray_s_per_worker"] == pytest.approx(
        0.0005)
    assert "intercept" in profile.params["worker_call_s"].source
    assert not profile.params["dispatch_d2d_s"].fitted  # the TransferQueue hand-over is outside these calls
    assert profile["dispatch_ray_s_per_gb"] == pytest.approx(0.02 / 0.1)  # 20 ms more for 0.1 GB more per worker
    assert profile["rollout_poll_s"] == 2.0 and "verl's code" in profile.params["rollout_poll_s"].source
    assert not profile.params["rollout_poll_s"].fitted  # confirmed, not moved


def test_a_case_measured_below_its_compute_floor_is_refused_and_marked(tmp_path):
    """C8's 16-GPU FSDP run with the response mean assumed until 2026-12-02 (2500 tokens): its published
    old_log_prob (88 s) is faster than 6144 sequences of 2650 tokens can run at the GPUs' peak (100.9 s)."""
    text = (ROOT / "scenarios" / "c8-dapo-qwen25-math-7b-h20-16-fsdp.yaml").read_text()
    assert "response_len: {mean: 1300," in text
    (tmp_path / "c8.yaml").write_text(text.replace("response_len: {mean: 1300,", "response_len: {mean: 2500,"))
    fit = _cli("fit", "--cases", "c8.yaml", "--profile", str(ROOT / "twin" / "profiles" / "gpu-reference.yaml"),
               "-o", "x.yaml", cwd=tmp_path)
    assert fit.returncode == 2 and not (tmp_path / "x.yaml").exists()
    assert fit.stderr.strip() == (
        "calibration: error: case c8-dapo-qwen25-math-7b-h20-16-fsdp: measured old_log_prob 88 s is below the 100.9 s "
        "its workload's FLOPs take at the devices' peak (twin/cost_models/floors.py): the scenario's lengths or batch "
        "cannot be what ran; correct them before fitting")
    report = _cli("report", "--profile", str(ROOT / "twin" / "profiles" / "gpu.yaml"), "--cases", "c8.yaml", "--json",
                  cwd=tmp_path)
    assert report.returncode == 0, report.stderr
    rows = {r["quantity"]: r for r in json.loads(report.stdout)["rows"]}
    assert rows["stage:old_log_prob"]["below_floor"] and rows["stage:update"]["below_floor"]
    assert rows["stage:old_log_prob"]["floor_s"] == pytest.approx(100.88, abs=0.01)
    assert rows["stage:rollout"]["floor_s"] is None and not rows["step"]["below_floor"]
