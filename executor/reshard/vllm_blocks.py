"""The HF tensor blocks a vLLM module holds on its TP rank, read from the module's own partition attributes,
and a loader that writes received blocks straight into those places.

`module_blocks` maps one module to {HF name: (block, the local tensor view of it)}: QKV (heads per partition,
kv-head replicas), merged linears (their output sizes: gate/up, and DeepSeek's `fused_qkv_a_proj`, q_a_proj rows
then kv_a_proj_with_mqa rows, replicated), column and row parallel linears (their partition sizes, which a layer
built with `disable_tp` reports as one partition), vocabulary embeddings and the head (shard indices), routed
experts (FusedMoE's RoutedExperts: the local experts its expert map names, as blocks of the twin's fused expert
tensors, whole experts only: expert parallelism, or TP1), and any other parameter whole when its shape is the HF
tensor's of the same name (norms, replicated linears such as DeepSeek's router `gate.weight`, and its
`gate.e_score_correction_bias`, which vLLM keeps in float32 whatever the checkpoint's dtype).
The module's class is matched on its class hierarchy, so vLLM's subclasses (DeepSeek's
`DeepSeekV2FusedQkvAProjLinear`, a MergedColumnParallelLinear) are read by their parent's rule.

`derived_weights` names the parameters vLLM computes from loaded weights after loading, which no checkpoint
holds: MLA's `W_UK_T` and `W_UV` (vllm/model_executor/layers/attention/mla_attention.py,
MLAAttention.process_weights_after_loading and split_kv_b_proj), the key and value up-projections cut out of the
rank's `kv_b_proj` rows, each with the function that computes it from that block.
`load_blocks` copies (HF name, block, tensor) triples into those views: what a TP > 1 rollout rank needs to
take the directed reshard's blocks, where vLLM's `load_weights` expects whole tensors and cuts them itself.
Other modules hold nothing here.

In verl's weight sync a block travels as a named tensor whose name carries the block (`block_name`); the
patch `block_aware_update_weights` of verl's vLLM worker extension (vLLMColocateWorkerExtension._update_weights,
verl/workers/rollout/vllm_rollout/utils.py) loads those with `load_blocks` and hands the rest to verl, which
then runs vLLM's `process_weights_after_loading` over the model once all buckets arrived (its
update_weights_from_ipc), recomputing the derived weights from the synced ones.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

logger = logging.getLogger(__name__)
SPLIT = {"qkv_proj": ("q_proj", "k_proj", "v_proj"), "gate_up_proj": ("gate_proj", "up_proj"),
         "fused_qkv_a_proj": ("q_a_proj", "kv_a_proj_with_mqa")}
"""A fused vLLM linear's last name -> the HF projections it stacks, in vLLM's order (its stacked_params_mapping)."""
KINDS = ("RoutedExperts", "QKVParallelLinear", "MergedColumnParallelLinear", "ColumnParallelLinear",
         "RowParallelLinear", "ParallelLMHead", "VocabParallelEmbedding")
"""The vLLM classes read by their partition attributes, most specific first; a module is read by the first one in
its class hierarchy."""
TAG = "#block="  # never part of a checkpoint name

Held = dict[str, tuple[list[list[int]], Any]]


class BlockLoadError(Exception):
    """A received block is not one this rank's vLLM modules hold; the message names it."""


def _whole(shape: tuple[int, ...]) -> list[list[int]]:
    return [[0, n] for n in shape]


def _kind(module: Any) -> str | None:
    names = {c.__name__ for c in type(module).__mro__}
    return next((k for k in KINDS if k in names), None)


