"""Host copies and cache releases around the training passes (hand-derived from the memory model)."""

from pathlib import Path

import pytest

from twin.catalog.registry import load_config
from twin.cost_models.comm import host_copy_time
from twin.cost_models.static import tensor_table
from twin.cost_models.transition import (
    export_loop_s,
    handover_s,
    offload_moments,
    reshard_time,
    rollout_load_s,
    sync_calls_s,
    train_offload_moments,
    transfer_host_s,
)
from twin.evaluate import Evaluation
from twin.profile import reference_profile
from twin.scenario import Software, load_scenario
from twin.topology.clusters import sleep_frees_memory

SCENARIOS = Path(__file__).resolve().parents[3] / "scenarios"


def test_ref_pass_and_update_end_by_releasing_what_they_offloaded_and_their_activation_cache():
    """C1 (param and grad offload, swap optimizer): the ref pass offloads its bf16 weights and empty_cache returns
    them with its cached activations; update_actor offloads the fp32 grads and returns them with its activations,
    at the measured 26 GB per 4 s (0.154 s/GB)."""
    ev = Evaluation(load_scenario(SCENARIOS / "c1-dsr1-a3-128.yaml"), reference_profile("a3"))
    tm, pf = ev.train_memory, ev.profile
    assert pf["empty_cache_s_per_gb"] == 0.154
    stage = max(range(tm.n_stages), key=tm.weight_bytes)
    moments = offload_moments(tm, ev.rollout_memory, ev.sc, ev.cluster, pf)
    ref, grads = tm.weight_bytes(stage), tm.grads_bytes(stage)
    ref_release = (ref + tm.log_prob_activation_bytes(stage)) / 1e9 * 0.154
    assert moments["ref_offload"] == pytest.approx(host_copy_time(ev.cluster, pf, ref) + ref_release, rel=1e-12)
    update_release = (grads + tm.update_activation_bytes(stage)) / 1e9 * 0.154
    assert moments["after_update"] == pytest.approx(host_copy_time(ev.cluster, pf, grads) + update_release, rel=1e-12)
    assert moments["ref_onload"] == pytest.approx(host_copy_time(ev.cluster, pf, ref), rel=1e-12)  # nothing to free


def test_without_a_reference_pass_nothing_is_released_after_it():
    sc = load_scenario(SCENARIOS / "c1-dsr1-a3-128.yaml")
    sc = sc.model_copy(update={"workload": sc.workload.model_copy(update={"use_kl_loss": False})})
    ev = Evaluation(sc, reference_profile("a3"))
    assert offload_moments(ev.train_memory, ev.rollout_memory, sc, ev.cluster, ev.profile)["ref_offload"] == 0.0


def test_verls_old_policy_pass_loads_the_offloaded_actor_and_releases_it_after():
    """C6 (verl, Megatron, parameter offload, the old-policy pass runs): verl loads the actor's weights for the pass
    and offloads them after it, emptying the cache of them and of the pass's activations (0.154 s/GB); with the
    pass skipped, or under MindSpeed-RL (which offloads the training state for the rollout only), nothing."""
    sc = load_scenario(SCENARIOS / "c6-gspo-qwen3-30b-a3b-a3-16dies.yaml")
    ev = Evaluation(sc, reference_profile("a3"))
    tm, pf = ev.train_memory, ev.profile
    stage = max(range(tm.n_stages), key=tm.weight_bytes)
    weights = tm.param_bytes(stage)
    moments = offload_moments(tm, ev.rollout_memory, sc, ev.cluster, pf)
    assert moments["log_prob_onload"] == pytest.approx(host_copy_time(ev.cluster, pf, weights), rel=1e-12)
    release = (weights + tm.log_prob_activation_bytes(stage)) / 1e9 * 0.154
    assert moments["log_prob_offload"] == pytest.approx(host_copy_time(ev.cluster, pf, weights) + release, rel=1e-12)
    for other in (sc.model_copy(update={"optimizations": [*sc.optimizations, "skip_old_log_prob"]}),
                  sc.model_copy(update={"software": Software(framework="mindspeed_rl")})):
        again = offload_moments(tm, ev.rollout_memory, other, ev.cluster, pf)
        assert again["log_prob_onload"] == again["log_prob_offload"] == 0.0


