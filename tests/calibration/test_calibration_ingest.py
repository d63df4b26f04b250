"""`calibration ingest`: verl's own metrics file and console lines, damaged, plus run records and plans."""

from __future__ import annotations

import hashlib
import json
import math
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pytest

from calibration.ingest import selected, unit_of
from calibration.measurements import load_measurements
from calibration.verl_logs import parse_log

REPO = Path(__file__).resolve().parents[2]
tracking = pytest.importorskip("verl.utils.tracking")
aggregate_logger = pytest.importorskip("verl.utils.logger.aggregate_logger")


def step_metrics(step: int) -> dict:
    """Metrics as verl's trainer hands them to its loggers (numpy scalars included)."""
    return {
        "timing_s/gen": 1.25 * step,
        "timing_s/update_actor": np.float64(0.5 + step),
        "timing_s/step": 3.0 * step,
        "perf/throughput": np.float32(100.0 + step),
        "perf/max_memory_allocated_gb": 1.5,
        "response_length/mean": 14.0 + step,
        "actor/grad_norm": float("nan") if step == 2 else 0.75,
        "actor/pg_loss": -0.1,  # not a calibration metric
        "training/global_step": step,
    }


SELECTED_PER_STEP = 7  # the metrics above that are ingested


@pytest.fixture
def metrics_file(tmp_path, monkeypatch):
    """Three steps written by verl's FileLogger, then a garbage line, a JSON line without a step and a cut line."""
    path = tmp_path / "metrics.jsonl"
    monkeypatch.setenv("VERL_FILE_LOGGER_PATH", str(path))
    logger = tracking.FileLogger("proj", "exp")
    for step in (1, 2, 3):
        logger.log(step_metrics(step), step=step)
    logger.finish()
    text = path.read_text().splitlines()
    text.insert(1, "\x00\x01garbage")
    text.insert(3, '{"no_step": true}')
    cut = json.dumps({"step": 4, "data": {"timing_s/gen": 5.0}})[:25]
    path.write_text("\n".join(text) + "\n" + cut)
    return path


@pytest.fixture
def console_log(tmp_path):
    """verl's console lines behind Ray prefixes, other output, a malformed metrics line and a cut one."""
    lines = ["Creating file logger at /x", "(TaskRunner pid=42) WARNING something unrelated"]
    for step in (1, 2, 3):
        lines.append(f"(TaskRunner pid=42) {aggregate_logger.concat_dict_to_str(step_metrics(step), step=step)}")
    lines.insert(3, "(TaskRunner pid=42) step:9 - timing_s/gen:12abc - perf/throughput:1.0")
    last = aggregate_logger.concat_dict_to_str(step_metrics(4), step=4)
    path = tmp_path / "train.log"
    path.write_text("\n".join(lines) + "\n" + last[:40])
    return path


def test_metric_selection_and_units():
    assert selected("timing_s/gen") and selected("perf/throughput") and selected("actor/grad_norm")
    assert selected("perf/max_memory_allocated_gb") and selected("response_length/mean")
    assert not selected("actor/pg_loss") and not selected("training/global_step")
    assert unit_of("timing_s/gen") == "s" and unit_of("perf/max_memory_allocated_gb") == "GiB"
    assert unit_of("perf/throughput") == "tokens/s/device" and unit_of("response_length/mean") == "tokens"


def test_parse_metrics_jsonl_reports_bad_lines(metrics_file):
    parsed = parse_log(metrics_file, metrics_file.read_text())
    assert parsed.format == "metrics-jsonl"
    assert [s.step for s in parsed.steps] == [1, 2, 3]
    assert [b.line for b in parsed.bad_lines] == [2, 4, 6]
    assert parsed.steps[1].values["actor/grad_norm"] is None  # NaN, written as null by orjson


def test_parse_console_reports_bad_lines(console_log):
    parsed = parse_log(console_log, console_log.read_text())
    assert parsed.format == "console"
    assert [s.step for s in parsed.steps] == [1, 2, 3]
    assert parsed.steps[0].values["timing_s/update_actor"] == 1.5  # np.float64(1.5)
    assert [b.line for b in parsed.bad_lines] == [4, 7]
    assert "cut off" in parsed.bad_lines[1].reason
    assert parsed.other_lines == 2


@pytest.mark.parametrize(("log_fixture", "bad"), [("metrics_file", "3 bad lines skipped: 2 (not JSON"),
                                                   ("console_log", "2 bad lines skipped: 4 (value is not")])
