"""Memory arithmetic checked against values derived by hand from the architecture."""

import pytest

from twin.catalog.registry import load_model
from twin.cost_models.memory import RolloutMemory, TrainMemory, rollout_parts
from twin.hardware import CLUSTER_KINDS
from twin.layout import RolloutLayout, TrainLayout
from twin.profile import embedded_profile
from twin.scenario import ClusterRef, Scenario


def _scenario(model: str) -> Scenario:
    return Scenario(name="t", model=model, cluster=ClusterRef(kind="a2", cards=16))


# Qwen3-8B, one decoder layer: q 4096x4096, k and v 1024x4096, o 4096x4096, MLP 3 x 12288x4096 (TP-split);
# q_norm and k_norm (128 each) and two RMSNorms (4096 each) replicated.
LAYER_TP2 = (4096 * 4096 * 2 + 1024 * 4096 * 2 + 3 * 12288 * 4096) // 2 + 2 * 128 + 2 * 4096
VOCAB_TP2 = 151_936 // 2 * 4096  # 151,936 rows unpadded (verl's Megatron engine), halved: 75,968 per rank


def test_qwen3_8b_tp2_pp2_static_bytes():
    tm = TrainMemory(load_model("qwen3-8b"), TrainLayout(tp=2, pp=2), 16, _scenario("qwen3-8b"),
                     embedded_profile("a2"))
    stage0 = 18 * LAYER_TP2 + VOCAB_TP2
    stage1 = 18 * LAYER_TP2 + 4096 + VOCAB_TP2
    assert tm.weight_bytes(0) == stage0 * 2
    assert tm.weight_bytes(1) == stage1 * 2
    assert tm.grads_bytes(1) == stage1 * 4  # Megatron's fp32 gradient buffer
    assert tm.optimizer_bytes(1) == pytest.approx(stage1 * 12 / 4)  # Adam sharded over DP = 16 / (2 x 2)


def test_expert_optimizer_is_sharded_over_expert_dp():
    inv = load_model("qwen3-30b-a3b")
    lay = TrainLayout(tp=2, pp=1, ep=4, etp=1)  # 16 devices: DP 8, expert partition 4 -> expert-DP 4
    tm = TrainMemory(inv, lay, 16, _scenario("qwen3-30b-a3b"), embedded_profile("a3"))
    experts = 48 * 128 * 3 * 768 * 2048 // 4  # every layer's 128 experts over EP4, no expert TP
    assert tm.stages.expert_numel[0] == experts
    dense = float(tm.stages.dense_numel[0])
    assert tm.optimizer_bytes(0) == pytest.approx(dense * 12 / 8 + experts * 12 / 4)


@pytest.mark.parametrize(("model", "tp", "per_token"), [
    ("deepseek-r1", 2, 61 * (512 + 64) * 2),  # MLA latent + rope key, not split by TP
    ("qwen3-8b", 2, 36 * 2 * 4 * 128 * 2),  # 8 KV heads over TP2
    ("qwen3-8b", 16, 36 * 2 * 1 * 128 * 2),  # TP16 > 8 KV heads: one (replicated) head per rank
    ("qwen2.5-7b", 4, 28 * 2 * 1 * 128 * 2),
])
def test_kv_bytes_per_token(model, tp, per_token):
    rm = RolloutMemory(load_model(model), RolloutLayout(tp=tp, dp=1), embedded_profile("a3"), 64)
    assert rm.kv_bytes_per_token == per_token


def test_kv_cache_is_the_budget_left_by_vllm():
    pf = embedded_profile("a3")
    rm = RolloutMemory(load_model("qwen3-8b"), RolloutLayout(tp=2, dp=8, max_num_seqs=64), pf, 64)
    budget = 0.8 * 64e9
    expected = budget - rm.weight_bytes - rm.profile_peak_bytes - pf["vllm_overhead_gb"] * 1e9
    assert rm.activation_bytes == rm.profile_peak_bytes + pf["graph_memory_gb"] * 1e9  # graph mode, the default
    assert rm.kv_cache_bytes(0.8) == int(expected)
    assert rm.kv_tokens(0.8) == int(expected) // rm.kv_bytes_per_token
    vocab = 151_936 // 2 * 4096  # divisible by 64: vLLM pads nothing
    assert rm.weight_bytes == (36 * LAYER_TP2 + 4096 + 2 * vocab) * 2


