"""What a vLLM rollout asks for, measured from vLLM itself: `python -m executor.reshard.vllm_probe DIR TP OUT.json`.

vLLM loads the HuggingFace checkpoint in DIR directly (tensor parallel over TP local processes, on CPU).
Inside each of its workers, every module reports the HF tensor slices it holds, read from its own
partition attributes (QKV: heads per partition, kv-head replicas; merged gate/up: output sizes; row
parallel: input size per partition; vocabulary embeddings: their shard indices; anything else whole),
and compares its loaded local weight with those slices of the checkpoint, tensor by tensor, bit for bit.
OUT.json: one object per rank {"rank", "blocks": {hf name: [[start, stop], ...]}, "mismatched", "unknown"}.
Dense models only (the modules above); anything else is listed under "unknown".

vLLM imports this module in each worker as its worker extension (`ProbeExtension`) before it builds the
model: importing it installs the vllm_cpu_plain_linear patch (executor/cpu/vllm_compat.py), so the workers'
linear weights stay readable after loading.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

ENV = {"VLLM_TARGET_DEVICE": "cpu", "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind"}
SPLIT = {"qkv_proj": ("q_proj", "k_proj", "v_proj"), "gate_up_proj": ("gate_proj", "up_proj")}


def _whole(shape: tuple[int, ...]) -> list[list[int]]:
    return [[0, n] for n in shape]


def module_blocks(name: str, module: Any, ckpt: dict) -> dict[str, tuple[list[list[int]], Any]]:
    """HF name -> (block, this rank's local tensor of it) for one vLLM module; {} when it holds no weight."""
    kind = type(module).__name__
    weight = getattr(module, "weight", None)
    if weight is None or not hasattr(weight, "shape"):
        return {}
    out: dict[str, tuple[list[list[int]], Any]] = {}
    if kind == "QKVParallelLinear":
        rank, kv_rank = module.tp_rank, module.tp_rank // module.num_kv_head_replicas
        q, k, v = (module.num_heads * module.head_size, module.num_kv_heads * module.head_size,
                   module.num_kv_heads * module.v_head_size)
        rows = {"q_proj": (rank * q, q), "k_proj": (kv_rank * k, k), "v_proj": (kv_rank * v, v)}
        _fused(name, "qkv_proj", module, rows, out)
    elif kind == "MergedColumnParallelLinear":
        size = [s // module.tp_size for s in module.output_sizes]
        rows = {part: (module.tp_rank * size[i], size[i]) for i, part in enumerate(SPLIT["gate_up_proj"])}
        _fused(name, "gate_up_proj", module, rows, out)
    elif kind == "ColumnParallelLinear":
        per = module.output_size_per_partition
        _rows(f"{name}.weight", module.weight, (module.tp_rank * per, per), out)
        if getattr(module, "bias", None) is not None:
            _rows(f"{name}.bias", module.bias, (module.tp_rank * per, per), out)
    elif kind == "RowParallelLinear":
        per = module.input_size_per_partition
        out[f"{name}.weight"] = ([[0, module.weight.shape[0]], [module.tp_rank * per, (module.tp_rank + 1) * per]],
                                 module.weight)
        if getattr(module, "bias", None) is not None:
            out[f"{name}.bias"] = (_whole(tuple(module.bias.shape)), module.bias)
    elif kind in ("VocabParallelEmbedding", "ParallelLMHead"):
        idx = module.shard_indices
        n = idx.org_vocab_end_index - idx.org_vocab_start_index
        out[f"{name}.weight"] = ([[idx.org_vocab_start_index, idx.org_vocab_end_index], [0, weight.shape[1]]],
                                 weight[:n])
    elif f"{name}.weight" in ckpt and tuple(ckpt[f"{name}.weight"].shape) == tuple(weight.shape):
        out[f"{name}.weight"] = (_whole(tuple(weight.shape)), weight)
    return out


def _rows(hf: str, local: Any, rows: tuple[int, int], out: dict) -> None:
    start, size = rows
    out[hf] = ([[start, start + size], *_whole(tuple(local.shape[1:]))], local)


def _fused(name: str, fused: str, module: Any, rows: dict[str, tuple[int, int]], out: dict) -> None:
    """Split a fused local weight (and bias) back into its HF parts, in the order vLLM stacks them."""
    base = name[: -len(fused)]
    for attr in ("weight", "bias"):
        local = getattr(module, attr, None)
        if local is None:
            continue
        offset = 0
        for part, (start, size) in rows.items():
            _rows(f"{base}{part}.{attr}", local[offset:offset + size], (start, size), out)
            offset += size


def probe(model: Any) -> dict[str, Any]:
    """Runs inside each vLLM worker (ProbeExtension.probe_blocks)."""
    import torch
    from safetensors.torch import load_file
    from vllm.distributed import get_tensor_model_parallel_rank

    ckpt = load_file(str(Path(os.environ["EXECUTOR_PROBE_CKPT"]) / "model.safetensors"))
    blocks: dict[str, list[list[int]]] = {}
    mismatched, unknown = [], []
    for name, module in model.named_modules():
        if not name or not list(module.parameters(recurse=False)):
            continue
        found = module_blocks(name, module, ckpt)
        if not found:
            unknown.append(f"{name} ({type(module).__name__})")
        for hf, (block, local) in found.items():
            if hf not in ckpt:
                unknown.append(hf)
                continue
            blocks[hf] = block
            want = ckpt[hf][tuple(slice(a, b) for a, b in block)]
            got = local.detach().to("cpu").contiguous()
            if got.shape != want.shape or not torch.equal(got.view(torch.uint8), want.contiguous().view(torch.uint8)):
                mismatched.append(hf)
    return {"rank": get_tensor_model_parallel_rank(), "blocks": blocks, "mismatched": mismatched,
            "unknown": unknown, "checkpoint_tensors": sorted(ckpt)}


class ProbeExtension:
    """vLLM worker extension (`worker_extension_cls`): a method the driver calls on every worker."""

    def probe_blocks(self) -> dict[str, Any]:
        return probe(self.model_runner.model)


def _install_patches() -> None:
    from executor.cpu.vllm_compat import PATCHES

    for patch in PATCHES:
        patch.apply_in_worker()


def main() -> None:
    ckpt_dir, tp, out = sys.argv[1], int(sys.argv[2]), Path(sys.argv[3])
    os.environ.update({**ENV, "EXECUTOR_PROBE_CKPT": ckpt_dir})
    from vllm import LLM

    llm = LLM(model=ckpt_dir, tensor_parallel_size=tp, dtype="auto", enforce_eager=True, skip_tokenizer_init=True,
              max_model_len=64, max_num_seqs=4, load_format="safetensors", distributed_executor_backend="mp",
              worker_extension_cls=f"{__name__ if __name__ != '__main__' else 'executor.reshard.vllm_probe'}."
                                   "ProbeExtension")
    ranks = sorted(llm.collective_rpc("probe_blocks"), key=lambda r: r["rank"])
    out.write_text(json.dumps(ranks))
    llm.llm_engine.engine_core.shutdown()  # stops the engine process and its workers before this one exits


_install_patches()  # in vLLM's workers, which import this module before building the model

if __name__ == "__main__":
    main()