def test_ingest_keeps_good_lines_and_reports_the_rest(request, tmp_path, log_fixture, bad, run_cli):
    log = request.getfixturevalue(log_fixture)
    out = tmp_path / "m.jsonl"
    result = run_cli("ingest", str(log), "-o", str(out))
    assert result.returncode == 0, result.stderr
    records = load_measurements(out).records
    assert len(records) == 3 * SELECTED_PER_STEP - 1  # one NaN grad norm is not a value
    assert bad in result.stderr
    assert "1 metric values were NaN/inf/null" in result.stderr
    by_key = {(r.step, r.metric): r for r in records}
    assert by_key[(2, "timing_s/gen")].value == 2.5 and by_key[(2, "timing_s/gen")].unit == "s"
    assert math.isclose(by_key[(3, "perf/throughput")].value, 103.0)
    assert by_key[(1, "actor/grad_norm")].value == 0.75
    assert all(r.kind == "run" and r.source.path == str(log.resolve()) for r in records)
    assert len({r.key for r in records}) == len(records)


def test_ingest_never_overwrites_and_append_skips_what_is_there(tmp_path, metrics_file, run_cli):
    out = tmp_path / "m.jsonl"
    assert run_cli("ingest", str(metrics_file), "-o", str(out)).returncode == 0
    first = out.read_bytes()
    refused = run_cli("ingest", str(metrics_file), "-o", str(out))
    assert refused.returncode != 0 and "--append" in refused.stderr and len(refused.stderr.splitlines()) == 1
    appended = run_cli("ingest", str(metrics_file), "-o", str(out), "--append")
    assert appended.returncode == 0 and "wrote 0 records" in appended.stdout
    assert out.read_bytes() == first


@pytest.fixture(scope="module")
def plan_json(tmp_path_factory) -> dict:
    """A plan.json of the CPU loop's scenario as `twin plan --keep-layout` writes it, as a JSON object."""
    from twin.plan import save_plan
    from twin.planner import fixed_plan
    from twin.scenario import load_scenario

    path = tmp_path_factory.mktemp("plan") / "plan.json"
    save_plan(fixed_plan(load_scenario(REPO / "scenarios" / "cpu-tiny-grpo.yaml")), path)
    return json.loads(path.read_text())


def test_ingest_run_record_and_plan(tmp_path, metrics_file, plan_json, run_cli):
    from executor.run_record import RunRecord, save_record

    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(plan_json))
    record = RunRecord(plan_path=str(plan), plan_sha256="ab" * 32, scenario="tiny-cpu", cluster_kind="cpu",
                       cards=1, devices=2, command=["python", "-m", "verl.trainer.main_ppo"], env={},
                       versions={"verl": "0.9.1"}, host={"hostname": "h"}, workdir=str(tmp_path),
                       log_path="missing.log", metrics_path=metrics_file.name,
                       started_at=datetime(2026, 1, 1, tzinfo=timezone.utc), exit_status=0)
    record_path = tmp_path / "run.json"
    save_record(record, record_path)
    out = tmp_path / "m.jsonl"
    result = run_cli("ingest", str(record_path), "--plan", str(plan), "-o", str(out))
    assert result.returncode == 0, result.stderr
    records = load_measurements(out).records
    assert len(records) == 3 * SELECTED_PER_STEP - 1
    first = records[0]
    assert first.run.scenario == "tiny-cpu" and first.run.devices == 2 and first.run.versions == {"verl": "0.9.1"}
    assert first.plan.sha256 == hashlib.sha256(plan.read_bytes()).hexdigest()
    assert first.plan.scenario == plan_json["scenario"] and first.plan.layout == plan_json["layout"]
    assert first.source.path == str(metrics_file.resolve())


def test_ingest_errors_are_one_line(tmp_path, metrics_file, run_cli):
    unrelated = tmp_path / "notes.txt"
    unrelated.write_text("nothing to see\n")
    not_json = tmp_path / "plan.json"
    not_json.write_text("schema: 1\n")
    cases = [
        (["ingest", str(unrelated), "-o", str(tmp_path / "a.jsonl")], "no verl step metrics"),
        (["ingest", str(metrics_file), "--plan", str(not_json), "-o", str(tmp_path / "b.jsonl")], "not valid JSON"),
        (["ingest", str(metrics_file), "--plan", str(tmp_path / "none"), "-o", str(tmp_path / "c.jsonl")],
         "no such file"),
    ]
    for args, message in cases:
        result = run_cli(*args)
        assert result.returncode != 0
        assert len(result.stderr.strip().splitlines()) == 1 and message in result.stderr, result.stderr
    assert not list(tmp_path.glob("[abc].jsonl"))


