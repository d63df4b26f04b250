"""`calibration report`: the A3 cases against the embedded a3 profile, a verl run as a case, and bad input."""

from __future__ import annotations

import json
import math
from datetime import datetime, timezone
from pathlib import Path
from statistics import fmean

import pytest
import yaml
from typer.testing import CliRunner

from calibration.cli import app
from calibration.measurements import RunMeasurement, SourceRef, append_measurements
from calibration.report import Report, Row, SyncRow, band_of
from calibration.targets import Target, divided, quantity
from twin.evaluate import Evaluation
from twin.profile import CrossValidation, embedded_profile, load_profile
from twin.scenario import load_scenario
from twin.sim.step import simulate

REPO = Path(__file__).resolve().parents[2]
SCENARIOS = REPO / "scenarios"
A3_PROFILE = REPO / "twin" / "profiles" / "a3.yaml"
CPU_PROFILE = REPO / "twin" / "profiles" / "cpu.yaml"


@pytest.fixture(scope="module")
def a3_report(tmp_path_factory) -> tuple[dict, Path]:
    """`calibration report --json --plot` over every scenario with the embedded a3 profile (run once)."""
    png = tmp_path_factory.mktemp("report") / "a3.png"
    result = CliRunner().invoke(app, ["report", "--profile", str(A3_PROFILE), "--cases", str(SCENARIOS), "--json",
                                      "--plot", str(png)])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout), png


def test_the_file_is_the_embedded_profile():
    assert load_profile(A3_PROFILE) == embedded_profile("a3")


def test_fitted_and_held_out_cases(a3_report):
    report, _ = a3_report
    groups = {r["case"]: r["group"] for r in report["rows"]}
    assert {c for c, g in groups.items() if g == "fitted"} <= set(report["fitted_cases"])
    # C3-d2d's update and ref set the Ray dispatch terms: a fitted case (the profile's provenance names it); C2's
    # eager point, whose ladder step changed three things at once, is judged (since a3-fit-21)
    eager, real = "c2-dsr1-a3-128-eager-gloo", "c1-dsr1-a3-128-real-weights"
    recipe = [g for c, g in groups.items() if c.startswith(("c1-", "c2-", "c3-")) and c not in (eager, real)]
    assert recipe and all(g == "fitted" for g in recipe)
    held_out = {c for c, g in groups.items() if g == "held_out"}
    assert held_out == {eager, real, "c5-qwen25-32b-a3-16dies", "c5-qwen25-7b-a3-16dies", "c5-qwen3-8b-a3-16dies",
                        "c5-dsr1-a3-384dies", "c5-dapo-qwen3-30b-a3b-a3-16dies", "c5-dapo-qwen3-32b-a3-16dies",
                        "c5-dapo-qwen25-32b-a3-64dies", "c5-dapo-qwen25-32b-a3-64dies-pp4",
                        "c10-grpo-qwen3-235b-a3-128dies-32k", "c6-grpo-qwen3-30b-a3b-a3-16dies-sglang",
                        "c10-dapo-qwen3-235b-a3-128dies-34k", "c10-rollout-qwen3-235b-a3-128dies-tp4",
                        "c10-rollout-qwen3-235b-a3-128dies-tp1", "c10-train-qwen3-235b-a3-128dies-cp4",
                        "c10-train-qwen3-235b-a3-128dies-cp8", "c10-rollout-qwen3-235b-a3-128dies-bs192",
                        "c10-rollout-qwen3-235b-a3-128dies-bs256", "c10-rollout-qwen3-235b-a3-128dies-ge-multi-256",
                        "c10-rollout-qwen3-235b-a3-128dies-ge-single-64",
                        "c10-rollout-qwen3-235b-a3-128dies-ge-single-48"}
    assert not held_out & set(report["fitted_cases"])
    skipped = report["skipped"]
    assert "reference only" in skipped["c2-dsr1-a3-128-graph-basic"]
    assert "reference only" in skipped["c10-rollout-qwen3-235b-a3-128dies-bs128"]
    assert "reference only" in skipped["c10-rollout-qwen3-235b-a3-128dies-ge-single-256"]
    assert "no stage, step or tokens/s value" in skipped["c4-dsr1-reshard-8dies"]
    assert skipped["c5-qwen25-32b-a2-16npus"] == "cluster kind a2, the profile's is a3"


