"""check-reshard's Megatron source: the training shards taken from a Megatron-core model, not cut by the twin.

On each rank, `megatron_shards` builds the rank's stage of a Megatron GPTModel (executor/cpu/megatron_model.py,
gloo, the plan's TP and PP), loads the check's HuggingFace checkpoint into it through mbridge's converters,
traces which HF blocks every local parameter holds, and cuts them out of the live parameters. Those are the
reshard's input; the record says which blocks Megatron holds (the engine-side count of the training side)
and whether each equals the checkpoint's slice bit for bit.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from executor.versions import installed_version
from twin.cost_models.placement import Placement

if TYPE_CHECKING:
    from executor.npu_opt.directed_reshard_transfer import Shards

TRAIN_DIST = "megatron-core"
BRIDGE_DIST = "mbridge"
SUPPORTED = ("qwen2", "qwen3", "llama")  # dense families with an mbridge bridge and a twin inventory
RECORD = "engine_train"  # the `method` of the rank record that carries Megatron's blocks


def megatron_refusal(config: dict[str, Any], pl: Placement) -> str | None:
    """Why Megatron cannot be the source of this check (None when it can)."""
    lay = pl.train
    if lay.engine != "megatron":
        return f"the plan trains with {lay.engine}, not Megatron"
    for dist in (TRAIN_DIST, BRIDGE_DIST):
        if installed_version(dist) is None:
            return f"{dist} is not installed here (the `megatron` extra)"
    if lay.cp > 1 or lay.vpp or lay.ep > 1:
        return f"the CPU builder makes dense TP x PP models only, not train {lay.short()}"
    if any(t.shard.ep_dim is not None for t in pl.tensors) or config.get("model_type") not in SUPPORTED:
        return f"the CPU builder makes dense models of types {', '.join(SUPPORTED)} only"
    return None


def train_version() -> str:
    return f"{TRAIN_DIST} {installed_version(TRAIN_DIST)}"


def megatron_shards(pl: Placement, rank: int, config: dict[str, Any], checkpoint: Path,
                    ) -> tuple[Shards, dict[str, Any]]:
    """This rank's training shards from Megatron, and its record of what Megatron holds."""
    import torch
    from safetensors.torch import load_file

    from executor.cpu.megatron_model import MegatronCpuModel
    from executor.reshard.blocks import as_bytes
    from twin.catalog.inventory import block_slices

    ckpt = load_file(str(checkpoint / "model.safetensors"))
    model = MegatronCpuModel.build(config, tp=pl.train.tp, pp=pl.train.pp,
                                   dtype=getattr(torch, config.get("torch_dtype", "float32")))
    model.load(ckpt)
    shards = {n: {b: x.to(ckpt[n].dtype).contiguous() for b, x in blocks.items()}  # e.g. fp32 norms: the HF dtype
              for n, blocks in model.hf_shards(model.hf_blocks({n: tuple(x.shape) for n, x in ckpt.items()})).items()}
    mismatched = sorted(n for n, blocks in shards.items() for b, x in blocks.items()
                        if not as_bytes(x).equal(as_bytes(ckpt[n][block_slices(b)].contiguous())))
    record = {"method": RECORD, "rank": rank, "engine": train_version(), "parameters": len(model.sources),
              "blocks": {n: sorted([list(r) for r in b] for b in blocks) for n, blocks in shards.items()},
              "bit_exact": not mismatched, "mismatched": mismatched[:5]}
    moved = {t.name for t in pl.tensors}
    return {n: blocks for n, blocks in shards.items() if n in moved}, record
