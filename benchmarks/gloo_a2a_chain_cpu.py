"""What one round of the directed weight reshard costs on this host: an all-to-all after a barrier against one of a
chain of rounds run back to back, and the real transfer's rounds split into the exchange and the host work around it.

The collectives job times one call per sample after a barrier, so both ranks enter together. The directed reshard
(executor/npu_opt/directed_reshard_transfer.py) runs its rounds one after another: each rank enters the next round
as soon as its own part of the last one has landed, so a round also pays the ranks' drift apart. For each size this
prints the median of `--repeats` single calls after a barrier and of `--repeats` chains of `--chain` calls (per
call); with `--plan` (a plan of `twin plan`) and `--model-config` (its HF config.json, e.g. the CPU loop's
assets/model/config.json) it also runs the plan's directed transfer `--repeats` times on two gloo ranks and prints
the median time inside all_to_all_single and around it, per round, and before the rounds (allocating the rollout
tensors and copying in the blocks the rank holds), per rollout tensor; and of the calls, set side by side on the host's
one clock, how long the first rank to enter a round waited for the last and how long both were inside it.

    python benchmarks/gloo_a2a_chain_cpu.py --sizes 1024,12288,65536 --chain 9 --repeats 15 \
        --plan plan.json --model-config assets/model/config.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

WORLD = 2


def _a2a(size: int, rank: int):
    """One all_to_all_single call of `size` bytes per rank, sent to the peer (the reshard's pattern on two ranks)."""
    import torch
    import torch.distributed as dist

    inp, out = torch.ones(size, dtype=torch.uint8), torch.empty(size, dtype=torch.uint8)
    splits = [0] * WORLD
    splits[1 - rank] = size
    return lambda: dist.all_to_all_single(out, inp, splits, splits)


def _a2a_rows(rank: int, sizes: list[int], chain: int, repeats: int) -> list[tuple[int, float, float]]:
    import torch.distributed as dist

    rows = []
    for size in sizes:
        call = _a2a(size, rank)
        single, chained = [], []
        for _ in range(repeats + 1):  # the first of each kind is a warm-up
            dist.barrier()
            start = time.perf_counter()
            call()
            single.append(time.perf_counter() - start)
            dist.barrier()
            start = time.perf_counter()
            for _ in range(chain):
                call()
            chained.append((time.perf_counter() - start) / chain)
        rows.append((size, statistics.median(single[1:]), statistics.median(chained[1:])))
    return rows


def _transfer_rows(rank: int, plan_path: str, config_path: str, repeats: int) -> tuple[int, int, list[float]]:
    """(rounds, rollout tensors, median seconds inside all_to_all_single, around it, before the rounds, and of the
    calls the first rank's wait for the last to enter and both ranks' time inside together) of the plan's directed
    transfer on this rank."""
    import torch.distributed as dist

    import executor.npu_opt.directed_reshard_transfer as transfer
    from executor.reshard.schedule import build_schedule
    from executor.reshard.tiny_model import checked_placement, train_shards
    from twin.plan import Plan

    plan = Plan.model_validate_json(Path(plan_path).read_text())
    pl = checked_placement(json.loads(Path(config_path).read_text()), plan.scenario.model, plan.layout, WORLD)
    schedule = build_schedule(pl, "directed")
    shards = train_shards(pl, rank, 0, "cpu")
    exchanged, around, before, waits, boths, rounds, tensors = [], [], [], [], [], 0, 0
    for _ in range(repeats + 1):
        dist.barrier()
        start = time.perf_counter()
        result = transfer.run_transfer(pl, "directed", rank, WORLD, shards, schedule=schedule)
        stats = result.stats  # the transfer times its own calls (RankStats.exchange_s)
        before.append(time.perf_counter() - start - stats.seconds)
        exchanged.append(stats.exchange_s)
        around.append(stats.seconds - stats.exchange_s)
        spans: list = [None] * WORLD
        dist.all_gather_object(spans, stats.exchange_spans)  # one host, one clock: the ranks' calls side by side
        wait, both = transfer.round_overlap(spans)
        waits.append(wait)
        boths.append(both)
        rounds, tensors = stats.rounds, sum(len(blocks) for blocks in result.rollout.values())
    return rounds, tensors, [statistics.median(xs[1:]) for xs in (exchanged, around, before, waits, boths)]


def _rank(rank: int, args: argparse.Namespace, store: str) -> None:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=WORLD)
    sizes = [int(s) for s in args.sizes.split(",")]
    rows = _a2a_rows(rank, sizes, args.chain, args.repeats)
    transfer = _transfer_rows(rank, args.plan, args.model_config, args.repeats) if args.plan else None
    dist.destroy_process_group()
    if rank:
        return
    print(f"all_to_all_single on {WORLD} gloo ranks, ms per call (median of {args.repeats})")
    print(f"{'bytes':>8} {'after barrier':>14} {f'chain of {args.chain}':>12}")
    for size, single, chained in rows:
        print(f"{size:>8} {single * 1e3:>14.3f} {chained * 1e3:>12.3f}")
    if transfer:
        rounds, tensors, (inside, around, before, wait, both) = transfer
        print(f"directed transfer of {args.plan}, rank 0: {rounds} rounds, inside all_to_all_single {inside * 1e3:.2f} "
              f"ms ({inside / rounds * 1e3:.3f} a round), around it {around * 1e3:.2f} ms ({around / rounds * 1e3:.3f} "
              f"a round); before the rounds {before * 1e3:.2f} ms for {tensors} rollout tensors "
              f"({before / tensors * 1e6:.0f} us a tensor); of the calls, the first rank's wait for the last to enter "
              f"{wait * 1e3:.2f} ms ({wait / rounds * 1e3:.3f} a round), both inside {both * 1e3:.2f} ms "
              f"({both / rounds * 1e3:.3f} a round)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1024,12288,65536", help="bytes each rank sends, comma-separated")
    ap.add_argument("--chain", type=int, default=9, help="calls back to back in a chain (the tiny model's rounds)")
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--plan", help="plan.json whose directed transfer to run (optional)")
    ap.add_argument("--model-config", help="the plan model's HF config.json (with --plan)")
    args = ap.parse_args()
    if bool(args.plan) != bool(args.model_config):
        ap.error("--plan and --model-config go together")
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(_rank, args=(args, os.path.join(tmp, "store")), nprocs=WORLD)


if __name__ == "__main__":
    main()