def test_memory_peak_is_the_published_gib_against_the_allocator_peak(a3_report):
    """C6's 49.14 is verl's max_memory_allocated() / 1024**3: 52.76 GB, against the twin's torch-allocated peak of
    the trainer's passes (no framework memory outside the allocator, no fragmentation)."""
    from twin.cost_models.memory import allocated_peak_gb

    report, _ = a3_report
    groups = {r["case"]: r["group"] for r in report["memory"]}
    assert groups == {"c6-gspo-qwen3-30b-a3b-a3-16dies": "fitted", "c6-grpo-qwen3-30b-a3b-a3-16dies-sglang": "held_out"}
    [row] = [r for r in report["memory"] if r["group"] == "fitted"]
    assert row["measured_gb"] == pytest.approx(49.14 * 2**30 / 1e9, rel=1e-12)
    ev = Evaluation(load_scenario(SCENARIOS / f"{row['case']}.yaml"), load_profile(A3_PROFILE))
    assert row["predicted_gb"] == pytest.approx(allocated_peak_gb(ev.train_memory, ev.rollout_memory, True),
                                                rel=1e-12)
    assert row["error"] == pytest.approx(row["predicted_gb"] / row["measured_gb"] - 1, rel=1e-12)


@pytest.mark.parametrize("kind", ["a2", "a3"])
def test_every_published_c6_memory_peak_is_predicted_within_10_percent(kind):
    """Issue 9's memory bar on the verl nightly baselines that publish a peak (A2 Moonlight, Qwen3-8B FSDP GSPO and
    PPO, A3 Qwen3-30B-A3B GSPO and GRPO with SGLang)."""
    from calibration.report import build_report

    cases = [load_scenario(p) for p in sorted(SCENARIOS.glob("c6-*.yaml"))]
    memory = build_report(embedded_profile(kind), cases).memory
    assert len(memory) == {"a2": 3, "a3": 2}[kind]
    assert all(abs(m.error) <= 0.10 for m in memory), [(m.case, round(m.error, 4)) for m in memory]


def test_rows_match_the_scenarios_and_an_independent_simulation(a3_report):
    report, _ = a3_report
    rows = {(r["case"], r["quantity"]): r for r in report["rows"]}
    sc = load_scenario(SCENARIOS / "c5-qwen3-8b-a3-16dies.yaml")
    row = rows[(sc.name, "tps_per_device")]
    assert row["measured"] == sc.measured.tps_per_device
    result, _ = simulate(Evaluation(sc, load_profile(A3_PROFILE)))
    # its config leaves MindSpeed-RL's log_max_throughput on: every response counted at the step's longest prompt
    # (fixed at 512) and response (256 lognormal draws of mean 4096 reach the 8192 limit), not the means
    assert sc.measured.tps_tokens == "max"
    longest = result.tps_per_device * (512 + 8192) / (512 + 4096)
    assert row["predicted"] == pytest.approx(longest, rel=1e-9)
    assert row["error"] == pytest.approx(longest / sc.measured.tps_per_device - 1, rel=1e-9)
    mean = load_scenario(SCENARIOS / "c5-qwen25-7b-a3-16dies.yaml")  # log_max_throughput false: the means
    result, _ = simulate(Evaluation(mean, load_profile(A3_PROFILE)))
    assert rows[(mean.name, "tps_per_device")]["predicted"] == pytest.approx(result.tps_per_device, rel=1e-9)
    ratio = rows[("c2-dsr1-a3-128-eager-gloo", "rollout_tps_per_card")]
    assert ratio["reference"] == "c2-dsr1-a3-128-graph-basic" and ratio["measured"] == pytest.approx(162 / 419)
    zero = rows[("c1-dsr1-a3-128", "stage:old_log_prob")]
    assert zero["measured"] == 0 and zero["error_unit"] == "s" and zero["error"] == zero["predicted"]


