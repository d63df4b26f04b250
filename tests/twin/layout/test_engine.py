"""What the rollout engine decides by itself: vLLM keeps shared experts whole under its sequence-parallel MoE."""

import pytest

from twin.catalog.registry import load_config, load_model
from twin.cost_models.static import tensor_table
from twin.layout import Layout, RolloutLayout, TrainLayout, check_rollout, enumerate_rollout
from twin.layout.engine import as_engine_builds, shared_experts_whole
from twin.topology import cluster_kind

R1 = load_config("deepseek-r1")


@pytest.mark.parametrize(("model", "tp", "ep", "engine", "whole"), [
    ("deepseek-r1", 2, 8, "vllm", True),  # EP over 4 engines of TP2: sequence-parallel MoE
    ("deepseek-r1", 2, 2, "vllm", False),  # one engine (DP1): the TP ranks split the shared experts
    ("deepseek-r1", 1, 8, "vllm", False),  # TP1: nothing to split
    ("deepseek-r1", 2, 1, "vllm", False),  # no EP
    ("deepseek-r1", 2, 8, "vllm-ascend", False),  # vLLM-Ascend switches the sequence-parallel MoE off
    ("qwen3-30b-a3b", 2, 8, "vllm", False),  # no shared experts
    ("qwen2.5-7b", 2, 1, "vllm", False),  # dense
])
def test_which_engine_keeps_shared_experts_whole(model, tp, ep, engine, whole):
    lay = RolloutLayout(tp=tp, dp=16 // tp, ep=ep)
    assert shared_experts_whole(lay, load_config(model), engine) is whole


def test_the_rules_and_the_enumerator_follow_the_clusters_engine():
    h100, a3 = cluster_kind("h100"), cluster_kind("a3")
    split = RolloutLayout(tp=2, dp=8, ep=8)
    whole = split.model_copy(update={"shared_experts_whole": True})
    assert [e.rule for e in check_rollout(split, R1, 16, h100)] == [
        "shared experts as the rollout engine builds them (twin/layout/engine.py)"]
    assert check_rollout(whole, R1, 16, h100) == [] and check_rollout(split, R1, 16, a3) == []
    assert "split over TP" in str(check_rollout(whole, R1, 16, a3)[0])
    listed = {(r.tp, r.ep): r.shared_experts_whole for r in enumerate_rollout(R1, 16, h100)}
    assert listed[(2, 8)] and listed[(2, 16)] and not listed[(2, 2)] and not listed[(1, 8)]
    assert not any(r.shared_experts_whole for r in enumerate_rollout(R1, 16, a3))


def test_whole_shared_experts_cost_their_other_tp_parts_in_rollout_memory():
    # DeepSeek-R1: 58 MoE layers, one shared expert of 3 x 7168 x 2048 bf16 parameters each; at TP2 a rank holds the
    # other half as well: 58 x 3 x 7168 x 2048 x 2 B / 2 = 2,554,331,136 B more
    lay = Layout(train=TrainLayout(tp=4, pp=8, ep=8), rollout=RolloutLayout(tp=2, dp=128, ep=256))
    gpu = as_engine_builds(lay, R1, "vllm")
    assert gpu.rollout.shared_experts_whole and as_engine_builds(lay, R1, "vllm-ascend") is lay
    table = tensor_table(load_model("deepseek-r1"))
    (dense_split, experts_split), (dense_whole, experts_whole) = (table.rollout_bytes(r.rollout) for r in (lay, gpu))
    assert experts_whole == experts_split and dense_whole - dense_split == 58 * 3 * 7168 * 2048 * 2 // 2
