"""Multi-latent attention (DeepSeek-V3) in megatron-core 0.16.1's local layer spec, as its Transformer Engine spec
places the weights, so that a CPU model holds what a training rank on the target holds.

Two modules of the local MLA spec (megatron/core/models/gpt/gpt_layer_specs.py `get_gpt_layer_local_spec`) differ
from the Transformer Engine spec that real runs use:
- the down projections (`linear_q_down_proj`, `linear_kv_down_proj`) are ColumnParallelLinear, split over TP,
  where Transformer Engine's spec builds them duplicated on every TP rank (TELinear, `parallel_mode="duplicated"`,
  megatron/core/transformer/multi_latent_attention.py `MLASelfAttention.__init__`). Here they become megatron-core's
  plain `Linear` (megatron/core/post_training/modelopt/layers.py), the other class that constructor accepts as
  unsplit (the patch `megatron_cpu_mla`, executor/cpu/megatron_compat.py, lets it run without Transformer
  Engine);
- the core attention is megatron-core's local `DotProductAttention`, which takes no `k_channels`/`v_channels`
  (MLA's query/key head dim, nope + rope, is not its value head dim): `mla_core_attention()` is that same module
  with the context sized by the value head dim.
"""

from __future__ import annotations

import functools
from typing import Any

DOWN_PROJECTIONS = ("linear_q_down_proj", "linear_kv_down_proj")


@functools.cache
def mla_core_attention() -> type:
    """Megatron's local DotProductAttention whose context has the value head dim (`v_channels`)."""
    from megatron.core.transformer.dot_product_attention import DotProductAttention

    class MlaDotProductAttention(DotProductAttention):
        """Unfused causal attention with query/key head dim `k_channels` and value head dim `v_channels`."""

        def __init__(self, *args: Any, k_channels: int | None = None, v_channels: int | None = None,
                     **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            if v_channels is not None:
                self.hidden_size_per_partition = v_channels * self.num_attention_heads_per_partition

    return MlaDotProductAttention


def adapt_block_spec(block_spec: Any) -> Any:
    """The local block spec with each MLA layer's down projections duplicated (megatron-core's plain Linear: every
    TP rank holds the whole weight) and its core attention MLA's."""
    from megatron.core.post_training.modelopt.layers import Linear
    from megatron.core.transformer.multi_latent_attention import MLASelfAttention

    for layer in getattr(block_spec, "layer_specs", []):
        attention = layer.submodules.self_attention
        if attention.module is MLASelfAttention:
            for name in DOWN_PROJECTIONS:
                setattr(attention.submodules, name, Linear)
            attention.submodules.core_attention = mla_core_attention()
    return block_spec


def cpu_block_spec(config: Any, **kwargs: Any) -> Any:
    """megatron-core's local decoder block spec for `config`, MLA layers adapted."""
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_decoder_block_spec

    return adapt_block_spec(get_gpt_decoder_block_spec(config, use_transformer_engine=False, **kwargs))
