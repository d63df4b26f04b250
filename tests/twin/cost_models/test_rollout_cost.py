"""Eager decode's kernel launches, counted from the model's layers, the host time of a decode step and the
expected longest response (hand-derived)."""

from pathlib import Path

import numpy as np
import pytest

from twin.catalog.registry import load_model
from twin.cost_models.efficiency import memory_seconds
from twin.cost_models.rollout import eager_layer_kernels, response_tail
from twin.evaluate import Evaluation
from twin.lognormal import clipped_moments, mu_for_clipped_mean
from twin.profile import reference_profile
from twin.scenario import load_scenario

SCENARIOS = Path(__file__).resolve().parents[3] / "scenarios"


def test_deepseek_eager_decode_kernels_per_layer_and_step():
    """DeepSeek-V3/R1 at rollout TP2 with expert parallelism (MC2): 2 fused add-norms; MLA with q_a, q_b, kv_a, o
    and the two absorbed bmm (6), the q_a and kv_a norms (2) and 13 other kernels = 21; MoE: router GEMM, fused
    gating and its cast (2), MC2's 11, shared experts' 3 = 17; two TP all-reduces. 42 per MoE layer, 28 per dense
    layer (MLP: gate_up, activation, down); 58 MoE and 3 dense layers = 2520 a step, each kernel 40 us and each of
    the 61 layers 468 us of host time (A3's reference values): 100.8 + 28.548 = 129.348 ms a step."""
    cfg = load_model("deepseek-r1").config
    assert eager_layer_kernels(cfg, True, 2, 256) == 2 + 21 + 17 + 2 == 42
    assert eager_layer_kernels(cfg, False, 2, 256) == 2 + 21 + 3 + 2 == 28
    ev = Evaluation(load_scenario(SCENARIOS / "c2-dsr1-a3-128-eager-gloo.yaml"), reference_profile("a3"))
    rc = ev.rollout_cost
    assert rc.ops_per_step == 58 * 42 + 3 * 28 == 2520
    step = rc.decode_step(64.0, 1000.0)
    assert (ev.profile["eager_op_launch_us"], ev.profile["eager_layer_host_us"]) == (40.0, 468.0)
    assert step.launch_s == pytest.approx(0.129348, rel=1e-12)


def test_an_eager_step_pays_host_time_per_layer_beside_its_kernels():
    """C8's Qwen3-30B-A3B rollout on H20 (vLLM TP4, eager): 48 MoE layers of 2 fused add-norms, 7 attention kernels,
    router and gating 8, the local grouped-GEMM path 11 (EP 1), two TP all-reduces = 30 a layer, 1440 a step; each
    kernel 10 us and each layer 468 us of host time: 14.4 + 22.464 = 36.864 ms a step. A Qwen2.5 layer (qkv with
    bias, no q/k norms: 2 + 5 + 3 + 2 = 12 kernels at TP2) pays the same 468 us: its layers cost the host more than
    their kernels alone say."""
    pf = reference_profile("h20")
    assert (pf["eager_op_launch_us"], pf["eager_layer_host_us"]) == (10.0, 468.0)
    ev = Evaluation(load_scenario(SCENARIOS / "c8-grpo-qwen3-30b-a3b-h20-128.yaml"), pf)
    rc = ev.rollout_cost
    assert eager_layer_kernels(rc.cfg, True, 4, 1) == 2 + 7 + 8 + 11 + 2 == 30
    assert rc.ops_per_step == 48 * 30 == 1440
    assert rc.decode_step(64.0, 1000.0).launch_s == pytest.approx((1440 * 10.0 + 48 * 468.0) * 1e-6, rel=1e-12)
    dense = Evaluation(load_scenario(SCENARIOS / "c8-dapo-qwen25-math-7b-h20-16-fsdp.yaml"), pf).rollout_cost
    assert dense.ops_per_step == 28 * 12
    assert dense.decode_step(64.0, 1000.0).launch_s == pytest.approx((28 * 12 * 10.0 + 28 * 468.0) * 1e-6, rel=1e-12)


