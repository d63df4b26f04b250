"""The operators one decoder layer runs, costed on the device: GEMMs by shape, routed experts as grouped
GEMMs by the tokens each expert receives, attention by sequence length, and the memory-bound kernels
(norms, rotary, residual adds, the gated activation; a MoE layer's token permutations in training).

Shapes come from the tensor inventory (via the vectorised table); efficiencies from
`twin.cost_models.efficiency`. Every function takes scalars or numpy arrays of tokens.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np
from numpy.typing import ArrayLike

from twin.catalog.config import ModelConfig
from twin.catalog.inventory import Inventory
from twin.cost_models.efficiency import efficiency, memory_seconds, peak_flops
from twin.cost_models.placement import TRAIN_VOCAB_MULTIPLE
from twin.cost_models.static import tensor_table
from twin.profile import Profile
from twin.topology.clusters import ClusterKind

BF16 = 2


def attention_flops_per_ctx_layer(cfg: ModelConfig) -> float:
    """Score and value FLOPs per query token per key token in one layer, heads decompressed (training,
    prefill; MLA's keys and values expanded to full heads as Megatron and vLLM's prefill run it)."""
    if cfg.mla is not None:
        qk, v = cfg.mla.qk_head_dim, cfg.mla.v_head_dim
    else:
        qk = v = cfg.head_dim
    return 2.0 * cfg.num_attention_heads * (qk + v)


def decode_attention_flops_per_ctx_layer(cfg: ModelConfig) -> float:
    """Per query token per cached token in one layer during decode. MLA as DeepSeek decodes it: the up
    projections are absorbed, so scores run over the latent (kv_lora_rank + rope dims) and values over the
    latent too (the MQA form of the DeepSeek-V2/V3 reports); other attention as in training."""
    if cfg.mla is not None:
        m = cfg.mla
        return 2.0 * cfg.num_attention_heads * ((m.kv_lora_rank + m.qk_rope_head_dim) + m.kv_lora_rank)
    return attention_flops_per_ctx_layer(cfg)


def causal_attention_flops(cfg: ModelConfig, tokens_sq: ArrayLike) -> ArrayLike:
    """One layer's causal attention FLOPs for sequences whose lengths square-sum to `tokens_sq` (each
    query attends to itself and the tokens before it: L^2 / 2 pairs per sequence of length L)."""
    return attention_flops_per_ctx_layer(cfg) * np.asarray(tokens_sq, dtype=float) / 2


@dataclass(frozen=True)
class LayerShapes:
    """Per-device weight elements of one layer's non-expert GEMMs (after TP), and one routed expert's
    elements (all its projections, after expert TP)."""

    dense_gemms: np.ndarray
    expert_numel: float
    moe: bool


class LayerOperators:
    """One model's layers under a TP degree (and expert TP), costed on one device kind."""

    def __init__(self, inv: Inventory, kind: ClusterKind, profile: Profile, tp: int, expert_tp: int) -> None:
        self.inv, self.kind, self.pf, self.tp, self.etp = inv, kind, profile, tp, expert_tp
        self.cfg = inv.config
        self.peak = peak_flops(kind)

    @cached_property
    def _table_numel(self) -> tuple[np.ndarray, np.ndarray]:
        table = tensor_table(self.inv)
        dense = table._split_numel(self.tp, TRAIN_VOCAB_MULTIPLE, ~table.expert)
        expert = table._split_numel(self.etp, 1, table.expert)
        return dense, expert

    def layer(self, index: int) -> LayerShapes:
        """The GEMM shapes of decoder layer `index`."""
        table = tensor_table(self.inv)
        dense, expert = self._table_numel
        in_layer = (table.layer == index) & table.matrix
        gemms = dense[in_layer & ~table.expert]
        sel = in_layer & table.expert
        expert_numel = float((expert[sel] / table.experts[sel]).sum()) if sel.any() else 0.0
        return LayerShapes(gemms, expert_numel, bool(sel.any()))

    @cached_property
    def head_gemm(self) -> np.ndarray:
        """The output projection (logits) per device, TP-split by vocabulary."""
        table = tensor_table(self.inv)
        dense, _ = self._table_numel
        return dense[table.head & table.matrix]

    def gemm_seconds(self, tokens: ArrayLike, weights: np.ndarray) -> ArrayLike:
        """GEMMs of `tokens` rows against weight matrices of `weights` elements each (2*m*n*k FLOPs apiece)."""
        t = np.asarray(tokens, dtype=float)
        if weights.size == 0:
            return np.zeros_like(t) if t.ndim else 0.0
        flops = 2.0 * t[..., None] * weights.astype(float)
        eff = efficiency(self.kind, self.pf, "gemm", np.maximum(flops, 1.0))
        return (flops / (self.peak * eff)).sum(axis=-1)

    def grouped_gemm_seconds(self, pairs: ArrayLike, expert_numel: float, local_experts: float) -> ArrayLike:
        """The routed experts of one device: `pairs` token-expert pairs through experts of `expert_numel`
        elements, `local_experts` of them (the tokens each receives set the efficiency)."""
        pairs = np.asarray(pairs, dtype=float)
        flops = 2.0 * pairs * expert_numel
        eff = efficiency(self.kind, self.pf, "grouped_gemm", np.maximum(pairs / max(local_experts, 1.0), 1.0))
        return flops / (self.peak * eff)

    def attention_seconds(self, flops: ArrayLike, seq_len: ArrayLike) -> ArrayLike:
        """Attention FLOPs of sequences of (token-weighted mean) length `seq_len`."""
        eff = efficiency(self.kind, self.pf, "attention", np.maximum(np.asarray(seq_len, dtype=float), 1.0))
        return np.asarray(flops, dtype=float) / (self.peak * eff)

    def elementwise_kernels(self, moe: bool, sp: int) -> np.ndarray:
        """Bytes one token moves through each of one layer's memory-bound kernels on a device: two RMSNorms
        (read and write the hidden state), two residual adds (two reads, one write), rotary on queries and
        keys (read and write), and the gated activation (read gate and up, write the product)."""
        cfg = self.cfg
        h = cfg.hidden_size / sp
        if cfg.mla is not None:
            rot = cfg.num_attention_heads * cfg.mla.qk_rope_head_dim / self.tp + cfg.mla.qk_rope_head_dim
        else:
            rot = (cfg.num_attention_heads + cfg.num_kv_heads) * cfg.head_dim / self.tp
        if moe and cfg.moe is not None:
            ffn = (cfg.moe.experts_per_token + cfg.moe.shared_experts) * cfg.moe.expert_intermediate_size / self.tp
        else:
            ffn = cfg.intermediate_size / self.tp
        return BF16 * np.array([2 * h, 2 * h, 3 * h, 3 * h, 2 * rot, 3 * ffn])

    def elementwise_seconds(self, tokens: ArrayLike, moe: bool, sp: int) -> ArrayLike:
        t = np.asarray(tokens, dtype=float)
        per_kernel = t[..., None] * self.elementwise_kernels(moe, sp)
        return memory_seconds(self.kind, self.pf, per_kernel).sum(axis=-1)

    def token_permutation_kernels(self, sent: ArrayLike, received: ArrayLike, sorted_by_expert: bool) -> np.ndarray:
        """Bytes each of a MoE layer's token-permutation kernels moves on a device in a forward, as Megatron-core's
        token dispatcher runs them (transformer/moe/token_dispatcher.py, MoEAlltoAllTokenDispatcher; moe_utils.py
        permute / unpermute / sort_chunks_by_idxs): `sent` token-expert pairs of this device's own tokens, `received`
        pairs its experts compute.
        - permute: every pair's token row gathered into expert order (a row read and one written per pair);
        - sort_chunks_by_idxs after the dispatch and its inverse before the combine, where the all-to-all hands a
          rank several local experts' tokens (`sorted_by_expert`): a row read and one written per received pair,
          each way;
        - unpermute: every pair's row read, weighted by its routing probability and summed into its token's row
          (one row written per token: `sent` / top-k).
        A row is the hidden state in bf16. verl's FSDP engine runs the Hugging Face MoE block, whose gather of each
        expert's tokens and weighted index_add back are the permute and the unpermute without the sorts."""
        cfg = self.cfg
        row = BF16 * cfg.hidden_size
        sent = np.asarray(sent, dtype=float)
        received = np.asarray(received, dtype=float)
        tokens = sent / cfg.moe.experts_per_token
        sorts = 2 * received if sorted_by_expert else np.zeros_like(received)
        return row * np.stack(np.broadcast_arrays(2 * sent, sorts, sorts, sent + tokens), axis=-1)

    def token_permutation_seconds(self, sent: ArrayLike, received: ArrayLike, sorted_by_expert: bool) -> ArrayLike:
        """Seconds of `token_permutation_kernels` (memory-bound)."""
        kernels = self.token_permutation_kernels(sent, received, sorted_by_expert)
        return memory_seconds(self.kind, self.pf, kernels).sum(axis=-1)