def test_the_kv_budget_is_a_share_of_what_the_allocator_sees_not_of_the_hbm():
    """vLLM sizes its KV cache from torch's total memory: on a 910B 65.46 GB of its 64 GiB (68.72 GB) of HBM."""
    dev = CLUSTER_KINDS["a2"].device
    assert (dev.hbm_gb.value, dev.capacity_gb) == (68.72, 65.46)
    pf = embedded_profile("a2")
    lay = RolloutLayout(tp=2, dp=4, max_num_seqs=64)
    full, capped = (RolloutMemory(load_model("qwen3-8b"), lay, pf, gb) for gb in (dev.capacity_gb, 64.0))
    assert full.kv_cache_bytes(0.9) - capped.kv_cache_bytes(0.9) == pytest.approx(0.9 * (dev.capacity_gb - 64) * 1e9,
                                                                                 abs=1)


@pytest.mark.parametrize(("frees", "late_init", "kv_in_transition"),
                         [(True, False, False), (False, False, True), (False, True, False)])
def test_the_kv_cache_is_in_the_transition_only_where_nothing_allocates_it_after_the_sync(frees, late_init,
                                                                                         kv_in_transition):
    """verl wakes the engine's weights, syncs, then the KV cache, where sleep mode frees memory; the recipes'
    late KV init allocates it after the sync; else it never left."""
    sc = Scenario(name="t", model="qwen3-8b", cluster=ClusterRef(kind="a3", cards=8),
                  optimizations=["late_kv_cache_init"] if late_init else [])
    rm = RolloutMemory(load_model("qwen3-8b"), RolloutLayout(tp=2, dp=8, max_num_seqs=64,
                                                             gpu_memory_utilization=0.8), embedded_profile("a3"), 64)
    parts = rollout_parts(sc, rm, 1e9, frees)
    assert parts["transition"].kv_cache == (rm.kv_cache_bytes(0.8) / 1e9 if kv_in_transition else 0.0)
    assert parts["transition"].weights == rm.weight_bytes / 1e9
    assert parts["rollout"].kv_cache == rm.kv_cache_bytes(0.8) / 1e9


