"""Ingested verl run records -> a scenario's measured values (`calibration.runs`, `calibration case`)."""

from __future__ import annotations

import re
from datetime import datetime, timezone
from pathlib import Path
from statistics import fmean

import pytest
import yaml

from calibration.errors import CalibrationError
from calibration.ingest import selected
from calibration.measurements import RunInfo, RunMeasurement, SourceRef, append_measurements
from calibration.runs import STAGE_METRICS, STEP_METRIC, THROUGHPUT_METRIC, load_run, mean, run_case
from twin.errors import TwinError
from twin.results import STAGES
from twin.scenario import load_scenario

REPO = Path(__file__).resolve().parents[2]
SCENARIO = REPO / "scenarios" / "own-qwen25-1.5b-a2-8.yaml"  # FSDP + vLLM on 8 A2 cards

# metric -> value at steps 1, 2, 3; step 1 pays the engine start-up. No old_log_prob (skip_old_log_prob); the
# reference pass is logged at step 3 only; timing_s/testing and actor/grad_norm are not stages of the twin.
VALUES = {
    "timing_s/gen": (50.0, 10.0, 12.0),
    "timing_s/reward": (2.0, 1.0, 1.5),
    "timing_s/ref": (None, None, 4.0),
    "timing_s/adv": (0.5, 0.25, 0.75),
    "timing_s/update_actor": (30.0, 6.0, 8.0),
    "timing_s/update_weights": (3.0, 0.5, 0.7),
    "timing_s/testing": (9.0, 9.0, 9.0),
    "timing_s/step": (90.0, 20.0, 25.0),
    "perf/throughput": (100.0, 200.0, 300.0),
    "actor/grad_norm": (1.0, 2.0, 3.0),
}
STARTED = datetime(2026, 1, 1, tzinfo=timezone.utc)


def run_info(kind: str = "a2", cards: int = 8) -> RunInfo:
    return RunInfo(record_path="/runs/run.json", scenario="own-qwen25-1.5b-a2-8", cluster_kind=kind, cards=cards,
                   devices=cards, plan_path="/runs/plan.json", plan_sha256="ab" * 32, started_at=STARTED)


def records(run: str = "r1", info: RunInfo | None = None) -> list[RunMeasurement]:
    """The "run" records `calibration ingest` writes for the three steps of VALUES."""
    return [
        RunMeasurement(key=f"run|{run}|step={step}|{metric}", job="verl", timestamp=STARTED, metric=metric,
                       value=values[step - 1], step=step, source=SourceRef(path="/runs/metrics.jsonl", line=step),
                       run=info)
        for metric, values in VALUES.items() for step in (1, 2, 3) if values[step - 1] is not None
    ]


def mean_of(metric: str, steps: tuple[int, ...]) -> float:
    return fmean(v for s in steps if (v := VALUES[metric][s - 1]) is not None)


@pytest.fixture
def runs_file(tmp_path) -> Path:
    path = tmp_path / "runs.jsonl"
    append_measurements(path, records(info=run_info()))
    with path.open("a") as f:
        f.write("not a record\n")
    return path


def test_mapped_metrics_are_ingested_and_are_twin_stages():
    assert set(STAGE_METRICS.values()) <= set(STAGES)
    assert all(selected(m) for m in [*STAGE_METRICS, STEP_METRIC, THROUGHPUT_METRIC])


def test_steady_state_means_skip_the_start_up_step(runs_file):
    run = load_run(runs_file, skip_steps=1)
    assert run.steps == [1, 2, 3] and run.used == [2, 3] and run.bad_lines == 1 and run.cluster == ("a2", 8)
    m = run.measured
    assert m.use == "judge"
    expected = {"rollout": "timing_s/gen", "reward": "timing_s/reward", "ref": "timing_s/ref",
                "advantage": "timing_s/adv", "update": "timing_s/update_actor", "reshard": "timing_s/update_weights"}
    assert m.stages_s == pytest.approx({stage: mean_of(metric, (2, 3)) for stage, metric in expected.items()})
    assert m.stages_s["rollout"] == pytest.approx(11.0) and m.stages_s["ref"] == pytest.approx(4.0)
    assert m.step_s == pytest.approx(22.5) and m.tps_per_device == pytest.approx(250.0)
    assert m.tps_per_card is None
    assert "steps 2..3" in m.source and "step 1 skipped (engine start-up)" in m.source


def test_no_skip_averages_every_step(runs_file):
    m = load_run(runs_file, skip_steps=0, use="fit").measured
    assert m.use == "fit"
    assert m.stages_s["rollout"] == pytest.approx(24.0) and m.step_s == pytest.approx(45.0)
    assert m.stages_s["ref"] == pytest.approx(4.0)  # logged at step 3 only
    assert "no step skipped" in m.source


def test_run_case_replaces_measured_and_checks_the_cluster(runs_file):
    sc = load_scenario(SCENARIO)
    run = load_run(runs_file, skip_steps=1)
    case = run_case(sc, run)
    assert case.measured == run.measured
    assert case.model_copy(update={"measured": None}) == sc.model_copy(update={"measured": None})
    other = sc.model_copy(update={"cluster": sc.cluster.model_copy(update={"cards": 16})})
    with pytest.raises(CalibrationError, match="the run was on 8 a2 cards"):
        run_case(other, run)