def test_mape_by_hand(a3_report):
    report, _ = a3_report
    rows = report["rows"]
    # held out, step and tokens/s: the C5 throughputs, C10's GRPO step and tokens/s and DAPO step, C2's eager ladder
    # (a ratio: a judge case since a3-fit-21), the real-weight DeepSeek-R1 run's step and tokens/s, the nightly
    # SGLang run's step and tokens/s;
    # |predicted / measured - 1| averaged; held-out stages: C10's and the real-weight run's, of which the skipped
    # old-policy passes (measured 0) count in seconds, not in the MAPE (C7's source's two eager runs are fitting cases
    # of a3-fit-21)
    held = [r for r in rows if r["group"] == "held_out"]
    e2e = [r for r in held if not r["quantity"].startswith("stage:")]
    by_hand = fmean(abs(r["predicted"] / r["measured"] - 1) for r in e2e)
    assert report["mape"]["held_out"]["end_to_end"] == {"value": pytest.approx(by_hand), "rows": 16, "in_seconds": 0}
    stage_rows = [r for r in held if r["quantity"].startswith("stage:")]
    c10 = "c10-{}-qwen3-235b-a3-128dies-{}".format
    assert sorted((r["case"], r["quantity"]) for r in stage_rows) == sorted(
        [(c10("dapo", "34k"), f"stage:{s}") for s in ("advantage", "reward", "rollout", "update")]
        + [(c10("grpo", "32k"), f"stage:{s}") for s in ("advantage", "old_log_prob", "ref", "reward", "rollout",
                                                         "update")]
        + [(c10("rollout", tp), "stage:rollout") for tp in ("tp1", "tp4", "bs192", "bs256", "ge-multi-256",
                                                            "ge-single-64", "ge-single-48")]
        + [(c10("train", cp), "stage:update") for cp in ("cp4", "cp8")]
        + [("c1-dsr1-a3-128-real-weights", f"stage:{s}") for s in ("advantage", "offload", "old_log_prob", "ref",
                                                                   "reshard", "reward", "rollout", "update")])
    counted = [r for r in stage_rows if r["measured"]]
    stage_mape = fmean(abs(r["predicted"] / r["measured"] - 1) for r in counted)
    assert report["mape"]["held_out"]["stages"] == {"value": pytest.approx(stage_mape), "rows": 25, "in_seconds": 2}
    # fitted stages: every stage row but the one measured as 0
    stages = [r for r in rows if r["group"] == "fitted" and r["quantity"].startswith("stage:") and r["measured"]]
    fitted = report["mape"]["fitted"]["stages"]
    assert fitted["rows"] == len(stages) and fitted["in_seconds"] == 1
    assert fitted["value"] == pytest.approx(fmean(abs(r["predicted"] / r["measured"] - 1) for r in stages))


