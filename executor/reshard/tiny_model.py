"""A CPU-sized model of a plan's architecture, cut to the plan's layouts, with reproducible random weights.

`shrink_config` keeps what decides how the reshard moves tensors (model type, so the attention kind and
the MoE structure; the routed-expert count and top-k; shared experts; tied embeddings; dtype) and
shrinks the sizes (hidden, heads, FFN, expert FFN, vocabulary, LoRA ranks, head dims, layers) to the
smallest values every TP size of both layouts still divides, with two decoder layers per pipeline stage.
Weights are regenerated from (seed, tensor name) on any rank, so each rank can check its rollout shards
against the full tensors without them ever being sent.
"""

from __future__ import annotations

import math
import zlib
from typing import TYPE_CHECKING, Any

from twin.catalog.config import parse_config
from twin.catalog.inventory import TensorSpec, block_slices
from twin.catalog.registry import raw_config as registry_raw_config
from twin.cost_models.placement import VLLM_VOCAB_MULTIPLE, Placement
from twin.errors import TwinError
from twin.layout.engine import as_engine_builds
from twin.layout.models import Layout, TrainLayout
from twin.layout.rules import check_layout

if TYPE_CHECKING:
    import torch

    from executor.npu_opt.directed_reshard_transfer import RolloutShards, Shards
    from twin.hardware.specs import RolloutEngine

HEAD_DIM = 16
VOCAB = 500
"""The shrunk vocabulary before `shrunk_vocab` fits it to the layouts: 500 = 4 x 125 rows, which TP1, 2 and 4 split
unpadded (verl's Megatron engine pads nothing, twin/cost_models/placement.py TRAIN_VOCAB_MULTIPLE) and which vLLM pads
to 512, a multiple of its 64, so that its last TP rank holds fewer rows than the others and the training and rollout
vocabulary blocks differ (500 / TP2: rows 0-250 and 250-500 in training, 0-256 and 256-500 in the rollout)."""
MLA_DIMS = {"q_lora_rank": 16, "kv_lora_rank": 16, "qk_nope_head_dim": 8, "qk_rope_head_dim": 8, "v_head_dim": 8}
KEPT = ("model_type", "n_routed_experts", "num_experts", "num_experts_per_tok", "n_shared_experts",
        "tie_word_embeddings", "torch_dtype")


def raw_config(model: str) -> dict[str, Any]:
    """The HuggingFace config.json dict of a catalog name or a path (file or directory)."""
    return registry_raw_config(model)[0]


def reshard_layout(layout: Layout, keep_stage_split: bool = False) -> Layout:
    """Only what places weights: recompute, offload and micro-batches do not. An explicit stage split
    (pp_layers) is kept only for the model it was written for: a shrunk model splits its layers evenly."""
    t = layout.train
    train = TrainLayout(engine=t.engine, tp=t.tp, pp=t.pp, ep=t.ep, cp=t.cp, etp=t.etp,
                        moe_tp_extend_ep=t.moe_tp_extend_ep, vpp=t.vpp,
                        pp_layers=t.pp_layers if keep_stage_split else None)
    return Layout(train=train, rollout=layout.rollout)


def shrink_config(raw: dict[str, Any], layout: Layout) -> dict[str, Any]:
    """A small config.json of the same family that both layouts of `layout` can cut."""
    parse_config(raw, "the plan's model")  # a malformed config fails here, naming the field
    train, rollout = layout.train, layout.rollout
    unit = math.lcm(train.tp, rollout.tp, train.cp)
    heads = 2 * unit
    hidden = heads * HEAD_DIM
    small = {**raw, "hidden_size": hidden, "num_attention_heads": heads, "intermediate_size": 2 * hidden,
             "vocab_size": shrunk_vocab(unit), "num_hidden_layers": 2 * (train.vpp or 1) * train.pp,
             "max_position_embeddings": 256}
    if raw.get("model_type") == "deepseek_v3":
        small.update({k: v for k, v in MLA_DIMS.items() if k != "q_lora_rank" or raw.get(k)})
        small.update(num_key_value_heads=heads, first_k_dense_replace=min(1, raw.get("first_k_dense_replace") or 0),
                     num_nextn_predict_layers=0)
    else:
        kv, q = raw.get("num_key_value_heads") or raw["num_attention_heads"], raw["num_attention_heads"]
        small["num_key_value_heads"] = unit if kv < q else heads
        if "head_dim" in raw:
            small["head_dim"] = HEAD_DIM
    if "moe_intermediate_size" in raw:
        small["moe_intermediate_size"] = 8 * math.lcm(unit, train.expert_tp)
    if raw.get("mlp_only_layers"):
        small["mlp_only_layers"] = []
    return small