def _mutated(plan: dict, where: str, value: object) -> dict:
    """A deep copy of `plan` with the field at dotted path `where` set to `value`."""
    out = json.loads(json.dumps(plan))
    *parents, leaf = where.split(".")
    node = out
    for key in parents:
        node = node[key]
    node[leaf] = value
    return out


@pytest.mark.parametrize(("where", "value", "message"), [
    ("schema", 2, "schema version 2 is not supported"),
    ("layout.train.tp", 0, "field 'layout.train.tp'"),
    ("scenario.cluster.kind", "nope", "unknown cluster kind 'nope'"),
    ("scenario.model", "no-such-model", "unknown model 'no-such-model'"),
    ("scenario.cluster.cards", 0, "field 'scenario.cluster.cards'"),
    ("optimizations", "x", "field 'optimizations'"),
])
def test_a_plan_is_checked_as_the_executor_checks_it(tmp_path, metrics_file, plan_json, where, value, message,
                                                    run_cli):
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(_mutated(plan_json, where, value)))
    result = run_cli("ingest", str(metrics_file), "--plan", str(plan), "-o", str(tmp_path / "m.jsonl"))
    assert result.returncode == 2 and message in result.stderr, result.stderr
    assert len(result.stderr.splitlines()) == 1 and "Traceback" not in result.stderr
    assert not (tmp_path / "m.jsonl").exists()


def test_appends_only_to_a_file_of_records(tmp_path, metrics_file, run_cli):
    scenario = tmp_path / "s.yaml"
    scenario.write_bytes((REPO / "scenarios" / "cpu-tiny-grpo.yaml").read_bytes())
    binary = tmp_path / "b.bin"
    binary.write_bytes(b"\x00\x01\x02\n\xff\xfe\n")
    for target in (scenario, binary):
        before = target.read_bytes()
        result = run_cli("ingest", str(metrics_file), "-o", str(target), "--append")
        assert result.returncode == 2 and "Traceback" not in result.stderr
        assert len(result.stderr.splitlines()) == 1, result.stderr
        assert f"output {target}: not a measurements file" in result.stderr and "line 1:" in result.stderr
        assert target.read_bytes() == before
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    assert run_cli("ingest", str(metrics_file), "-o", str(empty), "--append").returncode == 0
    assert len(load_measurements(empty).records) == 3 * SELECTED_PER_STEP - 1


def test_the_log_a_run_record_names_is_an_input(tmp_path, metrics_file):
    from calibration.ingest import ingest
    from executor.run_record import RunRecord, save_record
    from twin.errors import TwinError

    record = RunRecord(plan_path="plan.json", plan_sha256="ab" * 32, scenario="tiny-cpu", cluster_kind="cpu",
                       cards=1, devices=2, command=["python"], env={}, versions={}, host={}, workdir=str(tmp_path),
                       log_path="missing.log", metrics_path=metrics_file.name,
                       started_at=datetime(2026, 1, 1, tzinfo=timezone.utc), exit_status=0)
    save_record(record, tmp_path / "run.json")
    before = metrics_file.read_bytes()
    with pytest.raises(TwinError, match="is also an input of this command"):
        ingest([tmp_path / "run.json"], metrics_file, append=True)
    assert metrics_file.read_bytes() == before


def test_an_integer_beyond_the_largest_float_is_a_non_finite_value(tmp_path, run_cli):
    log = tmp_path / "m.jsonl"
    huge = "1" + "0" * 400
    log.write_text(f'{{"step": 1, "data": {{"timing_s/gen": {huge}, "timing_s/step": 2.0}}}}\n')
    assert parse_log(log, log.read_text()).steps[0].values == {"timing_s/gen": None, "timing_s/step": 2.0}
    out = tmp_path / "out.jsonl"
    result = run_cli("ingest", str(log), "-o", str(out))
    assert result.returncode == 0, result.stderr
    assert "1 metric values were NaN/inf/null" in result.stderr and "Traceback" not in result.stderr
    assert [(r.metric, r.value) for r in load_measurements(out).records] == [("timing_s/step", 2.0)]


