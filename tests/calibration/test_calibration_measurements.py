"""The record schema, the append-only writer and the tolerant loader."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest
from pydantic import ValidationError

from calibration.errors import CalibrationError
from calibration.measurements import (
    BadLine,
    RunMeasurement,
    SourceRef,
    Stats,
    append_measurements,
    appendable,
    bad_lines_text,
    load_measurements,
    parse_measurement,
)


def _run_record(step: int) -> RunMeasurement:
    return RunMeasurement(key=f"run|r|step={step}|timing_s/gen", job="verl", timestamp=datetime.now(timezone.utc),
                          metric="timing_s/gen", value=1.5 + step, unit="s", step=step,
                          source=SourceRef(path="/x.jsonl", line=step))


def test_stats_from_samples_orders_and_rejects_inconsistency():
    stats = Stats.from_samples([0.3, 0.1, 0.2], warmup=2)
    assert (stats.min_s, stats.median_s, stats.max_s, stats.repeats) == (0.1, 0.2, 0.3, 3)
    with pytest.raises(ValidationError):
        Stats(warmup=0, repeats=2, samples_s=[0.1, 0.2], min_s=0.2, median_s=0.1, max_s=0.3)
    with pytest.raises(ValidationError):
        Stats(warmup=0, repeats=3, samples_s=[0.1, 0.2], min_s=0.1, median_s=0.15, max_s=0.2)


def test_round_trip_and_unknown_schema(tmp_path):
    record = _run_record(1)
    assert parse_measurement(record.model_dump_json()) == record
    newer = record.model_copy(update={"schema_version": 99}).model_dump_json()
    with pytest.raises(ValidationError):
        parse_measurement(newer)


def test_append_keeps_existing_lines_and_separates_a_partial_one(tmp_path):
    out = tmp_path / "m.jsonl"
    append_measurements(out, [_run_record(1), _run_record(2)])
    before = out.read_bytes()
    with open(out, "ab") as f:
        f.write(b'{"schema_version": 1, "key": "cut')  # a writer killed mid-line
    append_measurements(out, [_run_record(3)])
    assert out.read_bytes().startswith(before)
    loaded = load_measurements(out)
    assert [r.step for r in loaded.records] == [1, 2, 3]
    assert [b.line for b in loaded.bad_lines] == [3]


def test_load_counts_malformed_lines_with_numbers(tmp_path):
    out = tmp_path / "m.jsonl"
    good = _run_record(1).model_dump_json()
    out.write_text("\n".join([good, "garbage", '{"kind": "job"}', "", good.replace("verl", "x")[:50]]))
    loaded = load_measurements(out)
    assert len(loaded.records) == 1
    assert [b.line for b in loaded.bad_lines] == [2, 3, 5]
    assert "partial" in loaded.bad_lines[-1].reason


@pytest.mark.parametrize("value", ["NaN", "Infinity", "-Infinity"])
def test_a_record_holds_finite_numbers_only(tmp_path, value):
    out = tmp_path / "m.jsonl"
    good = _run_record(1).model_dump_json()
    out.write_text(good + "\n" + good.replace('"value":2.5', f'"value":{value}') + "\n")
    loaded = load_measurements(out)
    assert len(loaded.records) == 1
    assert [(b.line, b.reason) for b in loaded.bad_lines] == [(2, "run.value: Input should be a finite number")]


def test_records_are_appended_only_to_a_file_of_records(tmp_path):
    out = tmp_path / "m.jsonl"
    assert appendable(out, "out").records == []  # a new file
    out.write_text("\n")
    assert appendable(out, "out").records == []  # blank lines only
    append_measurements(out, [_run_record(1)])
    assert [r.step for r in appendable(out, "out").records] == [1]
    for content in (b"name: x\nmodel: tiny\n", b'{\n  "schema": 1\n}\n', b"\x00\x01\n",
                    out.read_bytes() + b'{"schema_version": 1, "key": "cut'):
        other = tmp_path / "other"
        other.write_bytes(content)
        with pytest.raises(CalibrationError, match=r"^out: not a measurements file: \d+ lines? (is|are) not "
                                                   r"measurement records \(line \d+: ") as err:
            appendable(other, "out")
        assert "\n" not in str(err.value) and other.read_bytes() == content


def test_bad_lines_in_words():
    bad = [BadLine(1, "Invalid JSON"), BadLine(4, "kind: x"), BadLine(9, "partial last line (no newline)")]
    assert str(bad[0]) == "line 1: Invalid JSON"
    assert bad_lines_text(bad[:1]) == "1 line is not measurement records (line 1: Invalid JSON)"
    assert bad_lines_text(bad) == "3 lines are not measurement records (line 1: Invalid JSON; line 4: kind: x; 1 more)"
