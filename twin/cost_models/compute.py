"""FLOPs of the model's forward pass per token, from the tensor inventory.

Matrix multiplies cost 2 FLOPs per weight per token; a token passes through every weight except the
input embedding, the router's unchosen experts and (in MLA) nothing else; attention adds the score and
value products over the context. Backward costs twice the forward; full recompute adds one forward.
"""

from __future__ import annotations

from dataclasses import dataclass

from twin.catalog.config import ModelConfig
from twin.catalog.inventory import Inventory


@dataclass(frozen=True)
class FlopCounts:
    """Per-token forward FLOPs, split by where they run."""

    dense_matmul: float  # attention projections, dense MLPs, shared experts, router, head
    expert_matmul: float  # routed experts (top-k of them)
    attention_per_ctx: float  # score + value FLOPs per token per context token (causal mean applied by callers)
    head: float  # output projection (vocabulary)

    def forward(self, context: float) -> float:
        """Forward FLOPs of one token attending over `context` tokens."""
        return self.dense_matmul + self.expert_matmul + self.head + self.attention_per_ctx * context


def flop_counts(inv: Inventory) -> FlopCounts:
    """Per-token forward FLOPs of `inv` (MTP layers excluded)."""
    cfg = inv.config
    dense = expert = head = 0.0
    for t in inv.main():
        if t.group == "embedding" or len(t.shape) < 2:
            continue
        if t.group == "experts" and cfg.moe is not None:
            expert += 2 * t.numel / cfg.moe.num_experts * cfg.moe.experts_per_token
        elif t.group == "head":
            head += 2 * t.numel
        else:
            dense += 2 * t.numel
    return FlopCounts(dense_matmul=dense, expert_matmul=expert, attention_per_ctx=attention_flops_per_ctx(cfg),
                      head=head)


def attention_flops_per_ctx(cfg: ModelConfig) -> float:
    """Score and value FLOPs per query token per key token, over all layers."""
    if cfg.mla is not None:
        qk, v = cfg.mla.qk_head_dim, cfg.mla.v_head_dim
    else:
        qk = v = cfg.head_dim
    return 2 * cfg.num_attention_heads * (qk + v) * cfg.num_layers