@pytest.mark.parametrize(("content", "skip", "message"), [
    (lambda: records(), 3, "3 steps (1..3); skipping the first 3 leaves none"),
    (lambda: records("r1") + records("r2"), 1, "records of 2 runs (r1, r2)"),
    (lambda: [], 1, "no \"run\" records"),
    (lambda: [r for r in records() if r.metric == "actor/grad_norm"], 1, "none of timing_s/gen"),
])
def test_unusable_runs_are_one_line_errors(tmp_path, content, skip, message):
    path = tmp_path / "runs.jsonl"
    path.write_text("")
    append_measurements(path, content())
    with pytest.raises(CalibrationError, match=re.escape(message)) as err:
        load_run(path, skip_steps=skip)
    assert "\n" not in str(err.value)
    with pytest.raises(CalibrationError, match="no such file"):
        load_run(tmp_path / "missing.jsonl", skip_steps=1)


def test_case_command_writes_a_scenario_and_never_overwrites(tmp_path, runs_file, run_cli):
    out = tmp_path / "case.yaml"
    result = run_cli("case", str(runs_file), "--scenario", str(SCENARIO), "-o", str(out))
    assert result.returncode == 0, result.stderr
    assert "1 lines are not measurement records" in result.stderr
    case = load_scenario(out)
    assert case.measured == load_run(runs_file, skip_steps=1).measured
    assert case.model_copy(update={"measured": None}) == load_scenario(SCENARIO)
    written = out.read_bytes()
    again = run_cli("case", str(runs_file), "--scenario", str(SCENARIO), "-o", str(out), "--use", "fit")
    assert again.returncode == 2 and "never overwritten" in again.stderr
    assert len(again.stderr.splitlines()) == 1 and out.read_bytes() == written


def test_case_command_errors_are_one_line(tmp_path, runs_file, run_cli):
    a3 = REPO / "scenarios" / "c1-dsr1-a3-128.yaml"
    for args, message in [
        ([str(tmp_path / "none.jsonl"), "--scenario", str(SCENARIO)], "no such file"),
        ([str(runs_file), "--scenario", str(a3)], "the run was on 8 a2 cards"),
        ([str(runs_file), "--scenario", str(SCENARIO), "--skip-steps", "5"], "leaves none to average"),
    ]:
        result = run_cli("case", *args, "-o", str(tmp_path / "case.yaml"))
        assert result.returncode == 2 and message in result.stderr, result.stderr
        assert len(result.stderr.splitlines()) == 1
    assert not (tmp_path / "case.yaml").exists()


def _scenario_with(tmp_path: Path, where: str, value: object, source: Path = SCENARIO) -> Path:
    """`source` with the field at dotted path `where` set to `value`, written to tmp_path."""
    raw = yaml.safe_load(source.read_text())
    *parents, leaf = where.split(".")
    node = raw
    for key in parents:
        node = node.setdefault(key, {})
    node[leaf] = value
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


@pytest.mark.parametrize(("where", "value", "message"), [
    ("cluster.kind", "nope", "unknown cluster kind 'nope'"),
    ("model", "no-such-model", "unknown model 'no-such-model'"),
    ("layout.rollout.tp", 3, "TP x DP"),
    ("layout.rollout.max_num_seqs", 10**12, "max_num_batched_tokens >= max_num_seqs"),
    ("profile", "/dev/zero", "profile /dev/zero: is a device"),
])
def test_case_checks_the_scenario_as_twin_simulate_does(tmp_path, runs_file, where, value, message, run_cli):
    scenario = _scenario_with(tmp_path, where, value)
    out = tmp_path / "case.yaml"
    result = run_cli("case", str(runs_file), "--scenario", str(scenario), "-o", str(out))
    assert result.returncode == 2 and message in result.stderr, result.stderr
    assert len(result.stderr.splitlines()) == 1 and "Traceback" not in result.stderr
    assert not out.exists()


def test_a_case_is_validated_whole_before_it_is_written(tmp_path):
    """A disaggregated scenario measures its weight sync only: the run's stages do not make a case of it."""
    path = tmp_path / "runs.jsonl"
    append_measurements(path, records())
    separate = load_scenario(REPO / "scenarios" / "c9-qwen25-math-7b-h20-4-4-per-tensor.yaml")
    with pytest.raises(TwinError, match="a separate placement measures its weight sync only"):
        run_case(separate, load_run(path, skip_steps=1))


def test_values_near_the_largest_float_average_without_overflow(tmp_path):
    path = tmp_path / "runs.jsonl"
    append_measurements(path, [r.model_copy(update={"value": 1e308}) if r.metric == "timing_s/gen" else r
                               for r in records()])
    assert load_run(path, skip_steps=1).measured.stages_s["rollout"] == pytest.approx(1e308)
    assert mean([1e308, 1.7e308, 1e308]) == pytest.approx(1.2333e308, rel=1e-4)
    assert mean([-2.0, 0.0, 5.0]) == 1.0 and mean([0.0, 0.0]) == 0.0


def test_a_mean_the_scenario_refuses_names_the_runs_file(tmp_path):
    path = tmp_path / "runs.jsonl"
    append_measurements(path, [r.model_copy(update={"value": 0.0}) if r.metric == STEP_METRIC else r
                               for r in records()])
    with pytest.raises(TwinError, match=f"^runs {re.escape(str(path))}: field 'step_s': Input should be greater"):
        load_run(path, skip_steps=1)
