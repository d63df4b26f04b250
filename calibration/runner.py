"""`calibration run`: measure the points of the chosen jobs, appending and resuming by key."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from calibration.jobs import load_job
from calibration.jobs.base import Failure, Job, Point, RunContext
from calibration.measurements import JobMeasurement, MeasurementWriter


@dataclass
class JobTally:
    """What happened to one job's grid in this run."""

    job: str
    planned: int
    skipped: int
    measured: list[JobMeasurement] = field(default_factory=list)
    failed: list[Failure] = field(default_factory=list)


@dataclass
class RunOutcome:
    tallies: list[JobTally]
    interrupted: bool = False

    @property
    def measured(self) -> int:
        return sum(len(t.measured) for t in self.tallies)

    @property
    def failed(self) -> int:
        return sum(len(t.failed) for t in self.tallies)


def plan(ctx: RunContext, names: list[str], done: set[str]) -> list[tuple[Job, list[Point], JobTally]]:
    """Each job with the points of its grid still to measure; every job is resolved before any runs."""
    planned = []
    for name in dict.fromkeys(names):
        job = load_job(name)
        points = job.points(ctx)
        todo = [p for p in points if p.key(ctx.device_facts) not in done]
        planned.append((job, todo, JobTally(name, len(points), len(points) - len(todo))))
    return planned


@contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """Treat SIGTERM and SIGINT as Ctrl-C for the duration, so that both end the run the same clean way. SIGINT
    too: a process started with SIGINT ignored (a parent that ignored it, which the child inherits across exec)
    would otherwise run on through Ctrl-C or `kill -INT`."""

    def handler(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, action in previous.items():
            signal.signal(sig, action)


def run_jobs(ctx: RunContext, names: list[str], out: Path, console: Console, done: set[str]) -> RunOutcome:
    """Measure what `out` does not hold yet (`done`: the keys it holds, calibration.measurements.appendable),
    appending each record as soon as it is measured."""
    jobs = plan(ctx, names, done)
    outcome = RunOutcome([tally for _, _, tally in jobs])
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    total = sum(len(todo) for _, todo, _ in jobs)
    with (
        sigterm_as_interrupt(),
        Progress(*columns, console=console, auto_refresh=False) as progress,  # no refresh thread: it
        MeasurementWriter(out) as writer,  # would steal a core from the measurement on small hosts
    ):
        task = progress.add_task("measuring", total=total)
        try:
            for job, todo, tally in jobs:
                if todo:
                    progress.update(task, description=todo[0].label())
                for index, result in enumerate(job.run(ctx, todo)):
                    if index + 1 < len(todo):
                        progress.update(task, description=todo[index + 1].label())
                    if isinstance(result, Failure):
                        tally.failed.append(result)
                    else:
                        writer.write(result)
                        tally.measured.append(result)
                    progress.advance(task)
                    progress.refresh()
        except KeyboardInterrupt:
            outcome.interrupted = True
    return outcome