def test_a_tp_engine_pays_its_all_reduces_as_the_engine_runs_them():
    """The CPU loop's rollout (vLLM TP2 on the CPU kind, the tiny Qwen2's 2 dense layers): 4 TP all-reduces a step,
    each 2.0 ms beyond the collective curves with the value set here, in every decode step's comm and every prefill
    chunk: 8 ms more than with 0; at TP1 none. A MoE layer at EP > 1 has one (its MLP's is dispatch and combine)."""
    sc = load_scenario(SCENARIOS / "cpu-tiny-grpo.yaml")
    base = reference_profile("cpu")
    pf = base.with_values({"vllm_tp_collective_ms": 2.0}, "t")
    tp2, zero = Evaluation(sc, pf).rollout_cost, Evaluation(sc, base).rollout_cost
    assert tp2.ro.tp == 2 and tp2.tp_all_reduces_per_step == 2 * 2
    assert tp2.decode_step(4.0, 64.0).comm_s - zero.decode_step(4.0, 64.0).comm_s == pytest.approx(8e-3, rel=1e-9)
    assert tp2.prefill_time(4096.0) - zero.prefill_time(4096.0) == pytest.approx(8e-3, rel=1e-9)
    rollout = sc.layout.rollout.model_copy(update={"tp": 1, "dp": 2})
    tp1 = Evaluation(sc.model_copy(update={"layout": sc.layout.model_copy(update={"rollout": rollout})}),
                     pf).rollout_cost
    assert tp1.tp_all_reduces_per_step == 0 and tp1.engine_all_reduce_extra_s == 0.0
    # the tiny DeepSeek-V3 at vLLM TP2 EP2: a dense first layer (2) and one MoE layer (1)
    moe = Evaluation(load_scenario(SCENARIOS / "cpu-tiny-deepseek-grpo-megatron.yaml"), pf).rollout_cost
    assert (moe.ro.tp, moe.ro.ep, moe.cfg.num_layers) == (2, 2, 2) and not moe.cfg.is_moe_layer(0)
    assert moe.tp_all_reduces_per_step == 2 + 1


def test_gqa_and_local_moe_kernels():
    """Qwen3 (q/k norms): qkv and o GEMMs, two norms, rotary + cache write + attention = 7. Qwen3-30B-A3B's 128
    experts without EP: router GEMM, softmax/top-k/casts/renormalisation and the weight cast (7), the local
    grouped-GEMM path (11), no shared experts = 19; at TP1 no all-reduce."""
    dense = load_model("qwen3-32b").config
    assert eager_layer_kernels(dense, False, 8, 1) == 2 + 7 + 3 + 2 == 14
    moe = load_model("qwen3-30b-a3b").config
    assert eager_layer_kernels(moe, True, 1, 1) == 2 + 7 + 19 == 28


def test_host_time_has_a_part_per_step_and_a_part_per_running_sequence():
    """Host pre/post-processing = the per-step part + the per-sequence part x the running sequences: with 2 ms a
    step and 10 us a sequence, a lone sequence pays 2.01 ms, a full batch of 256 pays 2 + 2.56 = 4.56 ms."""
    ev = Evaluation(load_scenario(SCENARIOS / "c8-dapo-qwen25-math-7b-h20-32.yaml"))
    profile = ev.profile.with_values({"decode_host_ms_graph": 2.0, "vllm_host_us_per_seq": 10.0}, "test")
    rc = ev.with_profile(profile).rollout_cost
    assert rc.decode_step(1.0, 1000.0).host_s == pytest.approx(2.01e-3, rel=1e-12)
    assert rc.decode_step(256.0, 1000.0).host_s == pytest.approx(4.56e-3, rel=1e-12)
    steps = rc.decode_step(np.array([1.0, 256.0]), np.array([1000.0, 1000.0]))
    assert steps.host_s == pytest.approx([2.01e-3, 4.56e-3], rel=1e-12)


