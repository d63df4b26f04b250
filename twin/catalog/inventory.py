"""The tensor inventory: every parameter tensor of a model, with how each parallel dimension shards it.

Names and shapes follow the transformers (v5) module state_dict: routed experts are stored fused, one
3-D tensor per layer and projection with the expert index on dimension 0. This inventory is the only
place in the project that knows tensor shapes; parameter counts, memory and reshard traffic all come
from it.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from functools import cached_property
from typing import Literal

from pydantic import BaseModel, ConfigDict

from twin.catalog.config import ModelConfig

Group = Literal["embedding", "attention", "mlp", "shared_expert", "experts", "router", "norm", "head"]
TpStyle = Literal["column", "row", "vocab"]
Block = tuple[tuple[int, int], ...]  # a (start, stop) per dimension of a tensor


class ShardRule(BaseModel):
    """How tensor parallelism and expert parallelism cut one tensor.

    `tp_dim` is split by the TP group (Megatron/vLLM column-, row- or vocab-parallel). It holds
    `tp_units` indivisible units (attention heads, KV heads, or single rows), repeated `tp_chunks`
    times when fused projections are split chunk by chunk (gate and up). When TP exceeds the units
    (vLLM with more ranks than KV heads) each rank keeps one unit: the units are replicated.
    `ep_dim` is the routed-expert axis, split by expert parallelism.
    """

    model_config = ConfigDict(frozen=True)

    tp_dim: int | None = None
    tp_style: TpStyle | None = None
    tp_units: int = 1
    tp_chunks: int = 1
    ep_dim: int | None = None

    @property
    def replicated(self) -> bool:
        return self.tp_dim is None and self.ep_dim is None

    def tp_units_per_rank(self, tp: int) -> int:
        """Units of `tp_dim` each rank of a `tp`-wide group holds (replicated when tp > units)."""
        if self.tp_dim is None or tp == 1:
            return self.tp_units
        if self.tp_units % tp == 0:
            return self.tp_units // tp
        if tp % self.tp_units == 0:
            return 1
        raise ValueError(f"{self.tp_units} units cannot be split over TP={tp}")


class TensorSpec(BaseModel):
    """One parameter tensor."""

    model_config = ConfigDict(frozen=True)

    name: str
    shape: tuple[int, ...]
    dtype: str
    dtype_bytes: int
    group: Group
    layer: int | None = None  # decoder layer; MTP layers follow the main ones; None outside layers
    mtp: bool = False
    shard: ShardRule = ShardRule()

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.numel * self.dtype_bytes

    @property
    def num_experts(self) -> int:
        return self.shape[self.shard.ep_dim] if self.shard.ep_dim is not None else 1

    def _tp_range(self, tp: int, tp_rank: int, vocab_multiple: int) -> tuple[int, int, int]:
        """(start, stop, allocated) of the rank's part of one fused chunk of `tp_dim`.

        `allocated` counts padding rows too: vLLM pads the vocabulary to a multiple of 64 before splitting it,
        so its last ranks may hold padding only (the training engines pad nothing: placement.TRAIN_VOCAB_MULTIPLE).
        """
        rule = self.shard
        assert rule.tp_dim is not None
        chunk = self.shape[rule.tp_dim] // rule.tp_chunks
        if rule.tp_style == "vocab":
            padded = -(-chunk // vocab_multiple) * vocab_multiple
            if padded % tp:
                raise ValueError(f"{self.name}: {padded} vocabulary rows (padding included) cannot be split over "
                                 f"TP={tp}")
            per = padded // tp
            start = min(tp_rank * per, chunk)
            return start, min(start + per, chunk) if tp_rank * per < chunk else start, per
        unit = chunk // rule.tp_units
        per_rank = rule.tp_units_per_rank(tp)
        first_unit = (tp_rank * rule.tp_units // tp) if tp > rule.tp_units else tp_rank * per_rank
        return first_unit * unit, (first_unit + per_rank) * unit, per_rank * unit

    def shard_bytes(self, tp: int = 1, ep: int = 1, vocab_multiple: int = 1) -> int:
        """Bytes one rank allocates for its shard (padding included) under `tp`-way TP and `ep`-way EP."""
        shape = list(self.shape)
        rule = self.shard
        if rule.tp_dim is not None and (tp > 1 or vocab_multiple > 1):
            shape[rule.tp_dim] = self._tp_range(tp, 0, vocab_multiple)[2] * rule.tp_chunks
        if rule.ep_dim is not None and ep > 1:
            if shape[rule.ep_dim] % ep:
                raise ValueError(f"{self.name}: {shape[rule.ep_dim]} experts cannot be split over EP={ep}")
            shape[rule.ep_dim] //= ep
        return math.prod(shape) * self.dtype_bytes

    def shard_blocks(self, tp: int = 1, tp_rank: int = 0, ep: int = 1, ep_rank: int = 0,
                     vocab_multiple: int = 1) -> list[Block]:
        """The blocks of the full tensor (a (start, stop) per dimension) that make up one rank's shard.

        A fused gate/up projection gives a rank one block per chunk; a vocabulary rank that holds only
        padding gets no block.
        """
        full = [(0, n) for n in self.shape]
        rule = self.shard
        if rule.ep_dim is not None and ep > 1:
            per = self.shape[rule.ep_dim] // ep
            full[rule.ep_dim] = (ep_rank * per, (ep_rank + 1) * per)
        if rule.tp_dim is None or (tp == 1 and vocab_multiple == 1):
            return [tuple(full)]
        start, stop, _ = self._tp_range(tp, tp_rank, vocab_multiple)
        if stop <= start:
            return []
        chunk = self.shape[rule.tp_dim] // rule.tp_chunks
        blocks = []
        for c in range(rule.tp_chunks):
            block = list(full)
            block[rule.tp_dim] = (c * chunk + start, c * chunk + stop)
            blocks.append(tuple(block))
        return blocks


def block_numel(block: Block) -> int:
    return math.prod(b - a for a, b in block)


def block_slices(block: Block) -> tuple[slice, ...]:
    """A block as an index into a tensor."""
    return tuple(slice(a, b) for a, b in block)


def block_is_contiguous(block: Block, shape: tuple[int, ...]) -> bool:
    """True when the block is one contiguous run of a row-major tensor of `shape`: every dimension after
    the last partial one is whole, and every dimension before it has extent one."""
    partial = [i for i, ((a, b), n) in enumerate(zip(block, shape, strict=True)) if (a, b) != (0, n)]
    if not partial:
        return True
    last = partial[-1]
    return all(block[i][1] - block[i][0] == 1 for i in range(last))


def block_intersection(a: Block, b: Block) -> Block | None:
    out = []
    for (a0, a1), (b0, b1) in zip(a, b, strict=True):
        lo, hi = max(a0, b0), min(a1, b1)
        if hi <= lo:
            return None
        out.append((lo, hi))
    return tuple(out)


class Inventory(BaseModel):
    """All parameter tensors of one model, in state_dict order."""

    model_config = ConfigDict(frozen=True)

    config: ModelConfig
    tensors: tuple[TensorSpec, ...]
    tied_head: bool = False  # lm_head shares the embedding's storage (state_dict holds both names)

    @cached_property
    def head_outputs(self) -> int:
        """Outputs per token of the output head: the vocabulary of an LM head, one of a critic's score head."""
        return next(t.shape[0] for t in self.tensors if t.group == "head" and len(t.shape) == 2)

    def __iter__(self) -> Iterator[TensorSpec]:  # type: ignore[override]
        return iter(self.tensors)

    def __len__(self) -> int:
        return len(self.tensors)

    @cached_property
    def by_name(self) -> dict[str, TensorSpec]:
        return {t.name: t for t in self.tensors}

    def main(self) -> Iterator[TensorSpec]:
        """Tensors of the main model (no MTP layers)."""
        return (t for t in self.tensors if not t.mtp)

    def unique(self, include_mtp: bool = False) -> Iterator[TensorSpec]:
        """Tensors that own storage: a tied lm_head is skipped."""
        for t in self.tensors:
            if t.mtp and not include_mtp:
                continue
            if self.tied_head and t.group == "head":
                continue
            yield t

    def total_params(self, include_mtp: bool = False) -> int:
        return sum(t.numel for t in self.unique(include_mtp))

    def mtp_params(self) -> int:
        return sum(t.numel for t in self.tensors if t.mtp)

    def active_params(self, include_embedding: bool = False) -> int:
        """Parameters a token passes through: top-k of the routed experts, output head counted."""
        moe = self.config.moe
        total = 0
        for t in self.tensors:
            if t.mtp:
                continue
            if t.group == "embedding":
                total += t.numel if include_embedding else 0
            elif t.group == "head" and self.tied_head:
                total += t.numel  # the head still runs on every token
            elif t.group == "experts" and moe is not None:
                total += t.numel // moe.num_experts * moe.experts_per_token
            else:
                total += t.numel
        return total



