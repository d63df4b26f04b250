"""What every job shares: measurement points, the run context, record building, failures."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Literal

from calibration.devices import Device
from calibration.measurements import (
    DeviceFacts,
    GroupInfo,
    HostFacts,
    JobMeasurement,
    ParamValue,
    Stats,
    Versions,
    canonical_json,
)
from calibration.timing import time_op

Grid = Literal["small", "full"]


@dataclass
class Point:
    """One measurement point of a job; its key identifies it across runs."""

    job: str
    op: str
    params: dict[str, ParamValue]
    dtype: str | None = None
    group: GroupInfo | None = None
    backend: str | None = None

    def key(self, device: DeviceFacts) -> str:
        group = self.group.label() if self.group else "-"
        where = device.name if device.threads is None else f"{device.name} x{device.threads} threads"
        parts = [self.job, self.op, device.kind, where, self.dtype or "-", self.backend or "-", group]
        return "|".join([*parts, canonical_json(self.params)])

    def label(self) -> str:
        """A short human-readable description for progress bars and messages."""
        shown = " ".join(f"{k}={v}" for k, v in self.params.items() if not isinstance(v, list))
        extra = [x for x in (self.dtype, self.group.label() if self.group else None) if x]
        return " ".join([f"{self.job}/{self.op}", shown, *extra])


@dataclass(frozen=True)
class Failure:
    """A point that could not be measured (e.g. out of memory); it is not recorded, so a rerun retries it."""

    point: Point
    message: str


@dataclass
class RunContext:
    """What a job needs to know about the run: the device, repeat counts, world size, grid, facts."""

    device: Device
    device_facts: DeviceFacts
    host: HostFacts
    versions: Versions
    repeats: int = 5
    warmup: int = 2
    world: int = 2
    grid: Grid = "small"
    model_config: Path | None = None  # decode job: a HuggingFace config.json, else the built-in tiny model

    def time(self, op: Callable[[], object], before: Callable[[], object] | None = None,
             min_repeats: int = 0) -> list[float]:
        """Time `op` on this run's device with this run's warm-up and repeat counts (at least `min_repeats`)."""
        return time_op(
            op, self.device.synchronize, warmup=self.warmup, repeats=max(self.repeats, min_repeats), before=before
        )

    def record(
        self,
        point: Point,
        samples: list[float],
        *,
        flops: float | None = None,
        nbytes: int | None = None,
        rates: dict[str, float] | None = None,
        note: str = "",
    ) -> JobMeasurement:
        """A job record for `point`.

        Derived figures are amounts per second at the median time: "tflops" from `flops` (in 1e12),
        "gbps" from `nbytes` (in 1e9), and each `rates` entry, an amount per call.
        """
        stats = Stats.from_samples(samples, self.warmup)
        amounts = dict(rates or {})
        if flops is not None:
            amounts["tflops"] = flops / 1e12
        if nbytes is not None:
            amounts["gbps"] = nbytes / 1e9
        figures = {name: amount / stats.median_s for name, amount in amounts.items()}
        return JobMeasurement(
            key=point.key(self.device_facts),
            job=point.job,
            timestamp=datetime.now(timezone.utc),
            op=point.op,
            params=point.params,
            dtype=point.dtype,
            group=point.group,
            backend=point.backend,
            stats=stats,
            flops=flops,
            bytes=nbytes,
            derived=figures,
            device=self.device_facts,
            host=self.host,
            versions=self.versions,
            note=note,
        )


Outcome = JobMeasurement | Failure


class Job(ABC):
    """A family of micro-benchmarks: the points of a grid, and how to measure them."""

    name: str

    @abstractmethod
    def points(self, ctx: RunContext) -> list[Point]:
        """Every point of the grid `ctx.grid` for the device of `ctx`."""

    @abstractmethod
    def run(self, ctx: RunContext, points: list[Point]) -> Iterator[Outcome]:
        """Measure `points`, yielding one outcome per point as soon as it is known."""


class InProcessJob(Job):
    """A job measured point by point in this process."""

    def run(self, ctx: RunContext, points: list[Point]) -> Iterator[Outcome]:
        for point in points:
            try:
                yield self.measure(ctx, point)
            except (RuntimeError, NotImplementedError) as exc:  # out of memory, unsupported op
                yield Failure(point, first_line(exc))

    @abstractmethod
    def measure(self, ctx: RunContext, point: Point) -> JobMeasurement:
        """Measure one point."""


def first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"


def tensor_bytes(*tensors: object) -> int:
    """Total size in bytes of torch tensors."""
    return sum(t.numel() * t.element_size() for t in tensors)  # type: ignore[attr-defined]
