"""The CPU target applies directed_reshard when the plan enables it (the CPU loop's scenario does): verl's weight
sync then runs the directed reshard from the FSDP2 trainer into verl's vLLM rollout at TP2 (run for real by
tests/calibration/test_calibration_cpu_loop.py; here the launch it builds)."""

from __future__ import annotations

from pathlib import Path

import pytest

from executor.cpu.vllm_compat import CPU_DIST
from executor.npu_opt.directed_reshard_backend import BACKEND
from executor.npu_opt.host import HostEnv
from executor.options import LaunchOptions
from executor.targets import target_for
from executor.versions import installed_version
from twin.plan import load_plan
from twin.scenario import load_scenario

REPO = Path(__file__).resolve().parents[2]
CPU_SCENARIO = REPO / "scenarios" / "cpu-tiny-grpo.yaml"


@pytest.mark.skipif(installed_version(CPU_DIST) is None, reason=f"{CPU_DIST} is not installed")
def test_a_cpu_plan_with_directed_reshard_syncs_through_the_backend_at_rollout_tp2(make_plan, tmp_path: Path) -> None:
    assert "directed_reshard" in load_scenario(CPU_SCENARIO).optimizations
    plan = load_plan(make_plan(CPU_SCENARIO))
    assert plan.layout.rollout.tp == 2 and plan.executor_refusals() == {}
    options = LaunchOptions(workdir=tmp_path / "run", model_path=str(tmp_path / "model"), data_dir=tmp_path)
    spec = target_for("cpu").build(plan, options, HostEnv())
    states = {r.id: r.state for r in spec.optimizations}
    assert states["directed_reshard"] == "applied"
    assert f"actor_rollout_ref.rollout.checkpoint_engine.backend={BACKEND}" in spec.overrides
    assert "directed_reshard" in spec.env["EXECUTOR_NPU_PATCHES"].split(",")


@pytest.mark.skipif(installed_version(CPU_DIST) is None or installed_version("mbridge") is None,
                    reason=f"{CPU_DIST} and mbridge are needed")
def test_a_megatron_plan_whose_vocabulary_megatron_never_padded_is_applied(tmp_path: Path) -> None:
    """A dense model of 384 vocabulary rows, no multiple of 128 x TP2 = 256: refused while the plan's placement padded
    them to 512 (verl's Megatron engine does not pad); the plan now splits them 192 / 192 as the engine does, so the
    CPU target applies directed_reshard."""
    import json

    from twin.catalog.registry import load_config
    from twin.planner import fixed_plan

    config = json.loads((REPO / "twin" / "catalog" / "configs" / "tiny.json").read_text()) | {"vocab_size": 384}
    (tmp_path / "config.json").write_text(json.dumps(config))
    scenario = load_scenario(REPO / "scenarios" / "cpu-tiny-grpo-megatron.yaml")
    assert "directed_reshard" in scenario.optimizations and load_config("tiny").vocab_size == 512
    plan = fixed_plan(scenario.model_copy(update={"model": str(tmp_path / "config.json")}))
    assert (plan.layout.train.engine, plan.layout.train.tp) == ("megatron", 2) and plan.executor_refusals() == {}
    options = LaunchOptions(workdir=tmp_path / "run", model_path=str(tmp_path / "model"), data_dir=tmp_path)
    (report,) = [r for r in target_for("cpu").build(plan, options, HostEnv()).optimizations
                 if r.id == "directed_reshard"]
    assert report.state == "applied", report.detail


@pytest.mark.skipif(installed_version(CPU_DIST) is None or installed_version("mbridge") is None,
                    reason=f"{CPU_DIST} and mbridge are needed")
def test_a_megatron_moe_plan_runs_at_ep2_and_is_refused_with_trainer_tp2_before_launch(tmp_path: Path) -> None:
    """The MoE loop's plan (run for real by tests/executor/cpu/test_verl_megatron_loop.py): experts split EP2, MoE
    layers unfused, the directed reshard applied; the same plan with the trainer at TP2 is refused with the reason
    (megatron-core's MoE layer wants sequence parallelism with TP in training, which its CPU norms refuse)."""
    from executor.errors import ExecutorError
    from twin.planner import fixed_plan

    scenario = load_scenario(REPO / "scenarios" / "cpu-tiny-moe-grpo-megatron.yaml")
    options = LaunchOptions(workdir=tmp_path / "run", model_path=str(tmp_path / "model"), data_dir=tmp_path)
    spec = target_for("cpu").build(fixed_plan(scenario), options, HostEnv())
    assert {r.id: r.state for r in spec.optimizations}["directed_reshard"] == "applied"
    m = "actor_rollout_ref.actor.megatron"
    assert {f"{m}.expert_model_parallel_size=2", f"{m}.tensor_model_parallel_size=1",
            f"+{m}.override_transformer_config.moe_grouped_gemm=False"} <= set(spec.overrides)
    train = scenario.layout.train.model_copy(update={"tp": 2, "etp": 1})
    tp2 = scenario.model_copy(update={"layout": scenario.layout.model_copy(update={"train": train})})
    with pytest.raises(ExecutorError, match="refuses tensor parallelism without sequence parallelism"):
        target_for("cpu").build(fixed_plan(tp2), options, HostEnv())