class _Builder:
    """Appends TensorSpecs in the order transformers registers the module's parameters."""

    def __init__(self, cfg: ModelConfig) -> None:
        self.cfg = cfg
        self.out: list[TensorSpec] = []

    def add(
        self,
        name: str,
        shape: tuple[int, ...],
        group: Group,
        layer: int | None = None,
        mtp: bool = False,
        **shard: object,
    ) -> None:
        self.out.append(
            TensorSpec(
                name=name,
                shape=shape,
                dtype=self.cfg.dtype,
                dtype_bytes=self.cfg.dtype_bytes,
                group=group,
                layer=layer,
                mtp=mtp,
                shard=ShardRule(**shard),
            )
        )

    def norm(self, name: str, size: int, layer: int | None, mtp: bool = False) -> None:
        self.add(name, (size,), "norm", layer, mtp)

    def column(self, name: str, rows: int, cols: int, units: int, group: Group, layer: int, mtp: bool,
               chunks: int = 1) -> None:
        self.add(name, (rows, cols), group, layer, mtp, tp_dim=0, tp_style="column", tp_units=units,
                 tp_chunks=chunks)

    def row(self, name: str, rows: int, cols: int, units: int, group: Group, layer: int, mtp: bool) -> None:
        self.add(name, (rows, cols), group, layer, mtp, tp_dim=1, tp_style="row", tp_units=units)

    def gqa_attention(self, p: str, layer: int, mtp: bool) -> None:
        c = self.cfg
        h, d, heads, kv = c.hidden_size, c.head_dim, c.num_attention_heads, c.num_kv_heads
        for proj, n_heads in (("q", heads), ("k", kv), ("v", kv)):
            self.column(f"{p}.self_attn.{proj}_proj.weight", n_heads * d, h, n_heads, "attention", layer, mtp)
            if c.qkv_bias:
                self.add(f"{p}.self_attn.{proj}_proj.bias", (n_heads * d,), "attention", layer, mtp,
                         tp_dim=0, tp_style="column", tp_units=n_heads)
        self.row(f"{p}.self_attn.o_proj.weight", h, heads * d, heads, "attention", layer, mtp)
        if c.qk_norm:
            self.norm(f"{p}.self_attn.q_norm.weight", d, layer, mtp)
            self.norm(f"{p}.self_attn.k_norm.weight", d, layer, mtp)

    def mla_attention(self, p: str, layer: int, mtp: bool) -> None:
        c = self.cfg
        m = c.mla
        assert m is not None
        h, heads = c.hidden_size, c.num_attention_heads
        a = f"{p}.self_attn"
        if m.q_lora_rank:
            self.add(f"{a}.q_a_proj.weight", (m.q_lora_rank, h), "attention", layer, mtp)
            self.norm(f"{a}.q_a_layernorm.weight", m.q_lora_rank, layer, mtp)
            self.column(f"{a}.q_b_proj.weight", heads * m.qk_head_dim, m.q_lora_rank, heads, "attention",
                        layer, mtp)
        else:
            self.column(f"{a}.q_proj.weight", heads * m.qk_head_dim, h, heads, "attention", layer, mtp)
        self.add(f"{a}.kv_a_proj_with_mqa.weight", (m.kv_lora_rank + m.qk_rope_head_dim, h), "attention",
                 layer, mtp)
        self.norm(f"{a}.kv_a_layernorm.weight", m.kv_lora_rank, layer, mtp)
        self.column(f"{a}.kv_b_proj.weight", heads * (m.qk_nope_head_dim + m.v_head_dim), m.kv_lora_rank,
                    heads, "attention", layer, mtp)
        self.row(f"{a}.o_proj.weight", h, heads * m.v_head_dim, heads, "attention", layer, mtp)

    def dense_mlp(self, p: str, inter: int, group: Group, layer: int, mtp: bool) -> None:
        h = self.cfg.hidden_size
        self.column(f"{p}.gate_proj.weight", inter, h, inter, group, layer, mtp)
        self.column(f"{p}.up_proj.weight", inter, h, inter, group, layer, mtp)
        self.row(f"{p}.down_proj.weight", h, inter, inter, group, layer, mtp)

    def moe_mlp(self, p: str, layer: int, mtp: bool) -> None:
        c = self.cfg
        moe = c.moe
        assert moe is not None
        h, e, inter = c.hidden_size, moe.num_experts, moe.expert_intermediate_size
        gate_up = (e, 2 * inter, h)
        self.add(f"{p}.mlp.experts.gate_up_proj", gate_up, "experts", layer, mtp, ep_dim=0, tp_dim=1,
                 tp_style="column", tp_units=inter, tp_chunks=2)
        self.add(f"{p}.mlp.experts.down_proj", (e, h, inter), "experts", layer, mtp, ep_dim=0, tp_dim=2,
                 tp_style="row", tp_units=inter)
        self.add(f"{p}.mlp.gate.weight", (e, h), "router", layer, mtp)
        if moe.router_bias:
            self.add(f"{p}.mlp.gate.e_score_correction_bias", (e,), "router", layer, mtp)
        if moe.shared_experts:
            self.dense_mlp(f"{p}.mlp.shared_experts", moe.shared_experts * inter, "shared_expert", layer, mtp)

    def decoder_layer(self, p: str, layer: int, mtp: bool) -> None:
        c = self.cfg
        if c.attention == "mla":
            self.mla_attention(p, layer, mtp)
        else:
            self.gqa_attention(p, layer, mtp)
        if c.is_moe_layer(layer):
            self.moe_mlp(p, layer, mtp)
        else:
            self.dense_mlp(f"{p}.mlp", c.intermediate_size, "mlp", layer, mtp)
        self.norm(f"{p}.input_layernorm.weight", c.hidden_size, layer, mtp)
        self.norm(f"{p}.post_attention_layernorm.weight", c.hidden_size, layer, mtp)

    def mtp_layer(self, layer: int) -> None:
        """DeepSeek's next-token-prediction module, as stored in the released checkpoint."""
        c = self.cfg
        h = c.hidden_size
        p = f"model.layers.{layer}"
        self.norm(f"{p}.enorm.weight", h, layer, True)
        self.norm(f"{p}.hnorm.weight", h, layer, True)
        self.add(f"{p}.eh_proj.weight", (h, 2 * h), "attention", layer, True)
        self.decoder_layer(p, layer, True)
        self.norm(f"{p}.shared_head.norm.weight", h, layer, True)

    def vocab(self, name: str, group: Group) -> None:
        c = self.cfg
        self.add(name, (c.vocab_size, c.hidden_size), group, None, False, tp_dim=0, tp_style="vocab",
                 tp_units=c.vocab_size)


def value_model(inv: Inventory) -> Inventory:
    """The critic verl trains for PPO from `inv`'s checkpoint: transformers' ...ForTokenClassification with one label
    (verl utils/model.py load_valuehead_model; the workers set num_labels 1), the same decoder with an embedding of
    its own, and a score head, nn.Linear(hidden, 1) with its bias, where the LM head was (replicated: TP leaves a
    one-row projection whole); no MTP layers."""
    cfg = inv.config
    score = [TensorSpec(name=name, shape=shape, dtype=cfg.dtype, dtype_bytes=cfg.dtype_bytes, group="head")
             for name, shape in (("score.weight", (1, cfg.hidden_size)), ("score.bias", (1,)))]
    body = [t for t in inv.tensors if t.group != "head" and not t.mtp]
    return Inventory(config=inv.config, tensors=(*body, *score), tied_head=False)


def build_inventory(cfg: ModelConfig, include_mtp: bool = True) -> Inventory:
    """Every parameter tensor of `cfg`; MTP layers (DeepSeek) are included but flagged `mtp`."""
    b = _Builder(cfg)
    b.vocab("model.embed_tokens.weight", "embedding")
    for layer in range(cfg.num_layers):
        b.decoder_layer(f"model.layers.{layer}", layer, False)
    b.norm("model.norm.weight", cfg.hidden_size, None)
    b.vocab("lm_head.weight", "head")
    if include_mtp:
        for i in range(cfg.mtp_layers):
            b.mtp_layer(cfg.num_layers + i)
    return Inventory(config=cfg, tensors=tuple(b.out), tied_head=cfg.tie_word_embeddings)
