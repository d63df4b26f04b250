"""`calibration ingest`: verl metrics files, console logs and executor run records -> "run" records."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from calibration.errors import CalibrationError
from calibration.measurements import (
    BadLine,
    MeasurementWriter,
    PlanIdentity,
    RunInfo,
    RunMeasurement,
    SourceRef,
    appendable,
)
from calibration.verl_logs import LogFormat, ParsedLog, parse_log
from twin.fileio import MAX_DEPTH, check_target, decode_text, json_depth, parse_mapping, read_bytes, validation_message

MAX_LOG_BYTES = 1 << 30  # a verl metrics file of a long run is tens of MB; 1 GiB bounds the memory it takes

JOB = "verl"
PREFIXES = ("timing_s/", "timing_per_token_ms/", "perf/", "response_length/", "prompt_length/")
NAMES = ("actor/grad_norm", "critic/grad_norm")


def selected(metric: str) -> bool:
    """Stage timings, perf figures, memory metrics, lengths and gradient norms."""
    return metric.startswith(PREFIXES) or metric in NAMES or "memory" in metric


def unit_of(metric: str) -> str | None:
    """The unit verl logs `metric` in (verl's "_gb" metrics divide by 1024**3: GiB)."""
    leaf = metric.rsplit("/", 1)[-1]
    if metric.startswith("timing_s/") or metric == "perf/time_per_step":
        return "s"
    if metric.startswith("timing_per_token_ms/"):
        return "ms"
    if metric.endswith("_gb"):
        return "GiB"
    if metric == "perf/throughput":
        return "tokens/s/device"
    if "mfu" in metric or leaf == "clip_ratio":
        return "fraction"
    if metric.startswith(("response_length/", "prompt_length/")) or metric == "perf/total_num_tokens":
        return "tokens"
    return None


@dataclass
class Source:
    """A log to read, with the run record that named it (if any)."""

    path: Path
    run_id: str
    run: RunInfo | None = None


@dataclass
class SourceReport:
    """What one log yielded; every line that was not used is accounted for here."""

    path: Path
    format: LogFormat
    steps: int
    records: int
    bad_lines: list[BadLine]
    other_lines: int
    non_finite: int
    duplicate_steps: list[int]
    already_in_output: int = 0


@dataclass
class IngestResult:
    reports: list[SourceReport] = field(default_factory=list)
    written: int = 0


def _read_text(path: Path, what: str) -> str:
    """A log through the file boundary (regular files only, at most MAX_LOG_BYTES); undecodable bytes of a
    console log are replaced, so a stray byte costs one unreadable line, not the log."""
    return read_bytes(path, f"{what} {path}", MAX_LOG_BYTES).decode("utf-8", errors="replace")


def plan_identity(path: Path) -> PlanIdentity:
    """Path and sha256 of a plan file checked as `executor run` checks it (twin.plan.plan_from_mapping, then
    executor.plan_check.check_plan), with its "scenario" and "layout" fields as the file holds them; read once."""
    from executor.plan_check import check_plan
    from twin.plan import plan_from_mapping

    label = f"plan {path}"
    data = read_bytes(path, label)
    fields = parse_mapping(decode_text(data, label), label, "json")
    check_plan(plan_from_mapping(fields, label), path)
    return PlanIdentity(path=str(path.resolve()), sha256=hashlib.sha256(data).hexdigest(),
                        scenario=fields.get("scenario"), layout=fields.get("layout"))


def resolve_source(path: Path) -> Source:
    """A log as given, or the log named by an executor run record (its metrics file, else its console log)."""
    text = _read_text(path, "log")
    try:
        obj = json.loads(text) if json_depth(text) <= MAX_DEPTH else None
    except ValueError:
        obj = None
    if not (isinstance(obj, dict) and "metrics_path" in obj and "log_path" in obj):
        return Source(path, run_id=str(path.resolve()))
    from pydantic import ValidationError

    from executor.run_record import RunRecord

    try:
        record = RunRecord.model_validate(obj)
    except ValidationError as exc:
        raise CalibrationError(validation_message(exc, f"run record {path}")) from None
    run = RunInfo(
        record_path=str(path.resolve()), scenario=record.scenario, cluster_kind=record.cluster_kind,
        cards=record.cards, devices=record.devices, plan_path=record.plan_path, plan_sha256=record.plan_sha256,
        started_at=record.started_at, ended_at=record.ended_at, exit_status=record.exit_status,
        host=record.host, versions=record.versions,
    )
    run_id = f"{record.plan_sha256[:16]}@{record.started_at.isoformat()}"
    for candidate in (record.metrics_path, record.log_path):
        log = _locate(candidate, [Path(record.workdir), path.parent])
        if log is not None and log.stat().st_size > 0:
            return Source(log, run_id=run_id, run=run)
    raise CalibrationError(
        f"run record {path} names {record.metrics_path} and {record.log_path}; neither exists or has content"
    )


def _locate(name: str, bases: list[Path]) -> Path | None:
    candidate = Path(name)
    options = [candidate] if candidate.is_absolute() else [base / candidate for base in bases]
    return next((p for p in options if p.is_file()), None)


def impossible(metric: str, value: float) -> str | None:
    """Why `value` cannot be a measurement of `metric` (a negative time, count, length, rate or size)."""
    if value < 0 and unit_of(metric) in ("s", "ms", "tokens", "tokens/s/device", "GiB", "fraction"):
        return f"{metric} = {value:g} is negative"
    if unit_of(metric) == "fraction" and "mfu" in metric and value > 1:
        return f"{metric} = {value:g} exceeds 1"
    return None


def records_of(
    source: Source, parsed: ParsedLog, plan: PlanIdentity | None
) -> tuple[list[RunMeasurement], SourceReport]:
    """One record per selected finite metric per step; the first line of a repeated step wins."""
    now = datetime.now(timezone.utc)
    records: list[RunMeasurement] = []
    seen_steps: set[int] = set()
    duplicates: list[int] = []
    non_finite = 0
    bad_lines = list(parsed.bad_lines)
    for step in parsed.steps:
        if step.step < 0:
            bad_lines.append(BadLine(step.line, f"step {step.step} is negative"))
            continue
        why = next((w for m, v in step.values.items() if selected(m) and v is not None
                    for w in [impossible(m, v)] if w), None)
        if why:
            bad_lines.append(BadLine(step.line, why))
            continue
        if step.step in seen_steps:
            duplicates.append(step.line)
            continue
        seen_steps.add(step.step)
        for metric, value in step.values.items():
            if not selected(metric):
                continue
            if value is None:
                non_finite += 1
                continue
            records.append(RunMeasurement(
                key=f"run|{source.run_id}|step={step.step}|{metric}", job=JOB, timestamp=now,
                metric=metric, value=value, unit=unit_of(metric), step=step.step,
                source=SourceRef(path=str(source.path.resolve()), line=step.line), run=source.run, plan=plan,
            ))
    report = SourceReport(source.path, parsed.format, len(seen_steps), len(records), bad_lines,
                          parsed.other_lines, non_finite, duplicates)
    return records, report


def ingest(logs: list[Path], out: Path, plan_path: Path | None = None, append: bool = False) -> IngestResult:
    """Read every log, then append its records to `out` (which must not exist unless `append`, and then must be
    a file of measurement records).

    The output is checked before anything is written (never one of the inputs, the logs that run records
    name included, never a directory or device) and locked (fcntl.flock) from reading the records already
    there to writing the new ones, so concurrent `--append` runs never duplicate a record.
    """
    plan = plan_identity(plan_path) if plan_path is not None else None
    sources = [resolve_source(path) for path in logs]
    check_target(out, f"output {out}", [*logs, plan_path, *(source.path for source in sources)])
    parsed = [(source, parse_log(source.path, _read_text(source.path, "log"))) for source in sources]
    if not any(p.steps for _, p in parsed):
        raise CalibrationError(f"no verl step metrics found in {', '.join(str(p) for p in logs)}")
    read = [records_of(source, log, plan) for source, log in parsed]
    if not any(records for records, _ in read):
        raise CalibrationError(nothing_usable([report for _, report in read]))
    with _locked_output(out, append):
        done = appendable(out, f"output {out}").keys()
        result = IngestResult()
        with MeasurementWriter(out) as writer:
            for records, report in read:
                fresh = [r for r in records if r.key not in done]
                report.already_in_output = len(records) - len(fresh)
                done |= {r.key for r in fresh}
                result.reports.append(report)
                for record in fresh:
                    writer.write(record)
            result.written = writer.written
    return result


def nothing_usable(reports: list[SourceReport]) -> str:
    """One line saying why logs with step lines gave no record: every value unusable or every line bad."""
    bad = [b for r in reports for b in r.bad_lines]
    why = [f"no finite value of a calibration metric ({', '.join(PREFIXES + NAMES)}, memory) on "
           f"{sum(r.steps for r in reports)} step lines"]
    why += [f"{sum(r.non_finite for r in reports)} NaN/inf/null values"] if any(r.non_finite for r in reports) else []
    why += [f"{len(bad)} bad lines (first: {bad[0]})"] if bad else []
    return f"{', '.join(str(r.path) for r in reports)}: no usable metric values: {'; '.join(why)}"


@contextmanager
def _locked_output(out: Path, append: bool) -> Iterator[None]:
    """`out` opened (created only when new, unless `append`) and held under an exclusive flock."""
    import fcntl

    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | (0 if append else os.O_EXCL)
    try:
        fd = os.open(out, flags, 0o666)
    except FileExistsError:
        raise CalibrationError(f"{out} exists; ingest never overwrites it (pass --append to add to it)") from None
    except OSError as exc:
        raise CalibrationError(f"output {out}: cannot open ({exc.strerror or exc})") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock
