"""The executor's capability facts the twin reads: which layouts each optimization's implementation runs."""

from __future__ import annotations

from twin.layout.models import Layout, RolloutLayout, TrainLayout
from twin.optimizations import EXECUTOR_SUPPORT, executor_refusals
from twin.plan import PlanOptimization

WHERE = f"enforced in {EXECUTOR_SUPPORT['directed_reshard'].where}"


def _layout(engine: str, rollout_tp: int) -> Layout:
    return Layout(train=TrainLayout(engine=engine), rollout=RolloutLayout(tp=rollout_tp, dp=2))


def test_directed_reshard_runs_from_fsdp_into_any_rollout_tp() -> None:
    assert executor_refusals("directed_reshard", _layout("fsdp", 1)) == []
    assert executor_refusals("directed_reshard", _layout("fsdp", 2)) == []
    assert executor_refusals("directed_reshard", _layout("megatron", 1)) == [
        "its weight sync reads fsdp training shards only, the layout trains with megatron", WHERE]
    assert executor_refusals("directed_reshard", _layout("megatron", 2)) == executor_refusals(
        "directed_reshard", _layout("megatron", 1))


def test_optimizations_without_limits_are_never_refused() -> None:
    assert executor_refusals("graph_mode", _layout("megatron", 2)) == []


def test_a_plan_marks_an_enabled_optimization_its_layout_cannot_run() -> None:
    bad = _layout("megatron", 2)
    assert PlanOptimization.of("directed_reshard", True, bad).executor_refusals == executor_refusals(
        "directed_reshard", bad)
    assert PlanOptimization.of("directed_reshard", False, bad).executor_refusals == []
