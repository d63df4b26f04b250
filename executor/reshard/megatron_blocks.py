"""Which HuggingFace tensor blocks each Megatron parameter of this rank holds, traced through mbridge.

mbridge converts HF tensors into a Megatron parameter's local shard in two steps: `_weight_to_mcore_format`
(fused QKV in query groups, gate/up stacked, the vocabulary padded) and `_weight_split_across_tp` (this TP
rank's part). `trace_hf_blocks` runs those same steps on tensors of element codes (float64, exact below
2**53: code = offset of the HF tensor + row-major index + 1, 0 for padding) instead of weights; the codes that
land in the local shard name the HF elements it holds, which must form one block per HF tensor in row-major
order. `cut_hf_shards` then cuts the live parameters into those blocks: the directed reshard's input, for
the CPU builder (executor/cpu/megatron_model.py) and for verl's Megatron engine alike (both use mbridge).
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

    from twin.catalog.inventory import Block

LOCAL_TO_TE = {"input_layernorm.weight": "self_attention.linear_qkv.layer_norm_weight",
               "pre_mlp_layernorm.weight": "mlp.linear_fc1.layer_norm_weight"}
"""Megatron's local layer spec keeps the norms as modules; mbridge names them as Transformer Engine fuses them."""
MLA_LOCAL_TO_TE = {"self_attention.q_layernorm.weight": "self_attention.linear_q_up_proj.layer_norm_weight",
                   "self_attention.kv_layernorm.weight": "self_attention.linear_kv_up_proj.layer_norm_weight"}
"""Multi-latent attention keeps its input norm a module in both specs (mbridge's DeepSeek-V3 bridge names it
`input_layernorm`, and its pre-MLP norm `pre_mlp_layernorm` in every layer); Transformer Engine fuses the norms of
the compressed query and key-value into their up projections."""
LOCAL_EXPERT = re.compile(r"\.mlp\.experts\.local_experts\.(\d+)\.(linear_fc[12])\.weight$")
"""The local spec's SequentialMLP holds expert i as `local_experts.i.linear_fcK.weight`; mbridge names it as
Transformer Engine's grouped MLP does, `linear_fcK.weight<i>`."""


GROUPED_EXPERTS = re.compile(r"^(?P<layer>.+)\.mlp\.experts\.weight(?P<fc>[12])$")
"""Megatron's legacy GroupedMLP, which MindSpeed's moe_tp_extend_ep builds its experts as
(mindspeed/core/transformer/moe/moe_feature/adaptor.py MindSpeedTpExtendEpGmmExperts), keeps a layer's local experts
in two tensors that mbridge does not name: `weight1` [hidden, experts x 2 x ffn] and `weight2` [experts x ffn,
hidden], which its forward reads as `weight1.view(experts, hidden, -1)` (expert i's gate columns, then its up
columns) and `weight2.view(experts, -1, hidden)` (megatron/core/transformer/moe/experts.py GroupedMLP.forward; the
same in MindSpeed's TpExtendEpGmmExpertsImpl.forward)."""


class BlockTraceError(Exception):
    """A local parameter's part of an HF tensor is not one block, or a tensor is unknown; the message says which."""


@dataclass
class HfSlice:
    """One HF tensor block a local parameter holds, and where its elements sit in the local tensor."""

    name: str
    block: Block
    mask: torch.Tensor  # bool, local parameter shape; its True elements in row-major order are the block's


def te_name(name: str, first_expert: int = 0, fused_pre_mlp_norm: bool = True, mla: bool = False) -> str:
    """A Megatron parameter name as mbridge's mappings spell it (Transformer Engine's fused norms and grouped
    experts); a local expert's index is shifted by `first_expert`, this EP rank's first global expert. The pre-MLP
    norm is fused into the MLP's first linear only in dense models (`fused_pre_mlp_norm`): mbridge's MoE bridges
    name it as its own module. `mla`: multi-latent attention's norms (`MLA_LOCAL_TO_TE`)."""
    expert = LOCAL_EXPERT.search(name)
    if expert:
        return f"{name[: expert.start()]}.mlp.experts.{expert[2]}.weight{int(expert[1]) + first_expert}"
    norms = MLA_LOCAL_TO_TE if mla else LOCAL_TO_TE
    for local, te in norms.items():
        if name.endswith(local) and (fused_pre_mlp_norm or local != "pre_mlp_layernorm.weight"):
            return name[: -len(local)] + te
    return name


