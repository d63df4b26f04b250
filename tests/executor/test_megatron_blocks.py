"""mbridge's spelling of Megatron's local-spec parameter names (executor/reshard/megatron_blocks.py te_name), and the
expert numbering of grouped-MLP experts (Megatron's and MindSpeed's moe_tp_extend_ep)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from executor.reshard.megatron_blocks import first_local_expert, te_name

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


def test_the_first_local_expert_by_megatrons_and_by_mindspeeds_numbering() -> None:
    # 64 experts; Megatron EP4: 16 per EP rank; MindSpeed moe_tp_extend_ep at TP2 EP4: 8 per rank, EP rank 3's TP rank 1
    # holds experts 56-63 (offset 3 x 8 x 2 + 1 x 8)
    mpu = SimpleNamespace(ep_rank=3, ep_size=4, tp_rank=1, tp_size=2)
    assert first_local_expert(mpu, 16, tp_extend_ep=False) == 48
    assert first_local_expert(mpu, 8, tp_extend_ep=True) == 56


@pytest.mark.parametrize(("tp", "ep", "dp", "pp"), [(2, 1, 1, 2), (2, 2, 2, 1), (4, 2, 2, 2), (2, 4, 4, 1)])
def test_mindspeeds_tp_extend_ep_placement_equals_megatrons_expert_grid_of_expert_tp1(tp, ep, dp, pp) -> None:
    """check-reshard builds MindSpeed's moe_tp_extend_ep (whole experts over TP x EP) as megatron-core's expert grid
    of expert TP 1 over EP = TP x EP: per rank, MindSpeed's first expert (its EP rank, taken from megatron-core's grid
    of expert TP = TP, times TP, plus its TP rank) is megatron-core's folded EP rank, both from megatron-core's own rank
    generator in its default order."""
    parallel_state = pytest.importorskip("megatron.core.parallel_state")

    def position(tp_: int, ep_: int, dp_: int, token: str) -> dict[int, int]:
        gen = parallel_state.RankGenerator(tp=tp_, ep=ep_, dp=dp_, pp=pp, cp=1, order="tp-cp-ep-dp-pp")
        return {r: i for group in gen.get_ranks(token) for i, r in enumerate(group)}

    tp_rank = position(tp, 1, dp, "tp")
    mindspeed_ep = position(tp, ep, dp // ep, "ep")  # expert TP = TP, EP inside the data-parallel ranks
    folded_ep = position(1, tp * ep, dp // ep, "ep")  # expert TP 1 over TP x EP
    local = 2
    for rank in range(tp * dp * pp):
        mpu = SimpleNamespace(ep_rank=mindspeed_ep[rank], tp_rank=tp_rank[rank], tp_size=tp)
        assert first_local_expert(mpu, local, tp_extend_ep=True) == folded_ep[rank] * local