def test_scheduler_time_has_a_part_per_step_and_a_part_per_running_sequence():
    """vLLM's scheduler = its per-step part + its per-sequence part x the running sequences, apart from the host's
    pre/post-processing: with 0.8 ms a step and 144 us a sequence, a lone sequence pays 0.944 ms, a batch of 64
    pays 0.8 + 9.216 = 10.016 ms (C2's 10 ms a step at its 64 sequences per replica)."""
    ev = Evaluation(load_scenario(SCENARIOS / "c8-dapo-qwen25-math-7b-h20-32.yaml"))
    profile = ev.profile.with_values({"vllm_schedule_ms": 0.8, "vllm_schedule_us_per_seq": 144.0,
                                      "decode_host_ms_graph": 2.0, "vllm_host_us_per_seq": 0.0}, "test")
    rc = ev.with_profile(profile).rollout_cost
    steps = rc.decode_step(np.array([1.0, 64.0]), np.array([1000.0, 1000.0]))
    assert steps.schedule_s == pytest.approx([0.944e-3, 10.016e-3], rel=1e-12)
    assert steps.host_s == pytest.approx([2e-3, 2e-3], rel=1e-12)


# cann-recipes-train docs/llm_rl/qwen3_235B_32k_longseq_rl_train_optimization.md section 2.3.1: DeepSeek-V3's decode
# step (TPOT, ms) on A3 as the batch falls from 64 to 1, with graphs captured at every size and at 64 alone
TPOT_SEQUENCES = (64, 32, 16, 8, 4, 2, 1)
TPOT_MULTI_SHAPE = (76, 67, 61, 57, 55, 54, 54)
TPOT_ONE_SHAPE = (76, 74, 72, 72, 71, 71, 71)


# Not yet: the published ladder wants an Ascend step's host work to be the step's (its per-sequence part at the x86
# host's 9.4 + 6.3 us, the rest of C2's 20 ms at 64 sequences a fixed part). Tried 2026-12-06 (a3-fit-20 on that
# split, C10 at sigma 0.6): this test passes (one shape within 1.0 %, several shapes within 7.8 %), C10's DAPO step
# -13.8 -> -5.1 %, the judge step MAPE 33.3 -> 28.5 %, but C10's TP4 rollout +38.8 -> +66.1 % and the A2 fit refuses
# it (rollout_fixed_s on its bound 0, C6's PPO step still +26 %): the newer ACL-graph runs at 4-32 sequences a replica
# take no 19 ms a step. The host's work depends on the engine's graph path, which the twin does not model yet.
HOST_SPLIT_GAP = pytest.mark.xfail(strict=True, reason="C1's decode ladder at a3-fit-26: x0.792 at one sequence "
                                                       "with one shape (published x0.934), x0.53 with several "
                                                       "(x0.71): the host's per-sequence share is the x86 one")


@HOST_SPLIT_GAP
def test_a_deepseek_decode_step_falls_with_its_batch_as_measured():
    """C1's rollout (DeepSeek-R1, the recipe's engine) at its mean context, the step at each batch over the step at
    64, against the published DeepSeek-V3 ladder: with one captured shape every step runs 64 rows and only the KV
    reads and the host's per-sequence work fall (measured x0.934 at one sequence); with a shape at every size the
    padded rows, their dispatch and compute fall too (x0.71). The bar: within 2 % of the first ladder, 10 % of the
    second."""
    sc = load_scenario(SCENARIOS / "c1-dsr1-a3-128.yaml")
    rc = Evaluation(sc).rollout_cost
    context = sc.workload.prompt_len.mean + sc.workload.response_len.mean / 2
    multi = [float(rc.decode_step(float(b), context).total) for b in TPOT_SEQUENCES]
    one = [float(rc.decode_step(float(b), context, 64.0).total) for b in TPOT_SEQUENCES]
    for twin, measured, tolerance in ((one, TPOT_ONE_SHAPE, 0.02), (multi, TPOT_MULTI_SHAPE, 0.10)):
        ratios = np.array(twin) / twin[0]
        published = np.array(measured) / measured[0]
        assert np.all(np.abs(ratios / published - 1) <= tolerance), (ratios.round(3), published.round(3))