def test_ablations_are_the_ratio_rows_judged_against_the_bar(a3_report):
    report, _ = a3_report
    ablations = {(a["case"], a["quantity"]): a for a in report["ablations"]}
    ratios = {(r["case"], r["quantity"]): r for r in report["rows"] if r["reference"]}
    assert ablations.keys() == ratios.keys()
    for key, a in ablations.items():
        row = ratios[key]
        assert (a["measured_ratio"], a["predicted_ratio"], a["reference"]) == (row["measured"], row["predicted"],
                                                                                row["reference"])
        assert a["same_direction"] == ((row["measured"] - 1) * (row["predicted"] - 1) > 0)
        assert a["meets_bar"] == (a["same_direction"] and abs(row["error"]) <= 0.25)
    assert ablations[("c10-rollout-qwen3-235b-a3-128dies-tp1", "stage:rollout")]["meets_bar"]
    assert ablations[("c10-train-qwen3-235b-a3-128dies-cp8", "stage:update")]["meets_bar"]
    for bs in ("bs192", "bs256"):  # the rollout batch ablation (C10 section 2.3.3)
        assert ablations[(f"c10-rollout-qwen3-235b-a3-128dies-{bs}", "stage:rollout")]["meets_bar"]
    # C10's graph table (section 2.2.2) against one shape at 256: several shapes (met since a step runs the smallest
    # captured size that holds the engine's busiest rank), one shape at 48 (met since a decode step's GEMMs and
    # attention run one after the other, the A3 GEMM's compute after its weight read): -17.9, -22.7 % on a3-fit-26
    for row in ("multi-256", "single-48"):
        assert ablations[(f"c10-rollout-qwen3-235b-a3-128dies-ge-{row}", "stage:rollout")]["meets_bar"]
    # C2's eager ladder, a judge case since a3-fit-21: the twin takes graph mode's share of 162 -> 419 tokens/s per
    # card, not AIV's or vLLM V1's (the same step of the ladder), so it predicts too little of the gain (+41.9 %)
    eager = ablations[("c2-dsr1-a3-128-eager-gloo", "rollout_tps_per_card")]
    assert eager["same_direction"] and not eager["meets_bar"]


@pytest.mark.xfail(strict=True, reason="a3-fit-26: one graph shape of 64 with continuous batching predicted x0.970 "
                   "of one shape of 256 where it ran x1.19 (C10 2.2.2): at the eager host cost C7's source gives, the "
                   "eager steps a prefill forces no longer make up what continuous batching costs in graph mode")
def test_a_single_graph_shape_of_64_is_slower_than_one_of_256_as_measured(a3_report):
    report, _ = a3_report
    ablations = {(a["case"], a["quantity"]): a for a in report["ablations"]}
    assert ablations[("c10-rollout-qwen3-235b-a3-128dies-ge-single-64", "stage:rollout")]["meets_bar"]


def test_an_ablation_on_the_wrong_side_of_one_misses_the_bar_however_close():
    row = Row(Target("b", "step", 1.05, reference="a"), "held_out", 0.97)
    assert row.is_ablation and abs(row.error) < 0.25 and not row.same_direction and not row.meets_ablation_bar
    assert not Row(Target("b", "step", 1.05), "held_out", 1.05).is_ablation


def test_mape_of_rows():
    def row(case: str, quantity: str, measured: float, predicted: float, group: str = "fitted") -> Row:
        return Row(Target(case, quantity, measured), group, predicted)

    report = Report(embedded_profile("a3"), [
        row("a", "step", 100.0, 110.0), row("a", "tps_per_card", 50.0, 40.0),
        row("a", "stage:rollout", 10.0, 9.0), row("a", "stage:old_log_prob", 0.0, 2.0),
        row("b", "step", 200.0, 150.0, "held_out"),
    ])
    assert report.mape("fitted", "end_to_end").value == pytest.approx((0.1 + 0.2) / 2)
    assert report.mape("fitted", "stages").value == pytest.approx(0.1)
    assert report.mape("fitted", "stages").in_seconds == 1
    assert report.mape("held_out", "end_to_end").value == pytest.approx(0.25)
    assert report.mape("held_out", "stages").value is None


