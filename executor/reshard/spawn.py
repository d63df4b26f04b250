"""Run the reshard on `world` local processes, one per rank, and collect what each measured.

Processes come from a forkserver that has imported torch once, so eight ranks start in about a second;
they rendezvous through a file store in a private temporary directory (no port to race for). A rank that
fails reports its error and exits; the parent then stops the others. Every process is joined, or
terminated and killed, before `run_ranks` returns.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import queue as queue_mod
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from executor.errors import ExecutorError
from twin.layout.models import Layout

TRANSPORT_ERROR = "gloo/transport"  # how a peer's failure reaches the other ranks on CPU
PRELOAD = ["torch", "torch.distributed", "executor.npu_opt.directed_reshard_transfer", "executor.reshard.tiny_model"]


@dataclass(frozen=True)
class RankJob:
    """Everything a rank needs, picklable."""

    config: dict[str, Any]
    name: str
    layout: Layout
    world: int
    methods: tuple[str, ...]
    seed: int
    device: str  # "cpu" (gloo) or "npu" (HCCL)
    store: str
    checkpoint: str | None = None  # the HF checkpoint a Megatron model loads as the training source; None: the
    # training shards are cut from the full tensors by the placement's rule


def rank_main(rank: int, job: RankJob, results: Any) -> None:
    """Entry point of one rank: run every method, check the shards, report one record per method."""
    try:
        results.put(("ok", rank, _run_rank(rank, job)))
    except BaseException as exc:  # report anything, then fail the process
        results.put(("error", rank, f"{type(exc).__name__}: {exc}"))
        raise SystemExit(1) from None


def _run_rank(rank: int, job: RankJob) -> list[dict[str, Any]]:
    import torch
    import torch.distributed as dist

    from executor.npu_opt.directed_reshard_transfer import run_transfer
    from executor.reshard.megatron_source import megatron_shards
    from executor.reshard.schedule import build_schedule
    from executor.reshard.tiny_model import checked_placement, mismatches, train_shards

    torch.set_num_threads(1)
    device: str | torch.device = "cpu"
    backend = "gloo"
    if job.device == "npu":
        import torch_npu  # noqa: F401  registers the npu device and HCCL

        torch.npu.set_device(rank)
        device, backend = torch.device("npu", rank), "hccl"
    dist.init_process_group(backend, init_method=f"file://{job.store}", rank=rank, world_size=job.world)
    try:
        pl = checked_placement(job.config, job.name, job.layout, job.world)
        records = []
        engine_shards = None
        if job.checkpoint is not None:
            engine_shards, record = megatron_shards(pl, rank, job.config, Path(job.checkpoint))
            records.append(record)
        for method in job.methods:
            schedule = build_schedule(pl, method)
            shards = engine_shards if engine_shards is not None else train_shards(pl, rank, job.seed, device)
            dist.barrier()
            result = run_transfer(pl, method, rank, job.world, shards, schedule=schedule)
            bad = mismatches(pl, rank, result.rollout, job.seed)
            records.append({**result.stats.as_dict(), "bit_exact": not bad, "mismatched": bad[:5],
                            "rollout_tensors": len(result.rollout)})
        dist.barrier()
        return records
    finally:
        dist.destroy_process_group()


def run_ranks(job_fields: dict[str, Any], timeout_s: float) -> list[dict[str, Any]]:
    """Start one process per rank, wait for all records; ExecutorError naming the first failure."""
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(PRELOAD)
    world = job_fields["world"]
    with tempfile.TemporaryDirectory(prefix="check-reshard-") as tmp:
        job = RankJob(**job_fields, store=str(Path(tmp) / "store"))
        results = ctx.Queue()
        procs = [ctx.Process(target=rank_main, args=(r, job, results), daemon=True) for r in range(world)]
        try:
            for p in procs:
                p.start()
            return _collect(procs, results, world, time.monotonic() + timeout_s, timeout_s)
        finally:
            _stop(procs)
            results.close()


def _collect(procs: list, results: Any, world: int, deadline: float, timeout_s: float) -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = []
    done = 0
    while done < world:
        dead = [(r, p.exitcode) for r, p in enumerate(procs) if p.exitcode not in (None, 0)]
        try:  # a rank that failed has flushed its error before exiting: read it before blaming the exit
            kind, rank, body = results.get(timeout=2.0 if dead else 0.5)
        except queue_mod.Empty:
            if dead:
                raise ExecutorError(f"rank {dead[0][0]} exited with status {dead[0][1]} before reporting") from None
            if time.monotonic() > deadline:
                raise ExecutorError(f"the ranks did not finish within {timeout_s:g} s") from None
            continue
        if kind == "error":
            raise ExecutorError(_first_cause(rank, body, results))
        records += body
        done += 1
    for p in procs:
        p.join(timeout=max(1.0, deadline - time.monotonic()))
    return records


def _first_cause(rank: int, message: str, results: Any) -> str:
    """The error that started it: a rank's failure shows up on its peers as transport errors, often first."""
    errors = [(rank, message)]
    with contextlib.suppress(queue_mod.Empty):
        while len(errors) < 64:
            kind, r, body = results.get(timeout=1.0)
            if kind == "error":
                errors.append((r, body))
    r, body = next((e for e in errors if TRANSPORT_ERROR not in e[1]), errors[0])
    return f"rank {r}: {body}"


def _stop(procs: list) -> None:
    for p in procs:
        if p.is_alive():
            p.terminate()
    for p in procs:
        p.join(timeout=5)
        if p.is_alive():
            p.kill()
            p.join()
