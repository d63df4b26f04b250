"""check-reshard's Megatron source: the training shards taken from a Megatron-core model, not cut by the twin.

On each rank, `megatron_shards` builds the rank's stage of a Megatron GPTModel (executor/cpu/megatron_model.py,
gloo, the plan's TP, PP, EP and expert TP), loads the check's HuggingFace checkpoint into it through mbridge's
converters, traces which HF blocks every local parameter holds, and cuts them out of the live parameters.
Routed experts, one tensor per expert in the checkpoint and in Megatron (or, for MindSpeed's moe_tp_extend_ep,
Megatron's legacy GroupedMLP of whole experts, read by executor/reshard/megatron_blocks.py
`grouped_expert_views`), are then stacked into the blocks of the twin's fused expert tensors
(executor/reshard/experts.py). Those are the reshard's input; the record says
which blocks Megatron holds (the engine-side count of the training side) and whether each equals the
checkpoint's slice bit for bit.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from executor.versions import installed_version
from twin.cost_models.placement import Placement
from twin.optimizations import EXECUTOR_SUPPORT

if TYPE_CHECKING:
    from executor.npu_opt.directed_reshard_transfer import Shards

TRAIN_DIST = "megatron-core"
BRIDGE_DIST = "mbridge"
SUPPORTED = EXECUTOR_SUPPORT["directed_reshard"].megatron_model_types
"""Families with an mbridge bridge whose names executor/reshard/megatron_blocks.py translates and whose twin inventory
Megatron's local spec builds (Qwen2-MoE's shared expert and its gate are named unlike the twin's shared_experts)."""
RECORD = "engine_train"  # the `method` of the rank record that carries Megatron's blocks


def megatron_refusal(config: dict[str, Any], pl: Placement) -> str | None:
    """Why Megatron cannot be the source of this check (None when it can)."""
    lay = pl.train
    if lay.engine != "megatron":
        return f"the plan trains with {lay.engine}, not Megatron"
    for dist in (TRAIN_DIST, BRIDGE_DIST):
        if installed_version(dist) is None:
            return f"{dist} is not installed here (the `megatron` extra)"
    if lay.cp > 1 or lay.vpp:
        return f"the CPU builder makes TP x PP x EP models only, not train {lay.short()}"
    if config.get("model_type") not in SUPPORTED:
        return f"the CPU builder makes models of types {', '.join(SUPPORTED)} only"
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
    from executor.reshard.experts import fuse_shards, fuse_tensors
    from twin.catalog.inventory import block_slices

    lay = pl.train
    hf = load_file(str(checkpoint / "model.safetensors"))
    # MindSpeed's moe_tp_extend_ep: its GroupedMLP experts, whole, over TP x EP ranks, built as megatron-core's expert
    # grid of expert TP 1 over EP = TP x EP, which places them alike (tests/executor/test_megatron_blocks.py)
    model = MegatronCpuModel.build(config, tp=lay.tp, pp=lay.pp, ep=lay.expert_partition, etp=lay.expert_tp,
                                   dtype=getattr(torch, config.get("torch_dtype", "float32")),
                                   grouped_experts=lay.moe_tp_extend_ep)
    model.load(hf)
    shapes = {n: tuple(x.shape) for n, x in hf.items()}
    shards = {n: {b: x.to(hf[n].dtype).contiguous() for b, x in blocks.items()}  # e.g. fp32 norms: the HF dtype
              for n, blocks in model.hf_shards(model.hf_blocks(shapes)).items()}
    shards, ckpt = fuse_shards(shards, shapes), fuse_tensors(hf)
    mismatched = sorted(n for n, blocks in shards.items() for b, x in blocks.items()
                        if not as_bytes(x).equal(as_bytes(ckpt[n][block_slices(b)].contiguous())))
    record = {"method": RECORD, "rank": rank, "engine": train_version(),
              "parameters": len(model.sources) + len(model.grouped), "grouped_expert_parameters": len(model.grouped),
              "blocks": {n: sorted([list(r) for r in b] for b in blocks) for n, blocks in shards.items()},
              "bit_exact": not mismatched, "mismatched": mismatched[:5]}
    moved = {t.name for t in pl.tensors}
    return {n: blocks for n, blocks in shards.items() if n in moved}, record