def test_band_coverage_by_hand():
    """The band `twin simulate` prints: the stage's own leave-one-case-out error, else the step's; a throughput's is
    its time's band inverted; none for a ratio or a stage measured as 0."""
    cv = CrossValidation(cases=["x"], step_rel_error=0.05, stages_rel_error={"rollout": 0.2})
    step = band_of(Target("a", "step", 100.0), 110.0, cv)
    assert step == pytest.approx((104.5, 115.5))
    assert band_of(Target("a", "stage:update", 100.0), 100.0, cv) == pytest.approx((95.0, 105.0))
    assert band_of(Target("a", "stage:rollout", 100.0), 90.0, cv) == pytest.approx((72.0, 108.0))
    assert band_of(Target("a", "tps_per_card", 100.0), 95.0, cv) == pytest.approx((95 / 1.05, 95 / 0.95))
    assert band_of(Target("a", "rollout_tps_per_card", 100.0), 95.0, cv) == pytest.approx((95 / 1.2, 95 / 0.8))
    assert band_of(Target("a", "step", 1.1, reference="b", reference_measured=1.0), 1.0, cv) is None
    assert band_of(Target("a", "stage:ref", 0.0), 3.0, cv) is None
    rows = [Row(Target("a", "step", 100.0), "held_out", 110.0, band=step),
            Row(Target("a", "stage:rollout", 100.0), "held_out", 90.0,
                band=band_of(Target("a", "stage:rollout", 100.0), 90.0, cv)),
            Row(Target("b", "step", 100.0), "fitted", 101.0, band=(95.95, 106.05)),
            Row(Target("c", "step", 1.1, reference="b", reference_measured=1.0), "held_out", 1.0)]
    assert [r.in_band for r in rows] == [False, True, True, None]
    report = Report(embedded_profile("a3"), rows)
    assert report.band_coverage("held_out") == (1, 2) and report.band_coverage("fitted") == (1, 1)
    assert report.to_json()["band_coverage"] == {"fitted": {"inside": 1, "rows": 1},
                                                 "held_out": {"inside": 1, "rows": 2}}


def test_the_cases_whose_lengths_are_known_have_their_own_mape():
    """Held out: a step 10 % long with published lengths and a throughput 30 % short with assumed ones: 20 % over
    both, 10 % over the known; the report's cases state it per case (measured.lengths) and C5's are assumed."""
    rows = [Row(Target("a", "step", 100.0), "held_out", 110.0, known_lengths=True),
            Row(Target("b", "tps_per_card", 100.0), "held_out", 70.0)]
    report = Report(embedded_profile("a3"), rows)
    assert report.mape("held_out", "end_to_end").value == pytest.approx(0.2)
    known = report.mape("held_out", "end_to_end", known_lengths=True)
    assert known.value == pytest.approx(0.1) and known.rows == 1
    assert report.to_json()["mape_known_lengths"]["held_out"]["end_to_end"]["rows"] == 1
    assert load_scenario(SCENARIOS / "c5-qwen3-8b-a3-16dies.yaml").measured.lengths == "assumed"
    assert load_scenario(SCENARIOS / "c1-dsr1-a3-128-real-weights.yaml").measured.lengths == "published"


def test_disaggregated_weight_syncs_are_rows_of_their_own_and_a_sub_floor_one_is_not_averaged():
    """The C9 cases under the GPU profile: one row each against `twin weight-sync`'s prediction; the 7B checkpoint-
    engine sync (0.02 s) is below its floor (15.2 GB over NVLink's 450 GB/s: 0.034 s) and stays out of the MAPE."""
    from calibration.report import build_report
    from twin.disaggregated import SyncEvaluation

    profile = embedded_profile("h20")
    cases = [load_scenario(p) for p in sorted(SCENARIOS.glob("c9-*.yaml"))]
    report = build_report(profile, cases)
    assert report.rows == [] and len(report.sync) == 6
    for row, sc in zip(report.sync, cases, strict=True):
        assert row.predicted_s == SyncEvaluation(sc, profile).time().seconds
        assert row.measured_s == sc.measured.stages_s["weight_sync"] and row.group == "held_out"
    below = [r.case for r in report.sync if r.below_floor]
    assert below == ["c9-qwen25-math-7b-h20-4-4-checkpoint-engine"]
    mape = report.sync_mape("held_out")
    assert mape.rows == 5 and mape.value == pytest.approx(fmean(abs(r.error) for r in report.sync if not r.below_floor))
    assert report.to_json()["weight_sync_mape"]["held_out"]["rows"] == 5


def test_plot_is_a_png(a3_report):
    from matplotlib.image import imread

    _, png = a3_report
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    height, width, _ = imread(png).shape
    assert width >= 1200 and height >= 500


