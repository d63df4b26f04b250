"""The measurement record: one JSON object per line of measurements.jsonl.

Two kinds share one file: "job" records come from the micro-benchmarks of `calibration run`,
"run" records from the stage timings and metrics of a real training run (`calibration ingest`).
Every record carries a stable `key` naming the measurement point, so a resumed run skips what is done.
"""

from __future__ import annotations

import json
import os
import statistics
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any, BinaryIO, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, model_validator

from calibration.errors import CalibrationError

SCHEMA_VERSION = 1

ParamValue = bool | int | float | str | list[int] | list[float]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)  # a NaN or inf is never a measurement


class Stats(_Strict):
    """Timings of the repeats that followed the warm-up calls, in seconds."""

    warmup: int = Field(ge=0)
    repeats: int = Field(ge=1)
    samples_s: list[float]
    min_s: float = Field(gt=0)
    median_s: float = Field(gt=0)
    max_s: float = Field(gt=0)

    @model_validator(mode="after")
    def _consistent(self) -> Stats:
        if len(self.samples_s) != self.repeats:
            raise ValueError(f"{len(self.samples_s)} samples for {self.repeats} repeats")
        if not self.min_s <= self.median_s <= self.max_s:
            raise ValueError("min_s <= median_s <= max_s does not hold")
        return self

    @classmethod
    def from_samples(cls, samples: list[float], warmup: int) -> Stats:
        """Summarise the timed repeats (warm-up calls are not in `samples`)."""
        return cls(
            warmup=warmup,
            repeats=len(samples),
            samples_s=list(samples),
            min_s=min(samples),
            median_s=statistics.median(samples),
            max_s=max(samples),
        )


class GroupInfo(_Strict):
    """The process groups a collective ran on: `groups` groups of `group_size` ranks, concurrently."""

    world_size: int = Field(ge=1)
    group_size: int = Field(ge=1)
    groups: int = Field(ge=1)
    layout: Literal["contiguous", "strided"]
    ranks: list[int]  # the group holding global rank 0

    def label(self) -> str:
        return f"{self.groups}x{self.group_size}/{self.world_size}:{self.layout}"


class DeviceFacts(_Strict):
    kind: Literal["npu", "cuda", "cpu"]
    name: str
    count: int = Field(ge=1)
    threads: int | None = None  # cpu: torch's intra-op threads (OMP_NUM_THREADS), part of the measurement point


class HostFacts(_Strict):
    hostname: str
    cpu_model: str
    cores: int
    memory_gb: float  # 1e9 bytes


class Versions(_Strict):
    python: str
    torch: str | None = None
    torch_npu: str | None = None
    transformers: str | None = None
    vllm: str | None = None


class SourceRef(_Strict):
    """Where an ingested value was read: file and 1-based line number."""

    path: str
    line: int


class PlanIdentity(_Strict):
    """The plan a run executed; scenario and layout are copied as found in the plan file."""

    path: str
    sha256: str
    scenario: Any = None
    layout: Any = None


class RunInfo(_Strict):
    """Facts copied from the executor's run record."""

    record_path: str
    scenario: str
    cluster_kind: str
    cards: int
    devices: int
    plan_path: str
    plan_sha256: str
    started_at: datetime
    ended_at: datetime | None = None
    exit_status: int | None = None
    host: dict[str, str] = {}
    versions: dict[str, str] = {}


class _Record(_Strict):
    schema_version: int = SCHEMA_VERSION
    key: str
    job: str
    timestamp: datetime

    @model_validator(mode="after")
    def _known_schema(self) -> _Record:
        if self.schema_version != SCHEMA_VERSION:
            raise ValueError(f"schema_version {self.schema_version} is not {SCHEMA_VERSION}")
        return self


class JobMeasurement(_Record):
    """One point of a micro-benchmark job."""

    kind: Literal["job"] = "job"
    op: str
    params: dict[str, ParamValue]
    dtype: str | None = None
    group: GroupInfo | None = None
    backend: str | None = None
    stats: Stats
    flops: float | None = None  # useful floating-point operations of one call (causal: attended pairs only)
    bytes: int | None = None  # per call: tensors read + written (gemm, attention), bytes copied (copy),
    # message size S as NCCL-tests define it (collectives)
    derived: dict[str, float] = {}  # tflops, gbps, algbw_gbps, busbw_gbps, tokens_per_s ... at the median
    device: DeviceFacts
    host: HostFacts
    versions: Versions
    note: str = ""


