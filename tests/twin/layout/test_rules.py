"""Validity rules: the recipes' layouts pass, broken ones fail with the rule named."""

import pytest

from twin.catalog.registry import catalog_names, load_config
from twin.errors import LayoutError
from twin.layout import Layout, RolloutLayout, TrainLayout, check_layout, check_train, validate_layout
from twin.layout.enumerate import enumerate_rollout, enumerate_train
from twin.topology import cluster_kind

C1 = Layout(train=TrainLayout(tp=4, pp=8, ep=8, moe_tp_extend_ep=True, pp_layers=(7, 7, 8, 8, 8, 8, 8, 7)),
            rollout=RolloutLayout(tp=2, dp=128, ep=256, max_num_seqs=64, max_num_batched_tokens=1024))
QWEN235 = Layout(train=TrainLayout(tp=4, pp=8, ep=4), rollout=RolloutLayout(tp=8, dp=16, ep=64))


def test_recipe_layouts_are_valid():
    assert check_layout(C1, load_config("deepseek-r1"), 256, cluster_kind("a3"), directed_reshard=True) == []
    assert check_layout(QWEN235, load_config("qwen3-235b-a22b"), 128, cluster_kind("a2"), True) == []


@pytest.mark.parametrize(("layout", "devices", "rule"), [
    (Layout(train=TrainLayout(tp=3, pp=8), rollout=RolloutLayout(tp=2, dp=128)), 256, "devices = TP x PP x CP x DP"),
    (Layout(train=TrainLayout(tp=16, pp=16, ep=256), rollout=RolloutLayout(tp=2, dp=128)), 256,
     "expert TP x EP divides TP x CP x DP"),
    (Layout(train=TrainLayout(tp=4, pp=8, ep=3), rollout=RolloutLayout(tp=2, dp=128)), 256,
     "experts divisible by EP"),
    (Layout(train=TrainLayout(tp=4, pp=8, ep=8), rollout=RolloutLayout(tp=2, dp=128, ep=12)), 256,
     "rollout EP = TP x DP-per-instance"),
    (Layout(train=TrainLayout(tp=4, pp=8, ep=8, moe_tp_extend_ep=True), rollout=RolloutLayout(tp=2, dp=128, ep=16)),
     256, "train EP divides rollout EP (directed reshard)"),
    (Layout(train=TrainLayout(tp=4, pp=8, pp_layers=(8,) * 8), rollout=RolloutLayout(tp=2, dp=128)), 256,
     "layers over PP stages"),
    (Layout(train=TrainLayout(tp=4, pp=8), rollout=RolloutLayout(tp=2, dp=64)), 256, "devices = TP x DP (rollout)"),
    (Layout(train=TrainLayout(tp=4, pp=8), rollout=RolloutLayout(tp=2, dp=128, max_num_seqs=64,
                                                                  max_num_batched_tokens=32)), 256,
     "max_num_batched_tokens >= max_num_seqs"),
    (Layout(train=TrainLayout(tp=4, pp=8), rollout=RolloutLayout(tp=2, dp=124)), 248, "whole nodes"),
])
def test_broken_layouts_name_the_rule(layout, devices, rule):
    errs = check_layout(layout, load_config("deepseek-r1"), devices, cluster_kind("a3"), directed_reshard=True)
    assert any(e.rule.startswith(rule) for e in errs), [e.rule for e in errs]
    with pytest.raises(LayoutError) as info:
        validate_layout(layout, load_config("deepseek-r1"), devices, cluster_kind("a3"), directed_reshard=True)
    assert str(info.value).startswith(errs[0].rule)


