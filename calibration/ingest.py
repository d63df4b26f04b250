"""`calibration ingest`: verl metrics files, console logs and executor run records -> "run" records."""

from __future__ import annotations

import hashlib
import json
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
    load_measurements,
)
from calibration.verl_logs import LogFormat, ParsedLog, parse_log

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
    try:
        return path.read_bytes().decode("utf-8", errors="replace")
    except OSError as exc:
        raise CalibrationError(f"cannot read {what} {path}: {exc.strerror or exc}") from None


def plan_identity(path: Path) -> PlanIdentity:
    """Path and sha256 of a plan file, with its "scenario" and "layout" fields where present."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise CalibrationError(f"cannot read plan {path}: {exc.strerror or exc}") from None
    try:
        plan = json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise CalibrationError(f"plan {path} is not JSON: {exc}") from None
    fields = plan if isinstance(plan, dict) else {}
    return PlanIdentity(path=str(path.resolve()), sha256=hashlib.sha256(data).hexdigest(),
                        scenario=fields.get("scenario"), layout=fields.get("layout"))


def resolve_source(path: Path) -> Source:
    """A log as given, or the log named by an executor run record (its metrics file, else its console log)."""
    text = _read_text(path, "log")
    try:
        obj = json.loads(text)
    except json.JSONDecodeError:
        obj = None
    if not (isinstance(obj, dict) and "metrics_path" in obj and "log_path" in obj):
        return Source(path, run_id=str(path.resolve()))
    from pydantic import ValidationError

    from executor.run_record import RunRecord

    try:
        record = RunRecord.model_validate(obj)
    except ValidationError as exc:
        raise CalibrationError(f"run record {path} is malformed: {exc.errors()[0]['msg']}") from None
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


def records_of(
    source: Source, parsed: ParsedLog, plan: PlanIdentity | None
) -> tuple[list[RunMeasurement], SourceReport]:
    """One record per selected finite metric per step; the first line of a repeated step wins."""
    now = datetime.now(timezone.utc)
    records: list[RunMeasurement] = []
    seen_steps: set[int] = set()
    duplicates: list[int] = []
    non_finite = 0
    for step in parsed.steps:
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
    report = SourceReport(source.path, parsed.format, len(seen_steps), len(records), parsed.bad_lines,
                          parsed.other_lines, non_finite, duplicates)
    return records, report


def ingest(logs: list[Path], out: Path, plan_path: Path | None = None, append: bool = False) -> IngestResult:
    """Read every log, then append its records to `out` (which must not exist unless `append`)."""
    if out.exists() and not append:
        raise CalibrationError(f"{out} exists; ingest never overwrites it (pass --append to add to it)")
    if not out.parent.is_dir():
        raise CalibrationError(f"output directory {out.parent} does not exist")
    plan = plan_identity(plan_path) if plan_path is not None else None
    sources = [resolve_source(path) for path in logs]
    done = load_measurements(out).keys() if out.exists() else set()
    result = IngestResult()
    batches = []
    for source in sources:
        records, report = records_of(source, parse_log(source.path, _read_text(source.path, "log")), plan)
        fresh = [r for r in records if r.key not in done]
        report.already_in_output = len(records) - len(fresh)
        done |= {r.key for r in fresh}
        batches.append(fresh)
        result.reports.append(report)
    if not any(report.steps for report in result.reports):
        raise CalibrationError(f"no verl step metrics found in {', '.join(str(p) for p in logs)}")
    with MeasurementWriter(out) as writer:
        for batch in batches:
            for record in batch:
                writer.write(record)
        result.written = writer.written
    return result