class RunMeasurement(_Record):
    """One metric of one step of a real training run."""

    kind: Literal["run"] = "run"
    metric: str
    value: float
    unit: str | None = None
    step: int | None = None
    source: SourceRef
    run: RunInfo | None = None
    plan: PlanIdentity | None = None


Measurement = Annotated[JobMeasurement | RunMeasurement, Field(discriminator="kind")]
_ADAPTER: TypeAdapter[JobMeasurement | RunMeasurement] = TypeAdapter(Measurement)


@dataclass(frozen=True)
class BadLine:
    line: int
    reason: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.reason}"


def bad_lines_text(bad: list[BadLine], shown: int = 2) -> str:
    """In words: how many lines are not measurement records, and the first `shown` of them with why."""
    listed = "; ".join(map(str, bad[:shown])) + (f"; {len(bad) - shown} more" if len(bad) > shown else "")
    return f"{len(bad)} {'line is' if len(bad) == 1 else 'lines are'} not measurement records ({listed})"


@dataclass
class LoadedMeasurements:
    """The records of a file, and the lines that could not be read as records."""

    records: list[JobMeasurement | RunMeasurement] = field(default_factory=list)
    bad_lines: list[BadLine] = field(default_factory=list)

    def keys(self) -> set[str]:
        return {r.key for r in self.records}


def parse_measurement(text: str | bytes) -> JobMeasurement | RunMeasurement:
    """Validate one JSON line as a measurement record."""
    return _ADAPTER.validate_json(text)


MAX_FILE_BYTES = 1 << 30  # a measurements file of a long run is tens of MB; 1 GiB bounds what it may take


def load_measurements(path: Path | str) -> LoadedMeasurements:
    """Read a measurements file; malformed lines are counted with their line numbers, never fatal."""
    loaded = LoadedMeasurements()
    path = Path(path)
    if not path.exists():
        return loaded
    from twin.fileio import read_bytes

    data = read_bytes(path, f"measurements {path}", MAX_FILE_BYTES)
    lines = data.split(b"\n")
    for number, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        if number == len(lines):
            loaded.bad_lines.append(BadLine(number, "partial last line (no newline)"))
            continue
        try:
            loaded.records.append(parse_measurement(raw))
        except ValidationError as exc:
            loaded.bad_lines.append(BadLine(number, _first_error(exc)))
    return loaded


def appendable(path: Path, label: str) -> LoadedMeasurements:
    """The records of `path`, to which new records may be appended: a missing or empty file, or one whose every
    line is a record. Anything else (a scenario, a plan, a damaged file) is refused in one line, never appended to."""
    loaded = load_measurements(path)
    if loaded.bad_lines:
        raise CalibrationError(f"{label}: not a measurements file: {bad_lines_text(loaded.bad_lines)}; records are "
                               "appended only to a file of records, so choose another output path")
    return loaded


def _first_error(exc: ValidationError) -> str:
    err = exc.errors()[0]
    where = ".".join(str(p) for p in err.get("loc", ()))
    return f"{where}: {err['msg']}" if where else err["msg"]


class MeasurementWriter:
    """Appends records to a JSONL file, one flushed and fsynced line per record.

    The file is opened in append mode, so existing lines are never lost; if an earlier writer was
    killed mid-line, a newline is written first so the partial line stays separate (and is reported
    as malformed when loading) instead of corrupting the next record. The commands check a file with
    `appendable` before they append to it.
    """

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self.written = 0
        self._file: BinaryIO | None = None

    def __enter__(self) -> MeasurementWriter:
        self._file = open(self.path, "ab")
        if self._file.tell() and _last_byte(self.path) != b"\n":
            self._file.write(b"\n")
        return self

    def write(self, record: JobMeasurement | RunMeasurement) -> None:
        assert self._file is not None, "use MeasurementWriter as a context manager"
        self._file.write(record.model_dump_json().encode() + b"\n")
        self._file.flush()
        os.fsync(self._file.fileno())
        self.written += 1

    def __exit__(self, *exc: object) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def _last_byte(path: Path) -> bytes:
    with open(path, "rb") as f:
        f.seek(-1, os.SEEK_END)
        return f.read(1)


def append_measurements(path: Path | str, records: Iterable[JobMeasurement | RunMeasurement]) -> int:
    """Append records to `path`; returns how many were written."""
    with MeasurementWriter(path) as writer:
        for record in records:
            writer.write(record)
        return writer.written


def canonical_json(value: Any) -> str:
    """Compact JSON with sorted keys: the stable spelling used inside keys."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"))
