"""What reading an FSDP2 trainer's shards for the directed weight sync costs on this host: the source of the CPU
profile's `fsdp_shard_read_us` (twin/cost_models/export.py).

The directed backend's weight sync starts each rank with `fsdp_shards` (executor/npu_opt/directed_reshard_backend.py):
verl's FSDP2 module's state dict with HuggingFace keys, then each moved tensor's local dimension-0 shard, detached and
made contiguous in the sync's dtype. This script builds the plan's model from its HF config (transformers, random
weights), shards it with torch's `fully_shard` per decoder layer and at the root on two gloo ranks (as verl's FSDP2
engine wraps it), and times that very function `--repeats` times after one warm-up: the median per read and per moved
tensor. The CPU loop's run times the same read inside its syncs (`shards_s` in run/sync_timings).

    python benchmarks/fsdp_shard_read_cpu.py --plan plan.json --model-config assets/model/config.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

WORLD = 2


def _fsdp2_model(config_path: str):
    """The HF causal LM of `config_path` (random weights, fp32), each decoder layer and then the root sharded by
    FSDP2 over the default process group."""
    import torch
    from torch.distributed.fsdp import fully_shard
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(str(Path(config_path).parent))
    model = AutoModelForCausalLM.from_config(config, torch_dtype=torch.float32)
    for layer in model.model.layers:
        fully_shard(layer)
    return fully_shard(model)


def _rank(rank: int, args: argparse.Namespace, store: str) -> None:
    import torch
    import torch.distributed as dist

    from executor.npu_opt.directed_reshard_backend import fsdp_shards
    from executor.reshard.tiny_model import checked_placement
    from twin.plan import Plan

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=WORLD)
    plan = Plan.model_validate_json(Path(args.plan).read_text())
    pl = checked_placement(json.loads(Path(args.model_config).read_text()), plan.scenario.model, plan.layout, WORLD)
    engine = SimpleNamespace(module=_fsdp2_model(args.model_config))
    times, tensors = [], 0
    for _ in range(args.repeats + 1):  # the first is a warm-up
        dist.barrier()
        start = time.perf_counter()
        shards = fsdp_shards(engine, pl)
        times.append(time.perf_counter() - start)
        tensors = len(shards)
    dist.destroy_process_group()
    if rank == 0:
        read = statistics.median(times[1:])
        print(f"fsdp_shards on {WORLD} gloo ranks, rank 0, median of {args.repeats}: {read * 1e3:.2f} ms for "
              f"{tensors} moved tensors ({read / tensors * 1e6:.1f} us a tensor; fastest {min(times[1:]) * 1e3:.2f} "
              f"ms, slowest {max(times[1:]) * 1e3:.2f} ms)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--plan", required=True, help="plan.json of `twin plan` (FSDP training, directed reshard)")
    ap.add_argument("--model-config", required=True, help="the plan model's HF config.json")
    ap.add_argument("--repeats", type=int, default=15)
    args = ap.parse_args()
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(_rank, args=(args, os.path.join(tmp, "store")), nprocs=WORLD)


if __name__ == "__main__":
    main()