@pytest.mark.parametrize(("data", "message"), [
    ({"timing_s/gen": "1.5", "perf/throughput": {"x": 1}}, "on 1 step lines"),
    ({"timing_s/gen": None, "timing_s/step": None}, "2 NaN/inf/null values"),
    ({"timing_s/gen": -1.0}, "first: line 1: timing_s/gen = -1 is negative"),
])
def test_a_log_without_a_usable_value_is_an_error(tmp_path, data, message, run_cli):
    log = tmp_path / "m.jsonl"
    log.write_text(json.dumps({"step": 1, "data": data}) + "\n")
    out = tmp_path / "out.jsonl"
    result = run_cli("ingest", str(log), "-o", str(out))
    assert result.returncode == 2 and "no usable metric values" in result.stderr, result.stderr
    assert message in result.stderr and len(result.stderr.splitlines()) == 1
    assert not out.exists()


def _log(tmp_path, rows) -> object:
    path = tmp_path / "m.jsonl"
    path.write_text("".join(json.dumps({"step": s, "data": d}) + "\n" for s, d in rows))
    return path


def test_impossible_values_are_refused_line_by_line(tmp_path):
    from calibration.ingest import ingest

    log = _log(tmp_path, [(1, {"timing_s/step": 10.0, "perf/mfu/actor": 0.4}), (2, {"timing_s/step": -5.0}),
                          (-3, {"timing_s/step": 4.0}), (4, {"perf/mfu/actor": 1.5}), (5, {"timing_s/gen": 2.0})])
    result = ingest([log], tmp_path / "out.jsonl")
    assert [(b.line, b.reason) for b in result.reports[0].bad_lines] == [
        (2, "timing_s/step = -5 is negative"), (3, "step -3 is negative"), (4, "perf/mfu/actor = 1.5 exceeds 1")]
    records = load_measurements(tmp_path / "out.jsonl").records
    assert sorted((r.step, r.metric, r.value) for r in records) == [
        (1, "perf/mfu/actor", 0.4), (1, "timing_s/step", 10.0), (5, "timing_s/gen", 2.0)]


def test_run_record_of_another_schema_is_refused(tmp_path):
    from calibration.errors import CalibrationError
    from calibration.ingest import ingest
    from twin.errors import TwinError

    log = _log(tmp_path, [(1, {"timing_s/step": 1.0})])
    record = {"schema": 9, "plan_path": "p", "plan_sha256": "0" * 64, "scenario": "x", "cluster_kind": "a3",
              "cards": 1, "devices": 2, "command": [], "env": {}, "versions": {}, "host": {}, "workdir": str(tmp_path),
              "log_path": "log", "metrics_path": str(log), "started_at": "2026-01-01T00:00:00"}
    (tmp_path / "record.json").write_text(json.dumps(record))
    with pytest.raises((CalibrationError, TwinError), match="run record schema 9 is not supported"):
        ingest([tmp_path / "record.json"], tmp_path / "out.jsonl")


def test_output_is_never_an_input_and_special_files_are_refused(tmp_path):
    import os

    from calibration.ingest import ingest
    from twin.errors import TwinError

    log = _log(tmp_path, [(1, {"timing_s/step": 1.0})])
    before = log.read_bytes()
    with pytest.raises(TwinError, match="is also an input of this command"):
        ingest([log], log, append=True)
    assert log.read_bytes() == before
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(TwinError, match="is a FIFO, not a regular file"):
        ingest([fifo], tmp_path / "out.jsonl")
    with pytest.raises(TwinError, match="is a device"):
        ingest(["/dev/zero"], tmp_path / "out.jsonl")


def _append(args) -> int:
    from calibration.ingest import ingest

    log, out = args
    return ingest([log], out, append=True).written


def test_concurrent_appends_never_duplicate(tmp_path):
    import multiprocessing

    logs = []
    for i in range(4):
        path = tmp_path / f"log{i}.jsonl"
        path.write_text("".join(json.dumps({"step": s, "data": {"timing_s/step": float(s)}}) + "\n"
                                for s in range(1, 40)))
        logs.append(path)
    out = tmp_path / "out.jsonl"
    # the same log four times at once: its records are written exactly once
    with multiprocessing.get_context("fork").Pool(4) as pool:
        written = pool.map(_append, [(logs[0], out)] * 4)
    keys = [json.loads(line)["key"] for line in out.read_text().splitlines()]
    assert sorted(written) == [0, 0, 0, 39] and len(keys) == len(set(keys)) == 39
