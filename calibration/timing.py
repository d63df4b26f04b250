"""Timing of one operation: warm-up calls, then timed repeats bracketed by device synchronisation."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def time_op(
    op: Callable[[], object],
    synchronize: Callable[[], None],
    *,
    warmup: int,
    repeats: int,
    before: Callable[[], object] | None = None,
) -> list[float]:
    """Seconds of each of `repeats` calls of `op` after `warmup` untimed calls.

    `before` runs ahead of every call (warm-up and timed) outside the timed region, e.g. to reset a
    KV cache or to align ranks with a barrier. The device is synchronised before the clock starts and
    before it stops, so queued asynchronous work is counted in the call that queued it.
    """
    samples: list[float] = []
    for i in range(warmup + repeats):
        if before is not None:
            before()
        synchronize()
        start = time.perf_counter()
        op()
        synchronize()
        elapsed = time.perf_counter() - start
        if i >= warmup:
            samples.append(max(elapsed, 1e-9))
    return samples


def host_busy_s() -> float:
    """CPU seconds the whole host has spent busy (every core, every process) since it booted: the difference
    over a call is the host CPU time the call kept busy, where nothing else runs on the host."""
    import psutil

    t = psutil.cpu_times()
    return t.user + t.nice + t.system + getattr(t, "irq", 0.0) + getattr(t, "softirq", 0.0)


def kernel_counters(proc: Any) -> tuple[float, int, int]:
    """(system CPU seconds, minor page faults, involuntary context switches) of a psutil process so far; the faults
    from /proc/PID/stat (psutil does not read them)."""
    fields = Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
    return proc.cpu_times().system, int(fields[7]), proc.num_ctx_switches().involuntary