def shrunk_vocab(unit: int) -> int:
    """`VOCAB` rounded up to a multiple of `unit` (every TP size of both layouts), one `unit` more where that lands on
    a multiple of vLLM's padding (unavoidable only from a unit of 64 on): 500 up to TP4, 504 at 8, 528 at 16."""
    vocab = -(-VOCAB // unit) * unit
    return vocab + unit if vocab % VLLM_VOCAB_MULTIPLE == 0 and unit < VLLM_VOCAB_MULTIPLE else vocab


def describe_shrink(raw: dict[str, Any], small: dict[str, Any]) -> tuple[list[str], list[str]]:
    """(what was shrunk, 'key old->new'; what was kept, 'key value')."""
    shrunk = [f"{k} {raw.get(k)}->{v}" for k, v in small.items() if raw.get(k) != v]
    kept = [f"{k} {raw[k]}" for k in KEPT if k in raw]
    return shrunk, kept


def checked_placement(raw: dict[str, Any], name: str, layout: Layout, world: int,
                      engine: RolloutEngine | None = None) -> Placement:
    """The placement of config `raw` under `layout` on `world` devices, the rollout as `engine` builds it (None:
    as `layout` says); TwinError on a broken layout rule."""
    from twin.catalog.inventory import build_inventory

    cfg = parse_config(raw, name)
    if engine is not None:
        layout = as_engine_builds(layout, cfg, engine)
    errors = check_layout(layout, cfg, world, None, directed_reshard=True)
    if errors:
        raise TwinError(f"layout {layout.train.short()} -> {layout.rollout.short()} on {world} devices: {errors[0]}")
    return Placement(build_inventory(cfg), layout.train, layout.rollout, world)


def scale_layout(layout: Layout, devices: int, world: int) -> Layout:
    """The same model-parallel sizes on `world` devices instead of `devices`: the data-parallel sizes shrink,
    and a rollout EP that spans every device keeps doing so."""
    ro = layout.rollout
    if world % ro.tp:
        raise TwinError(f"--world {world} is not a multiple of the rollout TP{ro.tp}")
    ep = world if ro.ep == devices and ro.ep > 1 else ro.ep
    return Layout(train=layout.train, rollout=ro.model_copy(update={"dp": world // ro.tp, "ep": ep}))


def full_tensor(t: TensorSpec, seed: int, device: str | torch.device = "cpu") -> torch.Tensor:
    """The whole tensor `t`, the same on every rank for the same seed."""
    import torch

    gen = torch.Generator().manual_seed((seed << 32) + zlib.crc32(t.name.encode()))
    return torch.randn(t.shape, generator=gen).to(dtype=getattr(torch, t.dtype), device=device)


def train_shards(pl: Placement, rank: int, seed: int, device: str | torch.device = "cpu") -> Shards:
    """This rank's training blocks of every moved tensor, as contiguous tensors."""
    out: Shards = {}
    for t in pl.tensors:
        blocks = pl.train_blocks(t, rank)
        if blocks:
            full = full_tensor(t, seed, device)
            out[t.name] = {b: full[block_slices(b)].clone() for b in blocks}
    return out


def mismatches(pl: Placement, rank: int, rollout: RolloutShards, seed: int) -> list[str]:
    """Tensors whose rollout shards on this rank differ, bit for bit, from slices of the full tensors."""
    from executor.reshard.blocks import as_bytes

    bad = []
    for t in pl.tensors:
        needed = pl.rollout_blocks(t, rank)
        got = rollout.get(t.name, [])
        if [b for b, _ in got] != needed:
            bad.append(t.name)
            continue
        if not got:
            continue
        full = full_tensor(t, seed, got[0][1].device)
        if not all(as_bytes(x).equal(as_bytes(full[block_slices(b)].contiguous())) for b, x in got):
            bad.append(t.name)
    return bad
