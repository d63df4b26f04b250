"""Attention FLOPs: score and value products over the context (matrix-multiply FLOPs come from the tensor
table, twin.cost_models.static)."""

from __future__ import annotations

from twin.catalog.config import ModelConfig


def attention_flops_per_ctx(cfg: ModelConfig) -> float:
    """Score and value FLOPs per query token per key token, over all layers."""
    if cfg.mla is not None:
        qk, v = cfg.mla.qk_head_dim, cfg.mla.v_head_dim
    else:
        qk = v = cfg.head_dim
    return 2 * cfg.num_attention_heads * (qk + v) * cfg.num_layers