def test_longest_of_n_lognormal_responses_and_its_cap():
    """C8's responses: lognormal, mean 2500 after the cap at 28672, sigma 0.8 (mu = ln 2500 - 0.32 + 0.00081 = 7.50486:
    the cap takes 0.08 % of the unclipped mean, test_lognormal). The expected longest of N is the 1 - 1/(N + 1)
    quantile: N = 64 gives z = 2.16004, exp(7.50486 + 0.8 x 2.16004) = 10,228 tokens; N = 8192 (a whole round) gives
    z = 3.66836, exp(10.43955) = 34,185 > 28672, so the cap."""
    sc = load_scenario(SCENARIOS / "c8-dapo-qwen25-math-7b-h20-128.yaml")
    assert response_tail(sc, 64) == pytest.approx(10228.1, rel=1e-5)
    assert response_tail(sc, 8192) == 28672


def test_the_kv_cache_bounds_concurrency_by_what_growing_sequences_hold():
    """vLLM allocates as sequences grow, in whole blocks: a running sequence holds its prompt and, averaged over the
    steps it runs, half of E[L^2] / E[L] of its response, and half a block less a token more. C8's lengths: prompt
    mean 150; responses lognormal mean 2500 after the cap at 28672, sigma 0.8: E[L^2] / E[L] = 4688.4 (unclipped it
    would be 2500 x exp(0.64) = 4741.9); H20's vLLM blocks of 16 tokens: 150 + 2344.2 + 7.5 = 2501.7 tokens a
    sequence; a cache of 10 x 2501.7 tokens runs 10 at once (max_num_seqs and the replica's work allow more)."""
    sc = load_scenario(SCENARIOS / "c8-dapo-qwen25-math-7b-h20-128.yaml")
    assert (sc.workload.prompt_len.mean, sc.workload.response_len.mean, sc.workload.response_len.sigma) == (
        150, 2500, 0.8)
    rc = Evaluation(sc).rollout_cost
    assert rc.kv_block == 16
    mean, square = clipped_moments(mu_for_clipped_mean(2500, 0.8, 28672), 0.8, 28672)
    assert (mean, square / mean) == (pytest.approx(2500, rel=1e-9), pytest.approx(4688.4, abs=0.1))
    held = 150 + square / mean / 2 + 7.5
    assert rc.concurrency(1000.0, round(10 * held)) == pytest.approx(10.0, rel=1e-4)
    assert rc.concurrency(4.0, round(10 * held)) == 4.0  # the replica's work bounds it first


def test_a_single_captured_shape_runs_every_step_at_max_num_seqs():
    """TorchAir GE compiled once (C10's graph table, max_num_seqs 64): 8 running sequences run the graph of 64, their
    56 empty slots going through the GEMMs, the routing and the dispatch; the KV cache read and the host's work are
    the 8 sequences' own. With no context (no KV) the device time is the 64-sequence step's, exactly."""
    sc = load_scenario(SCENARIOS / "c10-rollout-qwen3-235b-a3-128dies-ge-single-64.yaml")
    single = Evaluation(sc).rollout_cost
    multi = Evaluation(sc.model_copy(update={"layout": sc.layout.model_copy(update={
        "rollout": sc.layout.rollout.model_copy(update={"graph_shapes": "multi"})})})).rollout_cost
    # the recipes' gears below max_num_seqs 64: 8 sequences fill the graph of 8
    assert list(multi.graph_sizes) == [4, 8, 16, 32, 48, 64] and list(single.graph_sizes) == [64]
    padded, full, alone = single.decode_step(8.0, 0.0), multi.decode_step(64.0, 0.0), multi.decode_step(8.0, 0.0)
    assert (padded.forward_s, padded.comm_s) == (full.forward_s, full.comm_s)
    assert (padded.host_s, padded.schedule_s) == (alone.host_s, alone.schedule_s)
    assert padded.forward_s > alone.forward_s and padded.comm_s > alone.comm_s
    # with context the padded slots read no KV: the step is the 64-sequence one less 56 sequences' KV reads
    kv = single.decode_step(8.0, 4000.0).forward_s
    assert kv < multi.decode_step(64.0, 4000.0).forward_s


