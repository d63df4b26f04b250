"""Eager decode's kernel launches, counted from the model's layers (hand-derived)."""

from pathlib import Path

from twin.catalog.registry import load_model
from twin.cost_models.rollout import eager_layer_kernels
from twin.evaluate import Evaluation
from twin.profile import reference_profile
from twin.scenario import load_scenario

SCENARIOS = Path(__file__).resolve().parents[3] / "scenarios"


def test_deepseek_eager_decode_kernels_per_layer_and_step():
    """DeepSeek-V3/R1 at rollout TP2 with expert parallelism (MC2): 2 fused add-norms; MLA with q_a, q_b, kv_a, o
    and the two absorbed bmm (6), the q_a and kv_a norms (2) and 13 other kernels = 21; MoE: router GEMM, fused
    gating and its cast (2), MC2's 11, shared experts' 3 = 17; two TP all-reduces. 42 per MoE layer, 28 per dense
    layer (MLP: gate_up, activation, down); 58 MoE and 3 dense layers = 2520 a step."""
    cfg = load_model("deepseek-r1").config
    assert eager_layer_kernels(cfg, True, 2, 256) == 2 + 21 + 17 + 2 == 42
    assert eager_layer_kernels(cfg, False, 2, 256) == 2 + 21 + 3 + 2 == 28
    ev = Evaluation(load_scenario(SCENARIOS / "c2-dsr1-a3-128-eager-gloo.yaml"), reference_profile("a3"))
    rc = ev.rollout_cost
    assert rc.ops_per_step == 58 * 42 + 3 * 28 == 2520
    step = rc.decode_step(64.0, 1000.0)
    assert step.launch_s == 2520 * ev.profile["eager_op_launch_us"] * 1e-6


def test_gqa_and_local_moe_kernels():
    """Qwen3 (q/k norms): qkv and o GEMMs, two norms, rotary + cache write + attention = 7. Qwen3-30B-A3B's 128
    experts without EP: router GEMM, softmax/top-k/casts/renormalisation and the weight cast (7), the local
    grouped-GEMM path (11), no shared experts = 19; at TP1 no all-reduce."""
    dense = load_model("qwen3-32b").config
    assert eager_layer_kernels(dense, False, 8, 1) == 2 + 7 + 3 + 2 == 14
    moe = load_model("qwen3-30b-a3b").config
    assert eager_layer_kernels(moe, True, 1, 1) == 2 + 7 + 19 == 28