def test_verl_offloads_the_actors_weights_after_the_update_and_reloads_them_for_the_sync():
    # C6 (Qwen3-30B-A3B, Megatron TP2 EP8, every state offloaded): a die holds 8,801,644,544 bytes of bf16 weights.
    # verl's update_actor offloads them with the gradients and optimizer and empties the cache; its weight sync loads
    # them again and offloads them after it, emptying the cache: one more copy each way and 8.80 GB x 0.154 s per GB
    # = 1.355 s more of release after the sync than the recipes, which keep them on the device for the sync
    sc = load_scenario(SCENARIOS / "c6-gspo-qwen3-30b-a3b-a3-16dies.yaml")
    ev = Evaluation(sc, reference_profile("a3"))
    tm, pf, cl = ev.train_memory, ev.profile, ev.cluster
    stage = max(range(tm.n_stages), key=tm.weight_bytes)
    weights, rest = tm.param_bytes(stage), tm.grads_bytes(stage) + tm.optimizer_bytes(stage)
    assert weights == 8_801_644_544
    verl = train_offload_moments(tm, sc, cl, pf)
    assert verl["before_reshard"] == pytest.approx(host_copy_time(cl, pf, weights), rel=1e-12)
    assert verl["after_reshard"] == pytest.approx(host_copy_time(cl, pf, weights) + 1.35545, rel=1e-5)
    released = (weights + rest + tm.update_activation_bytes(stage)) / 1e9 * 0.154
    assert verl["after_update"] == pytest.approx(host_copy_time(cl, pf, weights + rest) + released, rel=1e-12)
    kept = sc.model_copy(update={"software": sc.software.model_copy(update={"weights_kept_for_sync": True})})
    recipe = train_offload_moments(tm, kept, cl, pf)
    assert recipe["before_reshard"] == 0.0
    assert recipe["after_reshard"] == pytest.approx(host_copy_time(cl, pf, weights), rel=1e-12)
    released = (rest + tm.update_activation_bytes(stage)) / 1e9 * 0.154
    assert recipe["after_update"] == pytest.approx(host_copy_time(cl, pf, rest) + released, rel=1e-12)


@pytest.mark.parametrize(("software", "kept"), [
    (Software(), False), (Software(framework="mindspeed_rl"), True), (Software(weights_kept_for_sync=True), True),
    (Software(framework="mindspeed_rl", weights_kept_for_sync=False), False),  # what the scenario states wins
])
def test_who_keeps_the_actors_weights_for_the_sync(software, kept):
    assert software.keeps_weights_for_sync is kept


def test_megatron_holds_qwen2s_layer_in_seven_parameters():
    # HF: q, k, v weights and biases, o, gate, up, down, two norms (12 a layer); Megatron: linear_qkv weight and
    # bias, linear_proj, linear_fc1 (gate + up), linear_fc2, two norms
    sc = load_scenario(SCENARIOS / "cpu-tiny-grpo-megatron.yaml")
    table = tensor_table(Evaluation(sc).train_memory.inv)
    params, layer = table.megatron_parameters(grouped_experts=False), table.layer
    assert {int(params[layer == n].sum()) for n in range(load_config(sc.model).num_layers)} == {7}


