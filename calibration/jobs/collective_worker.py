"""The worker process of the collectives job: one rank; rank 0 reports each point's timings."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from calibration.devices import Device, torch_dtype
from calibration.jobs.base import Point
from calibration.jobs.collective_groups import blocks, uneven_splits
from calibration.timing import time_op

# messages this small cost their latency, a fraction of a millisecond, while a rank's wake-up on a shared host can
# take several (2-core CI host: 3-6 ms in one of three repeats of a 1 KiB collective, 2026-12-05): their points take
# at least this many repeats, so that the median is the latency and not a wake-up
LATENCY_BYTES = 64 * 1024
LATENCY_REPEATS = 15


@dataclass(frozen=True)
class WorkerSpec:
    """Everything a rank needs; pickled to each spawned process."""

    device: Device
    world: int
    port: int
    parent_pid: int
    warmup: int
    repeats: int
    points: list[Point]


def worker(rank: int, spec: WorkerSpec, results: Any) -> None:
    """Measure every point on this rank; rank 0 puts (index, slowest-rank samples, bytes) on `results`."""
    import torch
    import torch.distributed as dist

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent ends the workers on Ctrl-C
    device = spec.device if spec.device.kind == "cpu" else spec.device.with_index(rank)
    device.activate()
    if device.kind == "cpu":  # ranks share the host's cores; oversubscribed threads distort the timings
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // spec.world))
    dist.init_process_group(device.backend, init_method=f"tcp://127.0.0.1:{spec.port}",
                            rank=rank, world_size=spec.world)
    control = dist.new_group(backend="gloo")
    groups = _make_groups(spec.points)
    for index, point in enumerate(spec.points):
        if os.getppid() != spec.parent_pid:
            os._exit(1)  # the parent is gone: nobody to report to
        assert point.group is not None
        ranks = next(b for b in blocks(point.group) if rank in b)
        group = groups[tuple(ranks)]
        op, nbytes = build_op(point, ranks, rank, group, device)
        samples = time_op(op, device.synchronize, warmup=spec.warmup, repeats=point_repeats(spec.repeats, nbytes),
                          before=lambda group=group: dist.barrier(group=group))
        slowest = torch.tensor(samples, dtype=torch.float64)
        dist.all_reduce(slowest, op=dist.ReduceOp.MAX, group=control)
        if rank == 0:
            results.put((index, slowest.tolist(), nbytes))
    dist.barrier(group=control)
    dist.destroy_process_group()


def point_repeats(repeats: int, nbytes: int) -> int:
    """Timed repeats of a point of `nbytes`: the run's, and at least `LATENCY_REPEATS` for a latency-bound one."""
    return max(repeats, LATENCY_REPEATS) if nbytes <= LATENCY_BYTES else repeats


def _make_groups(points: list[Point]) -> dict[tuple[int, ...], Any]:
    """One process group per distinct rank set, created in the same order on every rank."""
    import torch.distributed as dist

    groups: dict[tuple[int, ...], Any] = {}
    for point in points:
        assert point.group is not None
        for ranks in blocks(point.group):
            if tuple(ranks) not in groups:
                groups[tuple(ranks)] = dist.new_group(ranks)
    return groups


def build_op(point: Point, ranks: list[int], rank: int, group: Any, device: Device) -> tuple[Callable[[], Any], int]:
    """The collective call of `point` on this rank's group, and its message size S in bytes."""
    import torch
    import torch.distributed as dist

    n, me = len(ranks), ranks.index(rank)
    kw = {"dtype": torch_dtype(point.dtype or "fp32"), "device": device.torch_device}
    elem = torch.empty(0, **kw).element_size()
    count = max(n, int(point.params["size"]) // elem // n * n)
    if point.op == "all_reduce":
        buf = torch.ones(count, **kw)
        return (lambda: dist.all_reduce(buf, group=group)), count * elem
    if point.op == "broadcast":
        buf = torch.ones(count, **kw)
        return (lambda: dist.broadcast(buf, src=ranks[0], group=group)), count * elem
    if point.op == "all_gather":
        out, inp = torch.empty(count, **kw), torch.ones(count // n, **kw)
        gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
        return (lambda: gather(out, inp, group=group)), count * elem
    if point.op == "reduce_scatter":
        out, inp = torch.empty(count // n, **kw), torch.ones(count, **kw)
        scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
        return (lambda: scatter(out, inp, group=group)), count * elem
    if point.op == "all_to_all_single":
        splits = uneven_splits(me, n, max(1, count // (n * (n + 1) // 2)))
        inp, out = torch.ones(sum(splits), **kw), torch.empty(sum(splits), **kw)
        return (lambda: dist.all_to_all_single(out, inp, splits, splits, group=group)), sum(splits) * elem
    raise NotImplementedError(f"collective {point.op}")