def test_table_output(run_cli):
    result = run_cli("report", "--profile", str(A3_PROFILE), "--cases", str(SCENARIOS / "c1-dsr1-a3-128.yaml"),
                     "--cases", str(SCENARIOS / "c5-qwen3-8b-a3-16dies.yaml"))
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert out.index("fitted cases") < out.index("c1-dsr1-a3-128") < out.index("held out cases")
    assert out.index("held out cases") < out.index("c5-qwen3-8b-a3-16dies") < out.index("MAPE")
    assert "measured as 0 (a skipped stage)" in out and "+0 s *" in out
    assert "measured inside the band `twin simulate` prints" in out and "held out 0 of 1" in out


def test_a_verl_run_is_a_held_out_case(tmp_path, run_cli):
    """--runs/--scenario: the run's steady-state means (step 1 skipped) against the a2 profile's predictions."""
    scenario = SCENARIOS / "own-qwen25-1.5b-a2-8.yaml"
    values = {"timing_s/gen": (90.0, 60.0, 70.0), "timing_s/update_actor": (20.0, 8.0, 9.0),
              "timing_s/step": (130.0, 80.0, 90.0), "perf/throughput": (500.0, 900.0, 1000.0)}
    when = datetime(2026, 1, 1, tzinfo=timezone.utc)
    runs = tmp_path / "runs.jsonl"
    append_measurements(runs, [
        RunMeasurement(key=f"run|r|step={s}|{m}", job="verl", timestamp=when, metric=m, value=v[s - 1], step=s,
                       source=SourceRef(path="metrics.jsonl", line=s))
        for m, v in values.items() for s in (1, 2, 3)])
    a2 = REPO / "twin" / "profiles" / "a2.yaml"
    result = run_cli("report", "--profile", str(a2), "--runs", str(runs), "--scenario", str(scenario), "--json")
    assert result.returncode == 0, result.stderr
    rows = {r["quantity"]: r for r in json.loads(result.stdout)["rows"]}
    assert set(rows) == {"stage:rollout", "stage:update", "step", "tps_per_device"}
    assert all(r["group"] == "held_out" and r["case"] == "own-qwen25-1.5b-a2-8" for r in rows.values())
    assert rows["stage:rollout"]["measured"] == 65.0 and rows["tps_per_device"]["measured"] == 950.0
    predicted, _ = simulate(Evaluation(load_scenario(scenario), load_profile(a2)))
    assert rows["stage:rollout"]["predicted"] == pytest.approx(predicted.stages_s["rollout"], rel=1e-9)
    assert rows["step"]["predicted"] == pytest.approx(predicted.step_s, rel=1e-9)


@pytest.mark.parametrize(("args", "message"), [
    (["--profile", "nope.yaml"], "profile nope.yaml: no such file"),
    (["--profile", str(A3_PROFILE), "--runs", "runs.jsonl"], "--runs and --scenario go together"),
    (["--profile", str(A3_PROFILE), "--cases", "no-such-dir"], "no such file or directory"),
    (["--profile", str(A3_PROFILE), "--cases", "/dev/null"], "cases /dev/null: not a regular file or a directory"),
    (["--profile", str(A3_PROFILE), "--cases", str(SCENARIOS / "c2-dsr1-a3-128-eager-gloo.yaml")],
     "relative to c2-dsr1-a3-128-graph-basic, which is not among the cases"),
    (["--profile", str(A3_PROFILE), "--cases", str(SCENARIOS / "c5-qwen25-32b-a2-16npus.yaml")],
     "none of the 1 cases has measured step, stage or tokens/s values on cluster kind a3"),
    (["--profile", str(A3_PROFILE), "--cases", str(SCENARIOS / "c1-dsr1-a3-128.yaml"),
      "--cases", str(SCENARIOS)], "case c1-dsr1-a3-128 is given twice"),
])
def test_errors_are_one_line(run_cli, args, message):
    result = run_cli("report", *args)
    assert result.returncode == 2 and message in result.stderr, result.stderr
    assert len(result.stderr.splitlines()) == 1 and not result.stdout