def test_c1s_export_loop_counts_the_recipes_host_synchronised_calls():
    # DeepSeek-R1 as MindSpeed holds it with tp-extend-ep (grouped experts: two tensors a layer): an MoE layer has
    # 7 attention tensors, 2 expert, 2 router, 2 shared-expert (gate + up fused) and 2 norms = 15; a dense layer
    # 7 + 2 + 2 = 11; with the embedding, final norm and head: 58 x 15 + 3 x 11 + 3 = 906 parameters.
    # The recipe's PP all-to-all takes each stage's first 7 layers, experts excepted: stage 0 holds the 3 dense
    # layers (33) and 4 MoE layers (4 x 13 = 52), the others 7 x 13 = 91 each; 722 in all, 91 rounds.
    # The other 184 go one by one with 2 object collectives: 184 x 2 + 91 = 459 object collectives, 918 calls
    # read on the host at 3 ms each
    ev = Evaluation(load_scenario(SCENARIOS / "c1-dsr1-a3-128.yaml"), reference_profile("a3"))
    tm, pf = ev.train_memory, ev.profile
    assert tensor_table(tm.inv).megatron_parameters(grouped_experts=True).sum() == 906
    assert pf["host_sync_collective_ms"] == 3.0
    assert export_loop_s(tm, "directed", pf) == pytest.approx(918 * 3e-3, rel=1e-12)
    # verl's exporter (mbridge) takes every parameter one by one, 3 object collectives each: 906 x 3 x 2 calls, and
    # converts the 44,544 expert and 851 other HF tensors it yields at 100 us each
    assert pf["export_tensor_host_us"] == 100.0
    assert export_loop_s(tm, "verl_bucketed", pf) == pytest.approx(906 * 6 * 3e-3 + 45_395 * 100e-6, rel=1e-12)
    # megatron-core's grouped experts hold two tensors per expert: 58 x 2 x 255 more parameters
    assert tensor_table(tm.inv).megatron_parameters(grouped_experts=False).sum() == 906 + 58 * 2 * 255


def test_grouped_gemm_experts_are_two_parameters_a_layer_in_the_recipes_export():
    # Qwen3-235B-A22B as MindSpeed's grouped GEMM holds it (C10): a layer's 7 parameters (linear_qkv, linear_proj, q and
    # k norms, two layer norms, the router) and GroupedMLP's weight1 and weight2 = 9; 94 layers, the embedding, final
    # norm and head: 849. The PP all-to-all takes each stage's first 23 layers (stages of 23/24/24/23), experts
    # excepted: 4 x 23 x 7 = 644 in 161 rounds; the other 205 go one by one with 2 object collectives: 205 x 2 + 161 =
    # 571 object collectives, 1,142 calls read on the host at 3 ms each
    sc = load_scenario(SCENARIOS / "c10-grpo-qwen3-235b-a3-128dies-32k.yaml")
    assert sc.layout.train.moe_grouped_gemm and not sc.layout.train.moe_tp_extend_ep
    ev = Evaluation(sc, reference_profile("a3"))
    tm, pf = ev.train_memory, ev.profile
    assert tensor_table(tm.inv).megatron_parameters(grouped_experts=True).sum() == 849
    assert export_loop_s(tm, "directed", pf) == pytest.approx(1_142 * 3e-3, rel=1e-12)
    # held one tensor per expert (megatron-core's SequentialMLP or TEGroupedMLP): 94 x (7 + 2 x 128) + 3 = 24,725
    # parameters, 24,081 one by one: 48,323 object collectives (without zero memory, which needs grouped GEMM)
    per_expert = sc.model_copy(update={"layout": sc.layout.model_copy(update={
        "train": sc.layout.train.model_copy(update={"moe_grouped_gemm": False, "moe_zero_memory": "none"})})})
    tm = Evaluation(per_expert, reference_profile("a3")).train_memory
    assert export_loop_s(tm, "directed", pf) == pytest.approx(48_323 * 2 * 3e-3, rel=1e-12)


def test_a_one_stage_export_makes_its_object_collectives_locally_and_fsdp_none():
    # Qwen3-30B-A3B under Megatron TP2 EP8 PP1: a layer's 7 parameters (linear_qkv, linear_proj, q and k norms, two
    # layer norms, the router) and this rank's 16 of 128 experts x 2 (linear_fc1, linear_fc2) = 39; 48 layers, the
    # embedding, final norm and head: 1,875 parameters x 3 object collectives over a one-rank PP group at 100 us;
    # and 48 x (9 + 128 x 3) + 3 = 18,867 HF tensors converted at 100 us
    sc = load_scenario(SCENARIOS / "c6-gspo-qwen3-30b-a3b-a3-16dies.yaml")
    ev = Evaluation(sc, reference_profile("a3"))
    assert ev.profile["object_collective_local_us"] == 100.0
    assert export_loop_s(ev.train_memory, "verl_bucketed", ev.profile) == pytest.approx(
        1_875 * 3 * 100e-6 + 18_867 * 100e-6, rel=1e-12)
    fsdp = Evaluation(load_scenario(SCENARIOS / "c6-gspo-qwen3-8b-a2-8-fsdp.yaml"))
    assert export_loop_s(fsdp.train_memory, "verl_bucketed", fsdp.profile) == 0.0