def mbridge_name(bridge: Any, name: str) -> str:
    """`te_name` for this bridge's model and EP rank. mbridge numbers experts globally only in its grouped-MLP
    names (its local-to-global mapping leaves the local spec's `local_experts.i` alone), so a local expert's index is
    shifted by the experts of the EP ranks before this one (mbridge's rule: num_experts / EP per rank, in EP
    order); its MoE bridges keep the pre-MLP norm a module of its own (Qwen MoE: all layers MoE; DeepSeek-V3: its
    dense first layers too)."""
    experts = getattr(bridge.config, "num_moe_experts", None) or 0
    first = experts // bridge.mpu.ep_size * bridge.mpu.ep_rank
    return te_name(name, first, fused_pre_mlp_norm=not experts,
                   mla=bool(getattr(bridge.config, "multi_latent_attention", False)))


def hf_sources(bridge: Any, model: Any) -> dict[str, list[str]]:
    """Local parameter name -> the HF tensors mbridge builds it from, in order (one model chunk); grouped-MLP
    experts are mapped by `grouped_expert_views` instead."""
    return {name: bridge._weight_name_mapping_mcore_to_hf(mbridge_name(bridge, global_name))
            for name, global_name in bridge._weight_name_mapping_mcore_local_to_global(model).items()
            if not GROUPED_EXPERTS.match(global_name)}


def first_local_expert(mpu: Any, local: int, tp_extend_ep: bool) -> int:
    """Global index of this rank's first local expert. Megatron numbers them by EP rank; MindSpeed's
    moe_tp_extend_ep spreads them over TP x EP, the TP ranks of an EP rank taking consecutive runs
    (mindspeed/core/transformer/moe/moe_feature/tp_extend_ep/moe_layer.py MSBaseMoELayer: offset
    ep_rank x local x TP + tp_rank x local)."""
    return (mpu.ep_rank * mpu.tp_size + mpu.tp_rank) * local if tp_extend_ep else mpu.ep_rank * local


def grouped_expert_views(bridge: Any, model: Any, params: dict[str, torch.Tensor], tp_extend_ep: bool = False,
                         ) -> dict[str, list[tuple[str, torch.Tensor]]]:
    """Grouped-MLP parameter -> (HF name of one expert's projection, the view of the parameter that holds it, in the
    HF tensor's shape), for every local expert; whole experts only (expert TP 1, as moe_tp_extend_ep has)."""
    cfg, mpu = bridge.config, bridge.mpu
    if not getattr(cfg, "num_moe_experts", None):
        return {}
    hidden, ffn = cfg.hidden_size, cfg.moe_ffn_hidden_size
    local = cfg.num_moe_experts // (mpu.ep_size * (mpu.tp_size if tp_extend_ep else 1))
    first = first_local_expert(mpu, local, tp_extend_ep)
    out: dict[str, list[tuple[str, torch.Tensor]]] = {}
    for name, global_name in bridge._weight_name_mapping_mcore_local_to_global(model, consider_ep=False).items():
        grouped = GROUPED_EXPERTS.match(global_name)
        if grouped is None or name not in params:
            continue
        param, fc = params[name], grouped["fc"]
        if param.numel() != local * hidden * ffn * (2 if fc == "1" else 1):
            raise BlockTraceError(f"{name}: {tuple(param.shape)} is not {local} whole experts of hidden {hidden} and "
                                  f"ffn {ffn} (grouped experts split over expert TP are not read)")
        te = f"{grouped['layer']}.mlp.experts.linear_fc{fc}.weight"
        views: list[tuple[str, torch.Tensor]] = []
        if fc == "1":
            experts = param.view(local, hidden, 2 * ffn)
            for i in range(local):
                gate, up = bridge._weight_name_mapping_mcore_to_hf(f"{te}{first + i}")
                views += [(gate, experts[i, :, :ffn].t()), (up, experts[i, :, ffn:].t())]
        else:
            experts = param.view(local, ffn, hidden)
            for i in range(local):
                (down,) = bridge._weight_name_mapping_mcore_to_hf(f"{te}{first + i}")
                views.append((down, experts[i].t()))
        out[name] = views
    return out