def module_blocks(name: str, module: Any, shapes: dict[str, tuple[int, ...]]) -> Held:
    """HF name -> (block, this rank's local tensor of it) for one vLLM module; {} when it holds no weight."""
    kind = _kind(module)
    if kind == "RoutedExperts":
        return _experts(name, module)
    weight = getattr(module, "weight", None)
    if kind is None or weight is None or not hasattr(weight, "shape"):
        return _whole_parameters(name, module, shapes)
    out: Held = {}
    if kind == "QKVParallelLinear":
        rank, kv_rank = module.tp_rank, module.tp_rank // module.num_kv_head_replicas
        q, k, v = (module.num_heads * module.head_size, module.num_kv_heads * module.head_size,
                   module.num_kv_heads * module.v_head_size)
        rows = {"q_proj": (rank * q, q), "k_proj": (kv_rank * k, k), "v_proj": (kv_rank * v, v)}
        _fused(name, "qkv_proj", module, rows, out)
    elif kind == "MergedColumnParallelLinear":
        fused = name.rpartition(".")[2]
        if fused not in SPLIT or len(SPLIT[fused]) != len(module.output_sizes):
            return {}
        size = [s // module.tp_size for s in module.output_sizes]
        rows = {part: (module.tp_rank * size[i], size[i]) for i, part in enumerate(SPLIT[fused])}
        _fused(name, fused, module, rows, out)
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
    else:  # the vocabulary
        idx = module.shard_indices
        n = idx.org_vocab_end_index - idx.org_vocab_start_index
        out[f"{name}.weight"] = ([[idx.org_vocab_start_index, idx.org_vocab_end_index], [0, weight.shape[1]]],
                                 weight[:n])
    return out


def _whole_parameters(name: str, module: Any, shapes: dict[str, tuple[int, ...]]) -> Held:
    """The module's own parameters whose shapes are those of the HF tensors of the same names: held whole."""
    return {f"{name}.{attr}": (_whole(tuple(p.shape)), p) for attr, p in module.named_parameters(recurse=False)
            if tuple(shapes.get(f"{name}.{attr}", ())) == tuple(p.shape)}


def derived_weights(module: Any, kv_b_proj_name: str | None) -> dict[str, tuple[str, Callable[[Any], Any]]]:
    """Parameters of `module` that vLLM computes after loading from a loaded weight: attribute -> (HF name of that
    weight, the function of this rank's block of it that gives the parameter). MLA (MLAAttention with its derived
    weights): kv_b_proj's rank rows [N x (P + V), L], transposed and viewed as [L, N, P + V], split into W_UK
    [L, N, P] and W_UV [L, N, V]; vLLM keeps W_UK_T = W_UK as [N, P, L] and W_UV as [N, L, V]. `kv_b_proj_name`:
    the vLLM name of the module's kv_b_proj (None: not found). {} for any other module."""
    if kv_b_proj_name is None or not all(hasattr(module, a) for a in ("W_UK_T", "W_UV", "kv_b_proj")):
        return {}
    heads, nope, v, rank = module.num_heads, module.qk_nope_head_dim, module.v_head_dim, module.kv_lora_rank

    def split(w: Any) -> Any:
        return w.t().reshape(rank, heads, nope + v)

    source = f"{kv_b_proj_name}.weight"
    return {"W_UK_T": (source, lambda w: split(w)[..., :nope].permute(1, 2, 0).contiguous()),
            "W_UV": (source, lambda w: split(w)[..., nope:].transpose(0, 1).contiguous())}


def _experts(name: str, module: Any) -> Held:
    """A RoutedExperts module's w13 (gate rows then up rows) and w2 as blocks of the fused expert tensors
    `...mlp.experts.gate_up_proj` and `...down_proj`: its local experts, from its expert map (global id ->
    local id, -1 elsewhere; none: every expert), must be consecutive global ids in local order, and each
    expert whole (expert TP1). {} otherwise: the probe then lists the module as unknown."""
    import torch

    w13, w2 = module.w13_weight, module.w2_weight
    inter = module.intermediate_size_per_partition
    if module.moe_config.moe_parallel_config.tp_size != 1 or w13.shape[1] != 2 * inter or w2.shape[2] != inter:
        return {}
    emap = module.expert_map
    first = 0
    if emap is not None:
        local = torch.nonzero(emap >= 0).flatten()
        first = int(local[0]) if local.numel() else 0
        if local.numel() != w13.shape[0] or not torch.equal(
                emap[local].long(), torch.arange(w13.shape[0])) or not torch.equal(
                local, torch.arange(first, first + w13.shape[0])):
            return {}
    experts = [first, first + w13.shape[0]]
    base = name.removesuffix(".routed_experts")
    return {f"{base}.gate_up_proj": ([experts, *_whole(tuple(w13.shape[1:]))], w13),
            f"{base}.down_proj": ([experts, *_whole(tuple(w2.shape[1:]))], w2)}


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


def model_blocks(model: Any, shapes: dict[str, tuple[int, ...]]) -> Held:
    """Every HF block this rank's vLLM model holds: {HF name: (block, local view)}."""
    out: Held = {}
    for name, module in model.named_modules():
        if name and list(module.parameters(recurse=False)):
            out.update(module_blocks(name, module, shapes))
    return out


def load_blocks(model: Any, shapes: dict[str, tuple[int, ...]],
                blocks: Iterable[tuple[str, tuple[tuple[int, int], ...], torch.Tensor]]) -> int:
    """Copy each (HF name, block, tensor) into the place this rank's module keeps it; returns the count loaded."""
    import torch

    held = model_blocks(model, shapes)
    loaded = 0
    with torch.no_grad():
        for name, block, tensor in blocks:
            place = held.get(name)
            if place is None or [list(r) for r in block] != place[0]:
                raise BlockLoadError(f"{name} block {block}: this rank's vLLM modules hold "
                                     f"{place[0] if place else 'none of it'}")
            place[1].copy_(tensor.view(place[1].shape))
            loaded += 1
    return loaded


def block_name(name: str, block: tuple[tuple[int, int], ...]) -> str:
    """A named tensor's name that carries its block: `name#block=0:64,0:128`."""
    return name + TAG + ",".join(f"{a}:{b}" for a, b in block)


def parse_block_name(name: str) -> tuple[str, tuple[tuple[int, int], ...]] | None:
    """(HF name, block) of a `block_name`; None for a plain name."""
    if TAG not in name:
        return None
    hf, _, spec = name.partition(TAG)
    return hf, tuple((int(a), int(b)) for a, b in (r.split(":") for r in spec.split(",")))


def block_aware_update_weights(original: Callable) -> Callable:
    """Patch factory for verl's vLLMColocateWorkerExtension._update_weights: blocks named by `block_name` go
    into this rank's modules with `load_blocks`; whole tensors go to verl (vLLM's load_weights) as before."""

    def _update_weights(self: Any, weights: list, peft_config: Any = None, base_sync_done: bool = False) -> Any:
        blocks, whole = [], []
        for name, tensor in weights:
            parsed = parse_block_name(name)
            if parsed is None:
                whole.append((name, tensor))
            else:
                blocks.append((*parsed, tensor))
        if blocks:
            count = load_blocks(self.model_runner.model, {}, blocks)
            logger.info("directed reshard: %d TP-split blocks written into this rank's vLLM modules", count)
        return original(self, whole, peft_config=peft_config, base_sync_done=base_sync_done) if whole else None

    return _update_weights