def test_graph_pools_come_from_beyond_the_kv_budget():
    """vLLM-Ascend captures its graphs after sizing the KV cache: graph mode leaves the KV cache as in eager mode
    and raises the rollout's peak by the graph pools."""
    pf = embedded_profile("a3")
    inv = load_model("qwen2.5-32b")
    eager = RolloutMemory(inv, RolloutLayout(tp=2, dp=8, max_num_seqs=64, graph_mode=False), pf, 64)
    graph = RolloutMemory(inv, RolloutLayout(tp=2, dp=8, max_num_seqs=64, graph_mode=True), pf, 64)
    # one layer at 8192 tokens: residual, norm, attention in and out (4 x 5120) and gate, up, act (3 x 27648 / 2);
    # sampled logits of 64 sequences over half the 152,064 vocabulary in fp32
    peak = 8192 * 2 * (4 * 5120 + 3 * 27_648 // 2) + 64 * 152_064 // 2 * 4
    assert eager.profile_peak_bytes == graph.profile_peak_bytes == peak
    assert graph.kv_cache_bytes(0.6) == eager.kv_cache_bytes(0.6) == int(
        0.6 * 64e9 - eager.weight_bytes - peak - pf["vllm_overhead_gb"] * 1e9)
    assert graph.activation_bytes - eager.activation_bytes == pf["graph_memory_gb"] * 1e9


def test_recompute_and_offload_lower_the_update_peak():
    from twin.cost_models.memory import train_parts
    from twin.layout import Offload, Recompute

    inv, sc, pf = load_model("qwen3-32b"), _scenario("qwen3-32b"), embedded_profile("a2")
    def peak(lay):
        tm = TrainMemory(inv, lay, 16, sc, pf)
        return max(train_parts(tm, s)["update"].total for s in range(tm.n_stages))
    base = TrainLayout(tp=8, pp=2)
    full = base.model_copy(update={"recompute": Recompute(granularity="full", layers=1)})
    off = full.model_copy(update={"offload": Offload(param=True, grad=True, optimizer="swap")})
    assert peak(base) > peak(full) > peak(off)


def _case(name: str, kind: str):
    from pathlib import Path

    from twin.evaluate import Evaluation
    from twin.scenario import load_scenario

    scenarios = Path(__file__).resolve().parents[3] / "scenarios"
    return Evaluation(load_scenario(scenarios / f"{name}.yaml"), embedded_profile(kind))


def test_fsdp_actor_holds_fp32_parameters_and_adam_steps_with_one_fp32_scratch():
    """verl's FSDP actor is built in fp32; torch's foreach Adam allocates sqrt(exp_avg_sq) per parameter. The
    step's allocator peak of C6's Qwen3-8B on 8 NPUs: fp32 params 4 + fp32 grads 4 + two moments 8 + scratch 4 =
    20 bytes per local parameter, about 8.19e9 / 8 of them (verl logs 20.83 GiB = 22.37 GB)."""
    from twin.cost_models.memory import allocated_peak_gb

    ev = _case("c6-gspo-qwen3-8b-a2-8-fsdp", "a2")
    tm = ev.train_memory
    local = float(tm.stages.dense_numel[0] + tm.stages.expert_numel[0])
    assert local == pytest.approx(8.19e9 / 8, rel=2e-3)
    assert tm.param_bytes(0) == 4 * local == 2 * tm.weight_bytes(0)
    assert tm.optimizer_step_temp_bytes(0) == 4 * local
    assert allocated_peak_gb(tm, ev.rollout_memory, True) == pytest.approx(20 * local / 1e9, rel=1e-12)


def test_megatron_allocator_peak_leaves_out_framework_memory_and_fragmentation():
    """C6's Qwen3-30B-A3B (Megatron TP2 EP8, full recompute, optimizer offloaded between phases): verl loads the
    optimizer back when update_actor starts, so the forward/backward peak is bf16 params + fp32 grads + Adam state
    + activations as allocated; the reserved peak adds the framework's HCCL/runtime memory and the allocator's
    fragmentation on the activations."""
    from twin.cost_models.memory import allocated_peak_gb

    ev = _case("c6-gspo-qwen3-30b-a3b-a3-16dies", "a3")
    tm, pf = ev.train_memory, ev.profile
    assert tm.param_bytes(0) == tm.weight_bytes(0) and tm.optimizer_step_temp_bytes(0) == 0.0
    act = tm.update_activation_bytes(0, fragmented=False)
    allocated = (tm.weight_bytes(0) + tm.grads_bytes(0) + tm.optimizer_bytes(0) + act) / 1e9
    assert allocated_peak_gb(tm, ev.rollout_memory, True) == pytest.approx(allocated, rel=1e-12)
    reserved = ev.memory_report.phases["update"].total
    fragmentation = act * pf["activation_fragmentation"] / 1e9
    assert reserved == pytest.approx(allocated + pf["framework_overhead_gb"] + fragmentation, rel=1e-12)


@pytest.mark.parametrize(("optimizer", "resident"), [("offload", True), ("swap", False), ("cpu", False)])
def test_an_optimizer_offloaded_between_phases_is_on_the_device_through_forward_and_backward(optimizer, resident):
    """verl's train mode (and MindSpeed-RL's sharding manager) loads the offloaded optimizer when update_actor
    starts; MindSpeed's swap optimizer and Megatron's CPU optimizer keep the state on the host until the step."""
    from twin.cost_models.memory import update_parts
    from twin.layout import Offload

    ev = _case("c6-dapo-moonlight-16b-a2-8-megatron", "a2")
    lay = ev.layout.train.model_copy(update={"offload": Offload(param=True, optimizer=optimizer)})
    tm = TrainMemory(ev.inv, lay, 8, ev.sc, ev.profile)
    fwd_bwd, _ = update_parts(tm, 3, allocated=True)
    assert fwd_bwd.optimizer == pytest.approx(tm.optimizer_bytes(3) / 1e9 if resident else 0.0, rel=1e-12)


def test_a_dynamic_micro_batch_holds_the_busiest_ranks_tokens_when_the_budget_exceeds_them():
    """C6's Qwen3-30B-A3B packs at 30,720 tokens a device, but a DP rank (of 8) has 16 x 4 / 8 = 8 sequences of a
    mini-batch: a 130-token prompt and a lognormal response of mean 232.1, sigma 0.5 (std 232.1 x sqrt(e^0.25 - 1)
    = 123.70). The busiest of the 8 ranks x 2 optimizer steps holds 8 x 362.1 + z(16/17) x sqrt(8) x 123.70 =
    2,896.8 + 1.5647 x 349.86 = 3,444.2 tokens, all in one micro-batch."""
    from twin.workload import largest_sequences_tokens

    ev = _case("c6-gspo-qwen3-30b-a3b-a3-16dies", "a3")
    wl, tm = ev.sc.workload, ev.train_memory
    assert (tm.dp, wl.optimizer_steps, tm.sequences_per_pass(forward_only=False)) == (8, 2, 8.0)
    assert largest_sequences_tokens(wl, 8, 16) == pytest.approx(3444.2, abs=0.1)
    budget = TrainMemory(ev.inv, ev.layout.train.model_copy(update={"dynamic_batch_tokens": 1000}), 16,
                         ev.sc, ev.profile)
    # at a 1,000-token budget the busiest rank's 3,444.2 tokens pack into four micro-batches of 861 tokens
    ratio = budget.update_activation_bytes(0, fragmented=False) / tm.update_activation_bytes(0, fragmented=False)
    assert 0.2 < ratio < 0.3


def test_the_largest_micro_batch_of_fixed_lengths_is_their_sum_and_never_exceeds_full_length_sequences():
    from twin.scenario import LengthDist, Workload
    from twin.workload import largest_sequences_tokens

    fixed = Workload(global_batch=8, n=4, prompt_len=LengthDist(mean=100, max=200),
                     response_len=LengthDist(mean=300, max=400))
    assert largest_sequences_tokens(fixed, 3, 64) == 3 * (100 + 300)  # fixed lengths: no spread
    wide = fixed.model_copy(update={"response_len": LengthDist(mean=300, max=400, dist="lognormal", sigma=0.3)})
    assert largest_sequences_tokens(wide, 1, 1_000_000) == 600  # capped at one full-length sequence


def test_the_logged_peak_is_the_largest_of_the_trainers_passes():
    """verl never resets the allocator's peak, so the figure it logs after update_actor also holds the log-prob
    passes: with Megatron's CPU optimizer and a log-prob budget of 64K tokens, the fp32 logits of those passes
    outweigh the update's."""
    from twin.cost_models.memory import allocated_peak_gb, log_prob_part, update_parts
    from twin.layout import Offload

    ev = _case("c6-dapo-moonlight-16b-a2-8-megatron", "a2")
    lay = ev.layout.train.model_copy(update={"offload": Offload(param=True, optimizer="cpu"),
                                             "log_prob_dynamic_batch_tokens": 65536})
    tm = TrainMemory(ev.inv, lay, 8, ev.sc, ev.profile)
    update = max(b.total for s in range(tm.n_stages) for b in update_parts(tm, s, allocated=True))
    log_prob = max(log_prob_part(tm, s, allocated=True).total for s in range(tm.n_stages))
    assert log_prob > update
    assert allocated_peak_gb(tm, ev.rollout_memory, True) == pytest.approx(log_prob, rel=1e-12)


@pytest.mark.parametrize(("engine", "use_kl_loss", "ref_bytes_per_param"),
                         [("fsdp", False, 0), ("fsdp", True, 2), ("megatron", False, 0), ("megatron", True, 2)])
def test_log_prob_passes_hold_the_actor_once_and_the_reference_beside_it_unless_offloaded(engine, use_kl_loss,
                                                                                          ref_bytes_per_param):
    """Without parameter offload the actor's parameters (fp32 under FSDP, bf16 under Megatron) stay through both
    log-prob passes and the reference model's bf16 weights sit beside them where there is a reference pass."""
    from twin.cost_models.memory import log_prob_part
    from twin.scenario import Workload

    sc = _scenario("qwen3-8b").model_copy(update={"workload": Workload(use_kl_loss=use_kl_loss)})
    lay = TrainLayout(engine=engine) if engine == "fsdp" else TrainLayout(tp=2, pp=2)
    tm = TrainMemory(load_model("qwen3-8b"), lay, 16, sc, embedded_profile("a2"))
    local = float(tm.stages.dense_numel[0] + tm.stages.expert_numel[0])
    params = 4 if engine == "fsdp" else 2
    assert log_prob_part(tm, 0).weights == pytest.approx(local * (params + ref_bytes_per_param) / 1e9, rel=1e-12)


def test_ppos_critic_is_its_own_fp32_model_beside_the_actor():
    """C6's PPO (FSDP over 8 NPUs, everything offloaded between calls): the critic holds its 7,568,409,601
    parameters (the actor's less the LM head, plus its score head) in fp32, sharded over the 8 ranks, has no
    reference model and one value per token for logits; offloaded, neither model stays beside the other, so the
    update phase is the larger of the two updates and the logged allocator peak the largest pass of either (they
    share the worker process). Kept on the device instead, the critic's fp32 parameters sit beside the actor's
    through the rollout."""
    from twin.cost_models.memory import allocated_peak_gb, train_parts, update_parts
    from twin.layout import Offload

    ev = _case("c6-ppo-qwen3-8b-a2-8-fsdp", "a2")
    tm = ev.train_memory
    critic = tm.value_model
    local = float(critic.stages.dense_numel[0] + critic.stages.expert_numel[0])
    # FSDP2 shards dimension 0: every rank of 8 holds an eighth of the body, and a whole one-row score head
    assert local == (7_568_409_601 - 4097) / 8 + 4097
    assert critic.param_bytes(0) == 4 * local and critic.ref_resident(0) == 0.0
    assert critic.inv.head_outputs == 1 and critic.lay.dynamic_batch_tokens == 16384
    update = train_parts(tm, 0)["update"].total
    actor_update, critic_update = (max(b.total for b in update_parts(m, 0)) for m in (tm, critic))
    assert update == pytest.approx(max(actor_update, critic_update), rel=1e-12) and actor_update > critic_update
    grpo = ev.sc.model_copy(update={"workload": ev.sc.workload.model_copy(update={"algorithm": "grpo"})})
    alone = TrainMemory(ev.inv, ev.layout.train, 8, grpo, ev.profile)
    assert alone.value_model is None
    assert allocated_peak_gb(tm, ev.rollout_memory, True) == pytest.approx(
        allocated_peak_gb(alone, ev.rollout_memory, True), rel=1e-12)  # the actor's update is the larger pass
    kept = ev.layout.train.model_copy(update={"offload": Offload()})
    both = TrainMemory(ev.inv, kept, 8, ev.sc, ev.profile)
    rollout = train_parts(both, 0)["rollout"]
    assert rollout.weights == pytest.approx((both.param_bytes(0) + 4 * local) / 1e9, rel=1e-12)



def test_the_32k_moe_layout_that_ran_fits_and_the_one_that_ran_out_of_memory_does_not():
    """C10 (cann-recipes-train's Qwen3-235B 32K doc, section 3.1): TP4 PP4 CP4 EP32 trained on 64 A3 cards, and CP2
    (17,408 tokens a device, the script's (2048 + 32768) / CP) stopped out of memory on the first pipeline stage."""
    from twin.sim.step import simulate

    ran = _case("c10-train-qwen3-235b-a3-128dies-cp4", "a3")
    lay = ran.sc.layout
    cp2 = lay.model_copy(update={"train": lay.train.model_copy(update={"cp": 2, "dynamic_batch_tokens": 17_408})})
    failed = type(ran)(ran.sc.model_copy(update={"layout": cp2}), ran.profile)
    assert simulate(ran)[0].fits
    result = simulate(failed)[0]
    assert not result.fits and max(result.memory_peak_gb, key=result.memory_peak_gb.get) == "update"


def test_a_padded_micro_batch_holds_the_steps_longest_sequence_times_its_sequences():
    """The real-weight DeepSeek-R1 run's log-prob micro-batch of 8, padded to its longest: the micro-batch that holds
    the step's longest sequence (the 77.8-token prompt and the 3,072-token response cap) holds 8 x 3,149.8 tokens;
    packed, the largest of the step's groups of 8 sums, less."""
    ev = _case("c1-dsr1-a3-128-real-weights", "a3")
    padded = ev.train_memory
    packed = TrainMemory(ev.inv, ev.layout.train.model_copy(update={"padding": "none"}), 256, ev.sc, ev.profile)
    assert padded._micro_batch_tokens(forward_only=True) == pytest.approx(8 * (77.8 + 3072), rel=1e-12)
    assert packed._micro_batch_tokens(forward_only=True) < 8 * (77.8 + 3072)