def test_the_directed_path_reads_an_fsdp_trainers_shards_a_tensor_at_a_time_where_the_profile_measured_it():
    """The CPU loop's plan (FSDP2, directed): its 27 moved tensors read from the state dict at 24 us each
    (benchmarks/fsdp_shard_read_cpu.py) = 648 us; verl's own export and profiles without the term (A2's C6) none."""
    cpu = Evaluation(load_scenario(SCENARIOS / "cpu-tiny-grpo.yaml"))
    assert cpu.profile["fsdp_shard_read_us"] == 24.0
    assert export_loop_s(cpu.train_memory, "directed", cpu.profile) == pytest.approx(27 * 24e-6, rel=1e-12)
    assert cpu.reshard_parts()["export"] == export_loop_s(cpu.train_memory, "directed", cpu.profile)
    assert export_loop_s(cpu.train_memory, "verl_bucketed", cpu.profile) == 0.0
    fsdp = Evaluation(load_scenario(SCENARIOS / "c6-gspo-qwen3-8b-a2-8-fsdp.yaml"))
    assert export_loop_s(fsdp.train_memory, "directed", fsdp.profile) == 0.0


def test_the_engines_load_counts_every_checkpoint_entry_and_the_expert_mapping_it_scans():
    """DeepSeek-R1 (main model): 58 MoE layers x 256 experts x (gate, up, down) = 44,544 expert entries, each matched
    halfway through vLLM's 768-entry expert mapping; 851 others scan all of it: 3 dense layers of 12 (MLA's 7
    tensors, 3 MLP projections, 2 norms), 58 MoE layers of 14 (MLA's 7, 2 norms, the router's weight and bias, 3
    shared-expert projections), the embedding, the final norm and the head. Qwen2.5-32B has no expert mapping: 64
    layers of 12 entries (q, k, v with biases, o, gate, up, down, 2 norms) and 3 outside them."""
    ev = Evaluation(load_scenario(SCENARIOS / "c1-dsr1-a3-128.yaml"))
    rm, pf = ev.rollout_memory, ev.profile
    expert, other = 58 * 256 * 3, 3 * (7 + 3 + 2) + 58 * (7 + 2 + 2 + 3) + 3
    assert (expert, other) == (44_544, 851)
    assert tensor_table(rm.inv).rollout_load_work == (expert + other, expert * 384 + other * 768)
    assert rollout_load_s(rm, pf) == pytest.approx((expert + other) * pf["vllm_load_entry_us"] * 1e-6
                                                   + (expert * 384 + other * 768) * pf["vllm_load_scan_ns"] * 1e-9)
    dense = Evaluation(load_scenario(SCENARIOS / "c5-qwen25-32b-a3-16dies.yaml")).rollout_memory
    assert tensor_table(dense.inv).rollout_load_work == (64 * 12 + 3, 0)


def test_verls_hand_over_costs_its_sync_and_every_entry_the_engine_loads():
    """DeepSeek-R1's 45,395 entries (44,544 expert, 851 other: the test above) go through verl's bucketed hand-over
    at the measured 65 us each (benchmarks/verl_weight_handover_cpu.py), plus 2 ms a sync: 2.953 s; the tiny CPU model's
    27 entries (2 layers of 12, the embedding, the final norm and the head) 3.755 ms."""
    ev = Evaluation(load_scenario(SCENARIOS / "c1-dsr1-a3-128.yaml"))
    assert (ev.profile["weight_handover_sync_ms"], ev.profile["weight_handover_entry_us"]) == (2.0, 65.0)
    assert handover_s(ev.rollout_memory, ev.profile, ev.sc) == pytest.approx(2e-3 + 45_395 * 65e-6, rel=1e-12)
    cpu = Evaluation(load_scenario(SCENARIOS / "cpu-tiny-grpo.yaml"))
    assert handover_s(cpu.rollout_memory, cpu.profile, cpu.sc) == pytest.approx(2e-3 + 27 * 65e-6, rel=1e-12)
    # MindSpeed-RL writes the weights into the engine's buckets in its own process: nothing is handed over
    ms = load_scenario(SCENARIOS / "c5-dsr1-a3-384dies.yaml")
    assert ms.software.framework == "mindspeed_rl" and handover_s(ev.rollout_memory, ev.profile, ms) == 0.0


