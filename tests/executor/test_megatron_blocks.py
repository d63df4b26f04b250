"""mbridge's spelling of Megatron's local-spec parameter names (executor/reshard/megatron_blocks.py te_name)."""

from __future__ import annotations

import pytest

from executor.reshard.megatron_blocks import te_name

LAYER = "decoder.layers.3."


@pytest.mark.parametrize(("local", "mla", "fused", "want"), [
    # GQA: both norms fused into the next linear in dense models, the pre-MLP one a module in MoE models
    ("input_layernorm.weight", False, True, "self_attention.linear_qkv.layer_norm_weight"),
    ("pre_mlp_layernorm.weight", False, True, "mlp.linear_fc1.layer_norm_weight"),
    ("pre_mlp_layernorm.weight", False, False, "pre_mlp_layernorm.weight"),
    ("self_attention.q_layernorm.weight", False, True, "self_attention.q_layernorm.weight"),  # Qwen3's own module
    # MLA (DeepSeek-V3's bridge): input and pre-MLP norms are modules; the latent norms fused into the up projections
    ("input_layernorm.weight", True, False, "input_layernorm.weight"),
    ("pre_mlp_layernorm.weight", True, False, "pre_mlp_layernorm.weight"),
    ("self_attention.q_layernorm.weight", True, False, "self_attention.linear_q_up_proj.layer_norm_weight"),
    ("self_attention.kv_layernorm.weight", True, False, "self_attention.linear_kv_up_proj.layer_norm_weight"),
    ("self_attention.linear_q_down_proj.weight", True, False, "self_attention.linear_q_down_proj.weight"),
])
def test_norm_names(local: str, mla: bool, fused: bool, want: str) -> None:
    assert te_name(LAYER + local, fused_pre_mlp_norm=fused, mla=mla) == LAYER + want


def test_a_local_expert_takes_its_global_index_and_a_translated_name_stays_as_it_is() -> None:
    local = LAYER + "mlp.experts.local_experts.1.linear_fc2.weight"
    once = te_name(local, first_expert=128, fused_pre_mlp_norm=False, mla=True)
    assert once == LAYER + "mlp.experts.linear_fc2.weight129"
    # DeepSeek-V3's bridge overrides call the base bridge's methods: both are translated, so twice must be once
    for name in (local, LAYER + "self_attention.kv_layernorm.weight", LAYER + "input_layernorm.weight"):
        for mla in (False, True):
            first = te_name(name, 128, fused_pre_mlp_norm=not mla, mla=mla)
            assert te_name(first, 128, fused_pre_mlp_norm=not mla, mla=mla) == first