def test_grouped_gemm_experts_need_an_moe_model_and_the_directed_reshard():
    grouped = QWEN235.model_copy(update={"train": TrainLayout(tp=4, pp=8, ep=4, moe_grouped_gemm=True)})
    moe, kind = load_config("qwen3-235b-a22b"), cluster_kind("a2")
    assert check_layout(grouped, moe, 128, kind, directed_reshard=True) == []
    assert [e.rule for e in check_layout(grouped, moe, 128, kind)] == ["grouped-GEMM experts need the directed reshard"]
    dense = Layout(train=TrainLayout(tp=4, pp=2, moe_grouped_gemm=True), rollout=RolloutLayout(tp=4, dp=4))
    assert [e.rule for e in check_layout(dense, load_config("qwen3-32b"), 16, kind, directed_reshard=True)] == [
        "grouped GEMM needs an MoE model"]


def test_zero_memory_needs_the_all_to_all_overlap_mindspeed_requires_with_it():
    moe, kind = load_config("qwen3-235b-a22b"), cluster_kind("a2")
    rule = "moe_zero_memory needs MindSpeed's all-to-all overlap: EP > 1 and grouped GEMM"
    for train, errors in ((TrainLayout(tp=4, pp=8, ep=4, moe_grouped_gemm=True, moe_zero_memory="level1"), []),
                          (TrainLayout(tp=4, pp=8, ep=4, moe_zero_memory="level0"), [rule]),
                          (TrainLayout(tp=4, pp=32, moe_grouped_gemm=True, moe_zero_memory="level1"), [rule])):
        layout = QWEN235.model_copy(update={"train": train})
        assert [e.rule for e in check_layout(layout, moe, 128, kind, directed_reshard=True)] == errors, train
    dense = Layout(train=TrainLayout(tp=4, pp=2, moe_zero_memory="level0"), rollout=RolloutLayout(tp=4, dp=4))
    assert [e.rule for e in check_layout(dense, load_config("qwen3-32b"), 16, kind)] == [
        "moe_zero_memory needs an MoE model"]


def test_a_separate_rollout_is_checked_on_its_own_devices_and_the_trainer_on_the_rest():
    cfg, kind = load_config("qwen3-30b-a3b"), cluster_kind("h20")
    pair = Layout(train=TrainLayout(tp=2, ep=8, etp=1), rollout=RolloutLayout(tp=4, dp=4), placement="separate")
    assert pair.trainer_devices(32) == 16 and check_layout(pair, cfg, 32, kind) == []
    # colocated, the same pair breaks the rollout's device count; separate on 20 devices the trainer's 4 (TP2 x DP2)
    # cannot hold EP8
    assert {e.rule for e in check_layout(pair.model_copy(update={"placement": "colocated"}), cfg, 32, kind)} >= {
        "devices = TP x DP (rollout)"}
    assert any(e.rule.startswith("expert TP x EP divides") for e in check_layout(pair, cfg, 20, kind))
    whole = pair.model_copy(update={"rollout": RolloutLayout(tp=4, dp=8)})
    assert [e.rule for e in check_layout(whole, cfg, 32, kind)] == ["a separate rollout leaves the trainer devices"]


def test_gqa_rules():
    cfg = load_config("qwen3-8b")  # 32 heads, 8 KV heads
    kind = cluster_kind("a2")
    train_bad = Layout(train=TrainLayout(tp=16), rollout=RolloutLayout(tp=1, dp=16))
    assert "KV heads divisible by TP (Megatron num_query_groups)" in [e.rule for e in check_layout(train_bad, cfg, 16)]
    ok_rollout = Layout(train=TrainLayout(tp=8, pp=2), rollout=RolloutLayout(tp=16, dp=1))
    assert check_layout(ok_rollout, cfg, 16, kind) == []  # vLLM replicates KV heads; TP16 spans two A2 nodes
    assert "EP needs an MoE model" in [e.rule for e in check_layout(
        Layout(train=TrainLayout(tp=2, ep=2), rollout=RolloutLayout(tp=1, dp=16)), cfg, 16)]


