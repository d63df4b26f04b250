"""Training passes as simpy processes: micro-batches through the pipeline stages with the 1F1B schedule.

Each pipeline stage is a process that runs its operations in 1F1B order (warm-up forwards, alternating
forward/backward, cool-down backwards; forward-only passes stream). A forward of micro-batch m on stage s
waits for stage s-1's forward of m plus the activation send; a backward waits for stage s+1's backward plus
the gradient send. The bubble is what the schedule leaves idle, not a formula. TP ranks of a stage and DP
replicas with the same micro-batches are identical and simulated once.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Generator
from dataclasses import dataclass

import numpy as np
import simpy

from twin.sim.trace import Span, Trace

SPAN_MICROBATCHES = 64  # operations aggregated into one trace span
SOLVED_PASSES_KEPT = 256  # passes whose run and spans are kept for replay
_SOLVED: OrderedDict[tuple, tuple[PipelineRun, list[Span]]] = OrderedDict()


@dataclass(frozen=True)
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
    """A simpy process: `fwd[s, m]` (and `bwd[s, m]` unless forward-only) seconds per stage and micro-batch.

    A pass shares no resource with the rest of the step, so it is simulated in its own environment from time 0
    and its spans are placed at `env.now`; a pass with the same inputs (the planner's candidates that share a
    training layout draw the same lengths) is simulated once and its run and spans replayed."""
    key = (fwd.shape, fwd.tobytes(), None if bwd is None else bwd.tobytes(), p2p_s, tuple(lanes), label)
    solved = _SOLVED.get(key)
    if solved is None:
        solved = _SOLVED[key] = _solve(fwd, bwd, p2p_s, lanes, label)
        if len(_SOLVED) > SOLVED_PASSES_KEPT:
            _SOLVED.popitem(last=False)
    else:
        _SOLVED.move_to_end(key)
    run, spans = solved
    for sp in spans:
        trace.span(sp.lane, sp.track, sp.name, env.now + sp.start_s, sp.dur_s, **sp.args)
    yield env.timeout(run.seconds)
    return run


def _solve(fwd: np.ndarray, bwd: np.ndarray | None, p2p_s: float, lanes: list[str], label: str
           ) -> tuple[PipelineRun, list[Span]]:
    """The pass's run and its spans from time 0. A long run of identical micro-batches reaches a steady state
    whose makespan grows by the same period per micro-batch: two shorter runs are simulated and the makespan
    extended along that period (exact for identical micro-batches)."""
    stages, micro = fwd.shape
    short, longer = 2 * stages + 2, 3 * stages + 3
    trace = Trace()
    if not (micro > longer and _uniform(fwd) and _uniform(bwd)):
        return _simulated(fwd, bwd, p2p_s, trace, lanes, label), trace.spans
    a = _simulated(fwd[:, :short], None if bwd is None else bwd[:, :short], p2p_s, Trace(), lanes, label)
    b = _simulated(fwd[:, :longer], None if bwd is None else bwd[:, :longer], p2p_s, trace, lanes, label)
    period = (b.seconds - a.seconds) / (longer - short)
    seconds = b.seconds + (micro - longer) * period
    busy = [bb + (micro - longer) * (bb - aa) / (longer - short) for aa, bb in zip(a.busy_s, b.busy_s, strict=True)]
    for s in range(stages):
        trace.span(lanes[s], "compute", f"{label}: {micro - longer} identical micro-batches (steady state)",
                   b.seconds, seconds - b.seconds)
    return PipelineRun(seconds=seconds, busy_s=busy, bubble_fraction=1 - sum(busy) / (stages * seconds)), trace.spans


def _simulated(fwd: np.ndarray, bwd: np.ndarray | None, p2p_s: float, trace: Trace, lanes: list[str], label: str
               ) -> PipelineRun:
    env = simpy.Environment()
    proc = env.process(_pipeline(env, fwd, bwd, p2p_s, trace, lanes, label))
    env.run()
    return proc.value


def _pipeline(env: simpy.Environment, fwd: np.ndarray, bwd: np.ndarray | None, p2p_s: float, trace: Trace,
              lanes: list[str], label: str) -> Generator[simpy.Event, object, PipelineRun]:
    """The event-driven 1F1B run."""
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
                trace.span(lanes[s], "compute", f"{label}: {span_n} ops", span_t, env.now - span_t)
                span_n = 0
        if span_n:
            trace.span(lanes[s], "compute", f"{label}: {span_n} ops", span_t, env.now - span_t)

    yield env.all_of([env.process(stage_proc(s)) for s in range(stages)])
    total = env.now - start
    bubble = 1 - sum(busy) / (stages * total) if total > 0 else 0.0
    return PipelineRun(seconds=total, busy_s=busy, bubble_fraction=bubble)