def _cpu_case(tmp_path: Path, measured: dict) -> Path:
    """The CPU loop's scenario with `measured` values, written to tmp_path."""
    raw = yaml.safe_load((SCENARIOS / "cpu-tiny-grpo.yaml").read_text())
    path = tmp_path / "case.yaml"
    path.write_text(yaml.safe_dump({**raw, "measured": measured}))
    return path


def test_a_measured_stage_the_twin_does_not_predict_is_refused(tmp_path, run_cli):
    case = _cpu_case(tmp_path, {"stages_s": {"rollout": 1.0, "unknown_stage": 1.0}})
    result = run_cli("report", "--profile", str(CPU_PROFILE), "--cases", str(case))
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.splitlines() == [
        f"calibration: error: scenario {case}: field '(top level)': measured.stages_s: 'unknown_stage' is not a "
        "stage the twin predicts (stages: rollout, reward, old_log_prob, ref, values, advantage, update_critic, "
        "update, reshard, offload)"]


def test_a_prediction_without_bound_is_one_line_never_a_traceback(tmp_path, run_cli):
    """A profile with a fixed rollout term of 1e308 s and a 1.6e308 s poll (0.8e308 s of average wait) predicts a
    rollout beyond a float (inf): its rollout tokens/s would be 0 and its stage error inf; the report names the first
    such value in one line."""
    raw = yaml.safe_load(CPU_PROFILE.read_text())
    raw["params"]["rollout_fixed_s"]["value"] = 1e308
    raw["params"]["rollout_poll_s"]["value"] = 1.6e308
    profile = tmp_path / "poll.yaml"
    profile.write_text(yaml.safe_dump(raw))
    measured = {"step_s": 7.5, "stages_s": {"rollout": 3.0, "update": 3.0}, "rollout_tps_per_card": 100.0}
    result = run_cli("report", "--profile", str(profile), "--cases", str(_cpu_case(tmp_path, measured)))
    assert result.returncode == 2 and "Traceback" not in result.stderr and len(result.stderr.splitlines()) == 1
    assert "profile cpu-base-1 predicts inf for cpu-tiny-grpo: stage:rollout" in result.stderr, result.stderr


def test_divisions_by_a_zero_prediction_or_measurement():
    sc = load_scenario(SCENARIOS / "cpu-tiny-grpo.yaml")
    stages = {"rollout": 0.0, "update": 0.0}
    assert quantity(stages, sc, 2, "rollout_tps_per_card") == math.inf
    assert quantity(stages, sc, 2, "tps_per_device") == math.inf and quantity(stages, sc, 2, "step") == 0.0
    assert divided(3.0, 2.0) == 1.5 and divided(1.0, 0.0) == math.inf and math.isnan(divided(0.0, 0.0))
    row = SyncRow("c", "held_out", "per_tensor", measured_s=0.0, predicted_s=1.0, floor_s=0.1)
    assert row.error == math.inf and row.below_floor


def test_a_run_measured_near_the_largest_float_is_reported_and_plotted(tmp_path, run_cli):
    """Values of 1e308 s average without overflow; the plot leaves what a log axis cannot show to the table."""
    when = datetime(2026, 1, 1, tzinfo=timezone.utc)
    runs = tmp_path / "runs.jsonl"
    append_measurements(runs, [
        RunMeasurement(key=f"run|r|step={s}|{m}", job="verl", timestamp=when, metric=m, value=v, step=s,
                       source=SourceRef(path="metrics.jsonl", line=s))
        for m, v in (("timing_s/gen", 1e308), ("timing_s/step", 1.7e308)) for s in (1, 2, 3)])
    png = tmp_path / "r.png"
    result = run_cli("report", "--profile", str(CPU_PROFILE), "--runs", str(runs), "--scenario",
                     str(SCENARIOS / "cpu-tiny-grpo.yaml"), "--plot", str(png), "--json")
    assert result.returncode == 0, result.stderr
    rows = {r["quantity"]: r for r in json.loads(result.stdout)["rows"]}
    assert rows["stage:rollout"]["measured"] == 1e308 and rows["step"]["measured"] == pytest.approx(1.7e308)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