def grouped_expert_shards(views: dict[str, list[tuple[str, torch.Tensor]]]) -> dict[str, dict[Block, torch.Tensor]]:
    """The whole per-expert HF tensors the grouped-MLP parameters hold, cut from them: {HF name: {block: tensor}}."""
    return {hf: {tuple((0, n) for n in view.shape): view.detach().contiguous()}
            for pairs in views.values() for hf, view in pairs}


def local_part(bridge: Any, name: str, hf: list[torch.Tensor], param: torch.Tensor) -> torch.Tensor:
    """mbridge's conversion of the HF tensors `hf` into this rank's part of Megatron parameter `name`
    (experts are split over the expert-TP group, everything else over the TP group)."""
    te = mbridge_name(bridge, name)
    merged = bridge._weight_to_mcore_format(te, hf)
    mpu = bridge.mpu
    size, rank = (mpu.etp_size, mpu.etp_rank) if ".mlp.experts.linear_fc" in te else (mpu.tp_size, mpu.tp_rank)
    return bridge._weight_split_across_tp(te, merged, param, size)[rank]


def trace_hf_blocks(bridge: Any, params: dict[str, torch.Tensor], sources: dict[str, list[str]],
                    shapes: dict[str, tuple[int, ...]]) -> dict[str, list[HfSlice]]:
    """Local parameter -> the HF blocks it holds (padding rows hold none)."""
    import torch

    out: dict[str, list[HfSlice]] = {}
    with _float64(bridge):
        for name, param in params.items():
            hf = sources[name]
            unknown = [n for n in hf if n not in shapes]
            if unknown:
                raise BlockTraceError(f"{name}: {unknown[0]} is not a tensor of the plan's model")
            bases, codes, base = [], [], 0
            for n in hf:
                numel = int(torch.Size(shapes[n]).numel())
                codes.append(torch.arange(base + 1, base + numel + 1, dtype=torch.float64).view(shapes[n]))
                bases.append(base)
                base += numel
            local = local_part(bridge, name, codes, param).to(torch.float64)
            found = (_slice(name, n, shapes[n], local, b) for n, b in zip(hf, bases, strict=True))
            out[name] = [s for s in found if s is not None]
    return out


def cut_hf_shards(params: dict[str, torch.Tensor], blocks: dict[str, list[HfSlice]],
                  ) -> dict[str, dict[Block, torch.Tensor]]:
    """This rank's HF blocks cut from its live parameters: {HF name: {block: tensor}}."""
    out: dict[str, dict[Block, torch.Tensor]] = {}
    for name, slices in blocks.items():
        data = params[name].detach()
        for s in slices:
            shape = tuple(b - a for a, b in s.block)
            out.setdefault(s.name, {})[s.block] = data[s.mask.to(data.device)].view(shape).contiguous()
    return out


@contextlib.contextmanager
def _float64(bridge: Any) -> Iterator[None]:
    """mbridge casts HF tensors to its dtype before merging; float64 keeps element codes exact."""
    import torch

    dtype, bridge.dtype = bridge.dtype, torch.float64
    try:
        yield
    finally:
        bridge.dtype = dtype


def _slice(param: str, hf: str, shape: tuple[int, ...], local: torch.Tensor, base: int) -> HfSlice | None:
    """The block of HF tensor `hf` whose codes sit in `local`; None when it holds none of them."""
    import math

    import torch

    numel = math.prod(shape)
    mask = (local > base) & (local <= base + numel)
    flat = (local[mask] - base - 1).to(torch.int64)
    if flat.numel() == 0:
        return None
    index = torch.stack(torch.unravel_index(flat, shape))
    block = tuple((int(lo), int(hi) + 1) for lo, hi in zip(index.min(dim=1).values, index.max(dim=1).values,
                                                          strict=True))
    if math.prod(b - a for a, b in block) != flat.numel() or not bool((flat[1:] > flat[:-1]).all()):
        raise BlockTraceError(f"{param}: the part of {hf} it holds is not one block in row-major order")
    return HfSlice(hf, block, mask)
