"""Training passes as simpy processes: micro-batches through the pipeline stages with the 1F1B schedule.

Each pipeline stage is a process that runs its operations in 1F1B order (warm-up forwards, alternating
forward/backward, cool-down backwards; forward-only passes stream). A forward of micro-batch m on stage s
waits for stage s-1's forward of m plus the activation send; a backward waits for stage s+1's backward plus
the gradient send. The bubble is what the schedule leaves idle, not a formula. TP ranks of a stage and DP
replicas with the same micro-batches are identical and simulated once. A long run of identical
micro-batches reaches a steady state whose makespan grows by the same period per micro-batch: two shorter
runs are simulated and the makespan extended along that period (exact for identical micro-batches).
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass

import numpy as np
import simpy

from twin.sim.trace import Trace

SPAN_MICROBATCHES = 64  # operations aggregated into one trace span


@dataclass
class PipelineRun:
    seconds: float
    busy_s: list[float]  # per stage: time spent computing
    bubble_fraction: float


def one_f_one_b(stage: int, stages: int, micro: int) -> list[tuple[str, int]]:
    """The operation order of `stage` under 1F1B: (F|B, micro-batch)."""
    warmup = min(stages - stage - 1, micro)
    order = [("F", m) for m in range(warmup)]
    for i in range(micro - warmup):
        order += [("F", warmup + i), ("B", i)]
    order += [("B", m) for m in range(micro - warmup, micro)]
    return order


def _uniform(a: np.ndarray | None) -> bool:
    return a is None or bool((a == a[:, :1]).all())


def run_pipeline(env: simpy.Environment, fwd: np.ndarray, bwd: np.ndarray | None, p2p_s: float, trace: Trace,
                 lanes: list[str], label: str) -> Generator[simpy.Event, object, PipelineRun]:
    """A simpy process: `fwd[s, m]` (and `bwd[s, m]` unless forward-only) seconds per stage and micro-batch."""
    stages, micro = fwd.shape
    short, longer = 2 * stages + 2, 3 * stages + 3
    if micro > longer and _uniform(fwd) and _uniform(bwd):
        runs = []
        for k in (short, longer):
            sub = simpy.Environment()
            proc = sub.process(_pipeline(sub, fwd[:, :k], None if bwd is None else bwd[:, :k], p2p_s,
                                         trace if k == longer else Trace(), lanes, label, env.now))
            sub.run()
            runs.append(proc.value)
        a, b = runs
        period = (b.seconds - a.seconds) / (longer - short)
        seconds = b.seconds + (micro - longer) * period
        busy = [bb + (micro - longer) * (bb - aa) / (longer - short) for aa, bb in zip(a.busy_s, b.busy_s, strict=True)]
        for s in range(stages):
            trace.span(lanes[s], "compute", f"{label}: {micro - longer} identical micro-batches (steady state)",
                       env.now + b.seconds, seconds - b.seconds)
        yield env.timeout(seconds)
        return PipelineRun(seconds=seconds, busy_s=busy, bubble_fraction=1 - sum(busy) / (stages * seconds))
    run = yield from _pipeline(env, fwd, bwd, p2p_s, trace, lanes, label, 0.0)
    return run


def _pipeline(env: simpy.Environment, fwd: np.ndarray, bwd: np.ndarray | None, p2p_s: float, trace: Trace,
              lanes: list[str], label: str, offset: float) -> Generator[simpy.Event, object, PipelineRun]:
    """The event-driven 1F1B run; trace spans are shifted by `offset` (a private environment starts at 0)."""
    stages, micro = fwd.shape
    done: dict[tuple[str, int, int], float] = {}
    waiting: dict[tuple[str, int, int], simpy.Event] = {}  # operations another stage waits for, not done yet
    start = env.now
    busy = [0.0] * stages

    def stage_proc(s: int) -> Generator[simpy.Event, object, None]:
        order = one_f_one_b(s, stages, micro) if bwd is not None else [("F", m) for m in range(micro)]
        span_t, span_n = env.now, 0
        for kind, m in order:
            dep = ("F", s - 1, m) if kind == "F" and s > 0 else ("B", s + 1, m) if kind == "B" and s < stages - 1 \
                else None
            if dep is not None:
                if dep not in done:
                    yield waiting.setdefault(dep, env.event())
                wait = done[dep] + p2p_s - env.now
                if wait > 0:
                    yield env.timeout(wait)
            if span_n == 0:
                span_t = env.now
            dur = float(fwd[s, m] if kind == "F" else bwd[s, m])  # type: ignore[index]
            yield env.timeout(dur)
            busy[s] += dur
            done[(kind, s, m)] = env.now
            if (event := waiting.pop((kind, s, m), None)) is not None:
                event.succeed()
            span_n += 1
            if span_n == SPAN_MICROBATCHES:
                trace.span(lanes[s], "compute", f"{label}: {span_n} ops", offset + span_t, env.now - span_t)
                span_n = 0
        if span_n:
            trace.span(lanes[s], "compute", f"{label}: {span_n} ops", offset + span_t, env.now - span_t)

    yield env.all_of([env.process(stage_proc(s)) for s in range(stages)])
    total = env.now - start
    bubble = 1 - sum(busy) / (stages * total) if total > 0 else 0.0
    return PipelineRun(seconds=total, busy_s=busy, bubble_fraction=bubble)
