"""Host time of a Megatron trainer's weight export per HuggingFace tensor, on this machine's CPU (megatron-core
through mbridge, one rank over gloo).

Run: python benchmarks/megatron_export_cpu.py [--model qwen3-30b-a3b] [--experts 128] [--layers 4] [--repeats 3]
A catalog model shrunk to tiny tensors (its family, `--layers` layers, `--experts` routed experts where it has
them) is built as verl's Megatron engine builds it on CPU (executor/cpu/megatron_model.py), and mbridge's
`export_weights`, the generator verl's weight sync walks (its checkpoint engine and the older per-tensor path
alike), is run to the end. At world size 1 every collective of the export is local and the tensors are tiny, so the
time is the export's host work: per Megatron parameter, three object collectives over the PP group (mbridge's
broadcast_str_from_megatron_pp and broadcast_from_megatron_pp: two all_gather_object and a broadcast_object_list,
made even on a one-rank group; timed apart here), and per HuggingFace tensor it yields the rest (name conversion, the
fused projections split back: QKV, gate/up, one expert at a time). The twin's `object_collective_local_us` and
`export_tensor_host_us` are these two.
"""

from __future__ import annotations

import argparse
import functools
import os
import tempfile
import time
from collections.abc import Callable


def _timed(fn: Callable, spent: list[float]) -> Callable:
    """`fn` adding its wall time to spent[0] and its calls to spent[1]."""

    @functools.wraps(fn)
    def wrapper(*args: object, **kwargs: object) -> object:
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            spent[0] += time.perf_counter() - start
            spent[1] += 1

    return wrapper


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="qwen3-30b-a3b")
    parser.add_argument("--experts", type=int, default=128)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    import torch
    import torch.distributed as dist

    from executor.cpu.megatron_model import MegatronCpuModel
    from executor.cpu.megatron_verl_compat import MbridgeCpuNormNames
    from executor.reshard.tiny_model import raw_config, shrink_config
    from twin.layout.models import Layout, RolloutLayout, TrainLayout

    torch.set_num_threads(1)
    MbridgeCpuNormNames().apply_in_worker()  # mbridge's names for the local spec's modules, as verl's CPU run has
    config = shrink_config(raw_config(args.model), Layout(train=TrainLayout(), rollout=RolloutLayout()))
    config["num_hidden_layers"] = args.layers
    for key in ("num_experts", "n_routed_experts"):
        if key in config:
            config[key] = args.experts
    with tempfile.TemporaryDirectory() as tmp:
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        dist.init_process_group("gloo", init_method=f"file://{tmp}/store", rank=0, world_size=1)
        try:
            m = MegatronCpuModel.build(config, tp=1, pp=1, dtype=torch.bfloat16)
            objects: list[float] = [0.0, 0]
            for name in ("all_gather_object", "broadcast_object_list"):
                setattr(dist, name, _timed(getattr(dist, name), objects))
            best, count = (float("inf"), 0.0, 0), 0
            for _ in range(args.repeats):
                objects[:] = [0.0, 0]
                start = time.perf_counter()
                count = sum(1 for _ in m.bridge.export_weights([m.model]))
                best = min(best, (time.perf_counter() - start, *objects))
        finally:
            dist.destroy_process_group()
    params = sum(1 for _ in m.model.parameters())
    print(f"model: {args.model} shrunk, {args.layers} layers, {args.experts} experts where routed")
    print(f"megatron parameters: {params}, exported HF tensors: {count}")
    total, in_objects, calls = best
    print(f"export: {total:.3f} s (best of {args.repeats}); object collectives: {calls:.0f} calls, "
          f"{in_objects / calls * 1e6:.1f} us each ({calls / params:.2f} per parameter)")
    print(f"the rest: {(total - in_objects) / count * 1e6:.1f} us per HF tensor")


if __name__ == "__main__":
    main()