def test_every_dp_rank_runs_the_graph_of_the_engines_busiest_rank():
    """C10's GRPO rollout (TorchAir, the recipes' gears 4 ... 128 and 256, one engine of 32 DP ranks): a rank with 3
    sequences beside one with 20 runs the graph of 32, as a rank of 32 sequences does on the device, with its own
    3 sequences' host work; alone it runs the graph of 4. No context: no KV read to tell the two apart."""
    rc = Evaluation(load_scenario(SCENARIOS / "c10-grpo-qwen3-235b-a3-128dies-32k.yaml")).rollout_cost
    assert list(rc.graph_sizes) == [4, 8, 16, 32, 48, 64, 128, 256]
    beside, full, alone = rc.decode_step(3.0, 0.0, 20.0), rc.decode_step(32.0, 0.0), rc.decode_step(3.0, 0.0)
    assert (beside.forward_s, beside.comm_s) == (full.forward_s, full.comm_s)
    assert (beside.host_s, beside.schedule_s) == (alone.host_s, alone.schedule_s)
    assert (alone.forward_s, alone.comm_s) == (rc.decode_step(4.0, 0.0).forward_s, rc.decode_step(4.0, 0.0).comm_s)
    assert beside.comm_s > alone.comm_s
    # an eager step runs its own sequences, whatever its engine's busiest rank holds
    eager = Evaluation(load_scenario(SCENARIOS / "c5-dapo-qwen3-30b-a3b-a3-16dies.yaml")).rollout_cost
    assert not eager.ro.graph_mode and eager.dp_per_instance == 8
    assert eager.decode_step(3.0, 0.0, 20.0).comm_s == eager.decode_step(3.0, 0.0).comm_s


def test_a_decode_steps_attention_runs_after_its_gemms():
    """C10's GRPO engine at 256 sequences: going from no context to 2,000 tokens each adds the whole KV read (256 x
    2,000 tokens x the cache's bytes a token, over one attention kernel a layer), not hidden under the GEMMs, which
    run before it."""
    ev = Evaluation(load_scenario(SCENARIOS / "c10-grpo-qwen3-235b-a3-128dies-32k.yaml"))
    rc = ev.rollout_cost
    kv = memory_seconds(ev.kind, ev.profile, 256 * 2000 * rc.mem.kv_bytes_per_token, 94)
    step, bare = rc.decode_step(256.0, 2000.0), rc.decode_step(256.0, 0.0)
    assert step.forward_s - bare.forward_s == pytest.approx(float(kv), rel=1e-9)
    assert bare.forward_s > rc.decode_step(4.0, 0.0).forward_s  # the GEMMs' compute grows with the rows


def test_a_graph_step_with_a_prefill_runs_eagerly():
    """vLLM-Ascend replays its decode graph only on steps without prefill: such a step pays the eager dispatch
    (kernels x eager_op_launch_us + layers x eager_layer_host_us) and eager mode's host work beyond graph mode's;
    nothing in eager mode (every step pays it already) nor on vLLM's CUDA kinds (piecewise graphs run mixed
    steps). Qwen3-235B at rollout TP4 EP128: 2 fused add-norms, 7 attention kernels, router and gating 1 + 7, MC2's
    11, two TP all-reduces = 30 a layer, 94 layers."""
    ev = Evaluation(load_scenario(SCENARIOS / "c10-grpo-qwen3-235b-a3-128dies-32k.yaml"))
    rc, pf = ev.rollout_cost, ev.profile
    assert rc.ops_per_step == 94 * (2 + 7 + 1 + 7 + 11 + 2) == 2820
    assert rc.eager_fallback_s == pytest.approx(
        (2820 * pf["eager_op_launch_us"] + 94 * pf["eager_layer_host_us"]) * 1e-6
        + (pf["decode_host_ms_eager"] - pf["decode_host_ms_graph"]) * 1e-3, rel=1e-12)
    assert Evaluation(load_scenario(SCENARIOS / "c2-dsr1-a3-128-eager-gloo.yaml")).rollout_cost.eager_fallback_s == 0
    gpu = Evaluation(load_scenario(SCENARIOS / "c8-dapo-qwen25-math-7b-h20-32.yaml")).rollout_cost
    assert gpu.ro.graph_mode and gpu.eager_fallback_s == 0
