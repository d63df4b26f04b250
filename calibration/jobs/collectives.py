"""Collectives over torch.distributed: sizes x group shapes x ops, in worker processes it spawns.

Message size S and bus bandwidth follow NCCL-tests: S is the full buffer (all_reduce and broadcast:
the tensor; all_gather: the gathered output; reduce_scatter: the input; all_to_all: what one rank
sends); algbw = S / t; busbw = algbw x 2(n-1)/n for all_reduce, x (n-1)/n for all_gather,
reduce_scatter and all_to_all, x 1 for broadcast. t is, per repeat, the slowest rank's time.

all_to_all_single runs with uneven splits: rank r sends unit x (1 + (r + j) mod n) elements to rank j,
so each pair exchanges a different amount while every rank sends and receives the same total.
Group shapes: the world is split into groups of 2, 4, ... ranks (contiguous blocks, and in the full
grid strided ones), all groups running the collective at the same time.
"""

from __future__ import annotations

import os
import queue
import socket
from collections.abc import Iterator
from typing import Any

from calibration.devices import device_count
from calibration.errors import CalibrationError
from calibration.jobs.base import Failure, Job, Outcome, Point, RunContext
from calibration.jobs.collective_groups import blocks
from calibration.measurements import GroupInfo

KIB, MIB = 1 << 10, 1 << 20
OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all_single", "broadcast")
# 1 KiB: the latency the twin charges a near-empty round (the weight sync's all-to-all rounds), measured rather than
# extrapolated from 64 KiB up (there the two-rank all-to-all's fitted fixed cost moved 0.13-0.44 ms between three
# local runs, 2026-12-05, and to 1.9 ms in one CI run; with the 1 KiB point and its repeats 0.19-0.23 ms)
SMALL_SIZES = [1 * KIB, 64 * KIB, 1 * MIB, 8 * MIB]
FULL_SIZES = [KIB << (2 * i) for i in range(11)]  # 1 KiB .. 1 GiB
POLL_S = 0.2


def bus_factor(op: str, n: int) -> float:
    """busbw / algbw for a group of n ranks, as NCCL-tests define it."""
    if op == "all_reduce":
        return 2.0 * (n - 1) / n
    return 1.0 if op == "broadcast" else (n - 1) / n


def group_shapes(world: int, grid: str) -> list[GroupInfo]:
    """Partitions of the world into equal groups of 2, 4, ..., world ranks."""
    sizes = sorted({s for s in (2 ** i for i in range(1, world.bit_length())) if world % s == 0} | {world})
    shapes = []
    for size in sizes:
        layouts = ["contiguous"] + (["strided"] if grid == "full" and size < world else [])
        for layout in layouts:
            info = GroupInfo(world_size=world, group_size=size, groups=world // size, layout=layout, ranks=[])
            info.ranks = blocks(info)[0]
            shapes.append(info)
    return shapes


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class CollectivesJob(Job):
    name = "collectives"

    def points(self, ctx: RunContext) -> list[Point]:
        self._check_world(ctx)
        sizes = SMALL_SIZES if ctx.grid == "small" else FULL_SIZES
        dtype = "fp32" if ctx.device.kind == "cpu" else "bf16"
        points = []
        for group in group_shapes(ctx.world, ctx.grid):
            for op in OPS:
                for size in sizes:
                    params = {"size": size, **({"splits": "uneven"} if op == "all_to_all_single" else {})}
                    points.append(Point(self.name, op, params, dtype=dtype, group=group,
                                        backend=ctx.device.backend))
        return points

    @staticmethod
    def _check_world(ctx: RunContext) -> None:
        if ctx.world < 2:
            raise CalibrationError(f"collectives need --world of at least 2, got {ctx.world}")
        available = device_count(ctx.device)
        if ctx.device.kind != "cpu" and ctx.world > available:
            raise CalibrationError(f"--world {ctx.world} exceeds the {available} {ctx.device.kind} devices here")

    def run(self, ctx: RunContext, points: list[Point]) -> Iterator[Outcome]:
        if not points:
            return
        import torch.multiprocessing as mp

        from calibration.jobs.collective_worker import WorkerSpec, worker

        results = mp.get_context("spawn").Queue()
        spec = WorkerSpec(ctx.device, ctx.world, free_port(), os.getpid(), ctx.warmup, ctx.repeats, points)
        procs = mp.start_processes(worker, args=(spec, results), nprocs=ctx.world, join=False,
                                   start_method="spawn")
        pending = dict(enumerate(points))
        try:
            while pending:
                try:
                    index, samples, nbytes = results.get(timeout=POLL_S)
                except queue.Empty:
                    if procs.join(timeout=0):  # all workers exited cleanly: drain what they left
                        yield from self._drain(ctx, results, pending)
                        break
                    continue
                yield self._record(ctx, pending.pop(index), samples, nbytes)
        except (mp.ProcessRaisedException, mp.ProcessExitedException) as exc:
            message = f"worker failed: {str(exc).strip().splitlines()[-1]}"
            yield from (Failure(point, message) for point in pending.values())
        finally:
            for proc in procs.processes:
                if proc.is_alive():
                    proc.terminate()
            for proc in procs.processes:
                proc.join()

    def _drain(self, ctx: RunContext, results: Any, pending: dict[int, Point]) -> Iterator[Outcome]:
        while True:
            try:
                index, samples, nbytes = results.get_nowait()
            except queue.Empty:
                break
            yield self._record(ctx, pending.pop(index), samples, nbytes)
        yield from (Failure(point, "worker exited without measuring it") for point in pending.values())
        pending.clear()

    @staticmethod
    def _record(ctx: RunContext, point: Point, samples: list[float], nbytes: int) -> Outcome:
        assert point.group is not None
        n = point.group.group_size
        rates = {"algbw_gbps": nbytes / 1e9, "busbw_gbps": nbytes * bus_factor(point.op, n) / 1e9}
        return ctx.record(point, samples, nbytes=nbytes, rates=rates)


JOB = CollectivesJob()