def test_a_colocated_sync_through_the_server_pays_verls_framework_calls_around_the_hand_over():
    """verl >= 0.8 (the CPU run's 0.9.1): the driver's worker-group call, then in verl's order a Ray call to the
    server actor and the collective RPC it passes to the TP workers, each reaching processes no call of the sync has
    reached yet (after idle: 2.2 and 2.5 ms, benchmarks/verl_sync_rpcs_cpu.py), then 4 more server calls and 4
    engine-core calls, each made at once after the one before (0.7 and 1.3 ms): on the CPU kind (no sleep mode)
    0.05 s + (2.2 + 2.5 + 2.8 + 5.2) ms = 62.7 ms. Where sleep mode frees the weights the wake-up comes first: its
    server call, engine-core call and collective pay the idle round trips (2.2 + 2.8 + 2.5 ms) and every call of the
    sync after them comes at once (5 x 0.7 + 0.9 + 4 x 1.3 ms): 17.1 ms in all, 4.4 ms more. The reshard holds the
    calls and the offload's moment before it no longer holds the worker-group call. Earlier verl (and C1, which names
    none) syncs inside the rollout's wake-up call: no calls, and the moment keeps it."""
    cpu = Evaluation(load_scenario(SCENARIOS / "cpu-tiny-grpo.yaml"))
    pf = cpu.profile
    assert (pf["worker_call_s"], pf["ray_actor_call_ms"], pf["vllm_engine_call_ms"], pf["vllm_collective_rpc_ms"],
            pf["ray_actor_call_at_once_ms"], pf["vllm_engine_call_at_once_ms"],
            pf["vllm_collective_rpc_at_once_ms"]) == (0.05, 2.2, 2.8, 2.5, 0.7, 1.3, 0.9)
    assert cpu.sc.software.syncs_through_server and not sleep_frees_memory(cpu.sc)
    assert sync_calls_s(pf, cpu.sc) == pytest.approx(0.0627, rel=1e-12)
    sleeping = cpu.sc.model_copy(update={"software": cpu.sc.software.model_copy(update={"sleep_frees_memory": True})})
    assert sync_calls_s(pf, sleeping) == pytest.approx(0.0671, rel=1e-12)
    args = (cpu.reshard(), cpu.cluster, pf, cpu.rollout_memory, cpu.train_memory)
    assert cpu.stage_times()["reshard"] == reshard_time(*args, cpu.sc)
    assert reshard_time(*args, sleeping) - reshard_time(*args, cpu.sc) == pytest.approx(0.0044, rel=1e-9)
    assert offload_moments(cpu.train_memory, cpu.rollout_memory, cpu.sc, cpu.cluster, pf)["before_reshard"] == 0.0
    c1 = Evaluation(load_scenario(SCENARIOS / "c1-dsr1-a3-128.yaml"))
    assert not c1.sc.software.syncs_through_server and sync_calls_s(c1.profile, c1.sc) == 0.0
    before = offload_moments(c1.train_memory, c1.rollout_memory, c1.sc, c1.cluster, c1.profile)["before_reshard"]
    assert c1.sc.has("no_sleep_mode")  # the engine's weights come back from the host, then the call
    assert before == pytest.approx(host_copy_time(c1.cluster, c1.profile, c1.rollout_memory.weight_bytes)
                                   + c1.profile["worker_call_s"], rel=1e-12)


