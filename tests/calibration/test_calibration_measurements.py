"""The record schema, the append-only writer and the tolerant loader."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest
from pydantic import ValidationError

from calibration.measurements import (
    RunMeasurement,
    SourceRef,
    Stats,
    append_measurements,
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
