"""The executor's capability facts the twin reads: which layouts and models each optimization's implementation runs."""

from __future__ import annotations

from twin.catalog.registry import load_config
from twin.layout.models import Layout, RolloutLayout, TrainLayout
from twin.optimizations import EXECUTOR_SUPPORT, executor_refusals
from twin.plan import PlanOptimization

WHERE = f"enforced in {EXECUTOR_SUPPORT['directed_reshard'].where}"
TINY = load_config("tiny")  # dense, 512 vocabulary rows
MOE = load_config("qwen3-30b-a3b")
MLA = load_config("deepseek-r1")


def _layout(engine: str, rollout_tp: int, tp: int = 1) -> Layout:
    return Layout(train=TrainLayout(engine=engine, tp=tp), rollout=RolloutLayout(tp=rollout_tp, dp=2))


def test_directed_reshard_runs_from_fsdp_and_dense_megatron_into_any_rollout_tp() -> None:
    for engine, tp in (("fsdp", 1), ("megatron", 1), ("megatron", 2)):
        for rollout_tp in (1, 2):
            assert executor_refusals("directed_reshard", _layout(engine, rollout_tp, tp), TINY) == []
    assert executor_refusals("directed_reshard", _layout("fsdp", 2), MOE) == []


def test_directed_reshard_reads_qwen3_moe_and_deepseek_from_megatron_and_refuses_other_bridges() -> None:
    assert executor_refusals("directed_reshard", _layout("megatron", 2), MOE) == []
    assert executor_refusals("directed_reshard", _layout("megatron", 2), MLA) == []
    mistral = TINY.model_copy(update={"model_type": "mistral"})  # the twin reads it; mbridge has no bridge for it
    assert executor_refusals("directed_reshard", _layout("megatron", 2), mistral) == [
        "its Megatron reader traces mbridge's bridges of qwen2, qwen3, llama, qwen3_moe, deepseek_v3 models only, "
        "not mistral (ran: dense, Qwen3-MoE and DeepSeek-V3 models in the CPU loop and executor check-reshard)", WHERE]
    assert executor_refusals("directed_reshard", _layout("fsdp", 2), mistral) == []


def test_directed_reshard_reads_mindspeeds_moe_tp_extend_ep_split() -> None:
    # refused until the reader read grouped-MLP experts whole and numbered over TP x EP (MindSpeed's split)
    layout = Layout(train=TrainLayout(engine="megatron", tp=2, ep=4, moe_tp_extend_ep=True),
                    rollout=RolloutLayout(tp=2, dp=4, ep=8))
    assert executor_refusals("directed_reshard", layout, MLA) == []


def test_directed_reshard_runs_from_megatron_whatever_the_vocabulary_multiple() -> None:
    # refused before the plan held the vocabulary unpadded as verl's Megatron engine does: 512 rows are no multiple
    # of 128 x TP8 = 1024, 500 rows none of 128 x TP2 = 256 (and 500 % 64 = 52: vLLM pads the rollout's to 512)
    assert executor_refusals("directed_reshard", _layout("megatron", 2, tp=8), TINY) == []
    odd = TINY.model_copy(update={"vocab_size": 500})
    for tp in (2, 4):
        assert executor_refusals("directed_reshard", _layout("megatron", 2, tp=tp), odd) == []


def test_optimizations_without_limits_are_never_refused() -> None:
    assert executor_refusals("hccl_eos_sync", _layout("megatron", 2), MLA) == []


def test_graph_mode_builds_several_captured_shapes_and_refuses_a_single_one() -> None:
    """The executor's graph mode is vLLM-Ascend's ACL graphs at vLLM's capture sizes; a layout with one graph at
    max_num_seqs (TorchAir GE compiled once, as C10's graph table ran) is the twin's to price, not the executor's to
    build."""
    assert executor_refusals("graph_mode", _layout("megatron", 2), MLA) == []
    single = Layout(train=TrainLayout(engine="megatron"), rollout=RolloutLayout(tp=2, dp=2, graph_shapes="single"))
    assert executor_refusals("graph_mode", single, MLA) == [
        "it captures decode graphs at several batch sizes (vLLM's capture sizes), the layout's rollout has a single "
        "shape", f"enforced in {EXECUTOR_SUPPORT['graph_mode'].where}"]


def test_a_plan_marks_an_enabled_optimization_its_layout_cannot_run() -> None:
    bad, mistral = _layout("megatron", 2), TINY.model_copy(update={"model_type": "mistral"})
    assert PlanOptimization.of("directed_reshard", True, bad, mistral).executor_refusals == executor_refusals(
        "directed_reshard", bad, mistral) != []
    assert PlanOptimization.of("directed_reshard", False, bad, mistral).executor_refusals == []