def test_context_parallel_runs_with_mla():
    # verl's Ascend nightly trains Moonlight-16B-A3B (MLA) at Megatron CP2 on 8 A2 NPUs (its baseline:
    # scenarios/c6-dapo-moonlight-16b-a2-8-megatron.yaml); megatron-core's MLA refuses only hybrid CP
    ran = Layout(train=TrainLayout(pp=4, cp=2, ep=2, etp=1, pp_layers=(7, 7, 7, 6)), rollout=RolloutLayout(tp=4, dp=2))
    assert check_layout(ran, load_config("moonlight-16b-a3b"), 8, cluster_kind("a2")) == []


def test_a_tp_group_may_span_nodes_but_the_search_keeps_it_inside_one():
    # verl's DeepSeek-V3 run on 96 H20 (docs/perf/dpsk.md) rolled out at vLLM TP32 over four nodes of 8
    cfg, kind = load_config("deepseek-v3"), cluster_kind("h20")
    ran = Layout(train=TrainLayout(tp=8, pp=12, ep=8, etp=1), rollout=RolloutLayout(tp=32, dp=3))
    assert check_layout(ran, cfg, 96, kind) == []
    assert max(r.tp for r in enumerate_rollout(cfg, 96, kind)) == kind.devices_per_node
    assert max(t.tp for t in enumerate_train(cfg, 96, kind)) <= kind.devices_per_node


def test_a_log_prob_budget_needs_dynamic_batching():
    with pytest.raises(ValueError, match="needs dynamic_batch_tokens"):
        TrainLayout(log_prob_dynamic_batch_tokens=9216)
    assert TrainLayout(dynamic_batch_tokens=3072, log_prob_dynamic_batch_tokens=9216).token_budget(True) == 9216


def test_layout_model_rejects_inconsistent_fields():
    with pytest.raises(ValueError, match="pp_layers has 2 entries"):
        TrainLayout(pp=4, pp_layers=(30, 31))
    with pytest.raises(ValueError, match="etp must be unset"):
        TrainLayout(tp=4, ep=8, moe_tp_extend_ep=True, etp=2)


def test_megatron_tp_must_divide_the_unpadded_vocabulary():
    cfg = load_config("qwen3-8b").model_copy(update={"vocab_size": 500})  # 500 = 4 x 125: TP8 leaves 62.5 rows
    rule = "vocabulary divisible by TP (Megatron, unpadded)"
    assert rule in [e.rule for e in check_layout(Layout(train=TrainLayout(tp=8), rollout=RolloutLayout(tp=8, dp=1)),
                                                 cfg, 8)]
    (err,) = [e for e in check_layout(Layout(train=TrainLayout(tp=8), rollout=RolloutLayout(tp=1, dp=8)), cfg, 8)
              if e.rule == rule]
    assert err.detail.startswith("500 vocabulary rows % TP8 != 0: verl's Megatron engine does not pad")
    ok = Layout(train=TrainLayout(tp=4, pp=2), rollout=RolloutLayout(tp=8, dp=1))  # vLLM pads 500 to 512 for TP8
    assert check_layout(ok, cfg, 8) == []
    fsdp = Layout(train=TrainLayout(engine="fsdp"), rollout=RolloutLayout(tp=1, dp=8))  # FSDP2 cuts dimension 0
    assert check_layout(fsdp, cfg, 8) == []


@pytest.mark.parametrize("model", catalog_names())
def test_the_catalog_vocabularies_admit_every_tp_of_a_node(model):
    # 129280 = 2^8 x 505, 32000 = 2^8 x 125, 151936 = 2^7 x 1187, 152064 = 2^9 x 297, 512 = 2^9: TP1-16 divide
    # them all, so the rule takes no TP the catalog models had (the A3 node's 16 dies is the largest TP)
    cfg = load_config(model)
    for tp in (1, 2, 4, 8, 16):
        errs = check_train(TrainLayout(tp=tp), cfg, 16)
        assert not [e for e in errs if e.rule.startswith("vocabulary")], (model, tp)