@pytest.mark.parametrize(("verl", "through_server"), [("0.7.0", False), ("0.8.0.dev", True), ("0.9.1", True),
                                                     ("1.0", True), (None, False)])
def test_which_verl_syncs_through_the_rollout_server(verl, through_server):
    assert Software(verl=verl).syncs_through_server is through_server


def test_a_verl_version_that_is_not_one_is_refused():
    with pytest.raises(ValueError, match="verl"):
        Software(verl="latest")


def test_the_directed_transfers_host_work_is_its_rounds_and_its_rollout_tensors_where_the_profile_measured_it():
    """The CPU loop's plan (directed, TP2 rollout on 2 ranks): the tiny Qwen2's 27 tensors, each allocated and filled
    on every rank before the rounds (26 us each), and 90 us around each of its 9 all-to-all-v rounds and 200 us of
    the ranks' drift in each (benchmarks/gloo_a2a_chain_cpu.py): 27 x 26 + 9 x (90 + 200) = 3312 us. Profiles
    without the terms (NPU, GPU) and the gathers have none."""
    cpu = Evaluation(load_scenario(SCENARIOS / "cpu-tiny-grpo.yaml"))
    stats, rm = cpu.reshard(), cpu.rollout_memory
    assert (stats.method, stats.collective_rounds, len(tensor_table(rm.inv).numel)) == ("directed", 9, 27)
    assert transfer_host_s(stats, rm, cpu.profile) == pytest.approx(3312e-6, rel=1e-12)
    assert cpu.reshard_parts()["transfer_host"] == transfer_host_s(stats, rm, cpu.profile)
    c1 = Evaluation(load_scenario(SCENARIOS / "c1-dsr1-a3-128.yaml"))
    assert transfer_host_s(c1.reshard(), c1.rollout_memory, c1.profile) == 0.0
    gathered = stats.__class__(**{**stats.__dict__, "method": "all_gather"})
    assert transfer_host_s(gathered, rm, cpu.profile) == 0.0


def test_ppos_critic_moves_its_own_state_around_its_calls():
    """C6's PPO (FSDP, parameters, gradients and optimizer offloaded): the critic's fp32 parameters come on for
    compute_values and leave after it with an empty_cache of them and the pass's activations; all of its offloaded
    state comes on for update_critic and leaves after it; a GRPO step has none of these moments."""
    sc = load_scenario(SCENARIOS / "c6-ppo-qwen3-8b-a2-8-fsdp.yaml")
    ev = Evaluation(sc, reference_profile("a2"))
    critic, pf, cluster = ev.train_memory.value_model, ev.profile, ev.cluster
    assert critic is not None and critic.is_critic and not critic.has_ref
    weights = critic.param_bytes(0)
    state = weights + critic.grads_bytes(0) + critic.optimizer_bytes(0)
    assert state == pytest.approx(weights * 4, rel=1e-12)  # fp32 parameters, gradients and two moments
    moments = offload_moments(ev.train_memory, ev.rollout_memory, sc, cluster, pf)
    copy = host_copy_time
    assert moments["values_onload"] == pytest.approx(copy(cluster, pf, weights), rel=1e-12)
    assert moments["values_offload"] == pytest.approx(
        copy(cluster, pf, weights) + (weights + critic.log_prob_activation_bytes(0)) / 1e9 * 0.154, rel=1e-12)
    assert moments["before_update_critic"] == pytest.approx(copy(cluster, pf, state), rel=1e-12)
    assert moments["after_update_critic"] == pytest.approx(
        copy(cluster, pf, state) + (state + critic.update_activation_bytes(0)) / 1e9 * 0.154, rel=1e-12)
    gspo = Evaluation(load_scenario(SCENARIOS / "c6-gspo-qwen3-8b-a2-8-fsdp.yaml"), reference_profile("a2"))
    grpo = offload_moments(gspo.train_memory, gspo.rollout_memory, gspo.sc, gspo.cluster, gspo.profile)
    assert all(grpo[k] == 0.0 for k in ("values_onload", "values_offload", "before_update_critic",
                                        "after_update_critic"))
