"""Training passes: how many sequences a replica runs when Ulysses (FSDP) or CP shares them."""

from pathlib import Path

import numpy as np
import pytest

from twin.cost_models.scheduling import dispatch_seconds
from twin.cost_models.training import TrainCost
from twin.evaluate import Evaluation
from twin.layout.models import Recompute, TrainLayout
from twin.lognormal import mu_for_clipped_mean
from twin.profile import reference_profile
from twin.scenario import LengthDist, load_scenario
from twin.workload import expected_longest

C8_32 = Path(__file__).resolve().parents[3] / "scenarios" / "c8-dapo-qwen25-math-7b-h20-32.yaml"


@pytest.mark.parametrize(("sp", "replicas"), [(1, 32), (2, 16), (4, 8)])
def test_fsdp_ulysses_ranks_share_one_replicas_sequences(sp, replicas):
    # C8 at 32 GPUs: 512 prompts x 16 = 8192 responses; verl's FSDP workers divide the batch over
    # world // ulysses_sequence_parallel_size replicas, each of its SP ranks holding 1/sp of every sequence
    sc = load_scenario(C8_32)
    lay = sc.layout.train.model_copy(update={"cp": sp})
    ev = Evaluation(sc.model_copy(update={"layout": sc.layout.model_copy(update={"train": lay})}))
    assert ev.train_memory.dp == replicas
    assert ev.train_memory.sequences_per_pass(forward_only=True) == 8192 / replicas


def test_a_log_prob_pass_with_ulysses_costs_each_gpu_its_share_of_the_tokens():
    # the same sequences over 8 replicas of SP4 or 32 replicas of SP1: every GPU computes 1/32 of the tokens
    # either way, so the pass computes the same; the SP all-to-alls are its communication (ulysses_per_layer_s)
    sc = load_scenario(C8_32)
    times = {}
    for sp in (1, 4):
        lay = sc.layout.train.model_copy(update={"cp": sp, "dynamic_batch_tokens": None, "log_prob_micro_batch": 4})
        ev = Evaluation(sc.model_copy(update={"layout": sc.layout.model_copy(update={"train": lay})}))
        times[sp] = ev.train_cost.microbatch(0, ev.train_memory.sequences_per_pass(forward_only=True), False).compute_s
    assert times[4] == pytest.approx(times[1], rel=0.02)


def test_ray_dispatch_sends_each_ulysses_rank_its_replicas_inputs():
    # verl before 0.6: 8192 x 1,900,544 B (the padded batch at the update) over 8 replicas = 1.946 GB in each of the
    # 32 workers' tasks, serialised one after another
    pf = reference_profile("h20")
    sc = load_scenario(C8_32).model_copy(update={"optimizations": ()})
    sc = sc.model_copy(update={"software": sc.software.model_copy(update={"verl": None})})
    share = 8192 * 1_900_544 / 8 / 1e9
    expected = 32 * (pf["dispatch_ray_s_per_worker"] + share * pf["dispatch_ray_s_per_gb"]) + pf["worker_call_s"]
    lay = TrainLayout(engine="fsdp", cp=4)
    assert dispatch_seconds(sc, pf, lay, 32, "update") == pytest.approx(expected, rel=1e-12)


def test_verl_06_puts_each_replicas_inputs_once_and_calls_every_worker():
    # C8 at 32 GPUs on verl 0.6: the whole 15.57 GB batch put once, on threads (28.85 / 19.86 faster than one after
    # another, verl #3495), then one Ray call to each of the 32 workers
    pf = reference_profile("h20")
    sc = load_scenario(C8_32).model_copy(update={"optimizations": ()})
    assert sc.software.puts_inputs_once
    puts = 8192 * 1_900_544 / 1e9 * pf["driver_put_s_per_gb"] * 19.86 / 28.85
    expected = puts + 32 * pf["ray_actor_call_ms"] * 1e-3 + pf["worker_call_s"]
    lay = TrainLayout(engine="fsdp", cp=4)
    assert dispatch_seconds(sc, pf, lay, 32, "update") == pytest.approx(expected, rel=1e-12)


DSV3 = C8_32.with_name("c8-grpo-dsv3-h20-96.yaml")


def test_the_cpu_optimizer_steps_on_the_shared_host():
    # verl's DeepSeek-V3 on 96 H20 (Megatron TP8 PP12 EP8 ETP1, DP 1): a device of the largest stage holds
    # dense / (DP x CP) + experts / expert-DP parameters, all of them in the CPU optimizer; the 8 devices of a node step
    # with torch's AdamW on one host at 80 B per parameter over its sustained bandwidth, while each device's fp32
    # gradients go down and its fp32 parameters come back up over its own host link
    ev = Evaluation(load_scenario(DSV3))
    tc, mem, kind = ev.train_cost, ev.train_memory, ev.kind
    numel = max(float(mem.stages.dense_numel[s]) / (mem.dp * mem.lay.cp) + float(mem.stages.expert_numel[s]) / mem.edp
                for s in range(mem.n_stages))
    host = 8 * numel * 80 / (kind.host_memory_bandwidth_gbs_per_node.value * 1e9)
    assert tc._host_optimizer_step(numel) == pytest.approx(host, rel=1e-12)  # the host is the slower side here
    assert host > 2 * numel * 4 / (kind.tier("host").bandwidth_gbs.value * 1e9)


def test_the_cpu_optimizer_keeps_its_state_and_gradient_copy_on_the_host():
    sc = load_scenario(DSV3)
    mem = Evaluation(sc).train_memory
    swapped = sc.layout.train.model_copy(update={"offload": sc.layout.train.offload.model_copy(
        update={"optimizer": "offload"})})
    offload = Evaluation(sc.model_copy(update={"layout": sc.layout.model_copy(update={"train": swapped})})).train_memory
    for s in (0, mem.n_stages - 1):
        state = mem.optimizer_bytes(s)  # 12 B per parameter: fp32 master weights and two moments
        assert mem.host_optimizer_bytes(s) == pytest.approx(state * (12 + 4) / 12, rel=1e-12)
        assert offload.host_optimizer_bytes(s) == state
    from twin.cost_models.memory import update_parts

    _, step = update_parts(mem, 0)
    assert step.optimizer == 0.0  # the step runs on the host: no state comes to the device
    _, offload_step = update_parts(offload, 0)
    assert offload_step.optimizer == pytest.approx(mem.optimizer_bytes(0) / 1e9, rel=1e-12)


def test_a_cpu_optimizer_on_a_kind_without_host_bandwidth_is_one_clear_error():
    from twin.errors import TwinError

    sc = load_scenario(DSV3)
    ev = Evaluation(sc)
    kind = ev.kind.model_copy(update={"host_memory_bandwidth_gbs_per_node": None})
    ev.train_cost.cluster.__dict__["kind"] = kind
    with pytest.raises(TwinError, match="has no host_memory_bandwidth_gbs_per_node"):
        ev.train_cost.optimizer_time()


@pytest.fixture
def recorded_collectives(monkeypatch):
    """Every collective the training model asks for, as (op, bytes), each costing 1 ms."""
    import twin.cost_models.training as training

    calls: list[tuple[str, float]] = []

    def record(cluster, profile, ranks, op, nbytes):
        calls.append((op, float(nbytes)))
        return 1e-3

    monkeypatch.setattr(training, "collective_time", record)
    return calls


def test_ulysses_moves_queries_keys_values_and_output_per_layer(recorded_collectives):
    # Qwen2.5-7B at SP4, 1024 tokens: 256 rows a rank; queries and output 28 heads x 128, keys and values 4 heads x
    # 128 (already >= SP 4, no repeat); each rank sends 3/4 of each bf16 tensor
    tc = Evaluation(load_scenario(C8_32)).train_cost
    assert tc.ulysses_per_layer_s(1024.0) == pytest.approx(4e-3)
    assert recorded_collectives == [("all_to_all", 1_376_256.0), ("all_to_all", 196_608.0),
                                    ("all_to_all", 196_608.0), ("all_to_all", 1_376_256.0)]


def test_fsdp_gathers_each_layer_per_pass_and_reduces_its_fp32_gradients_in_backward(recorded_collectives):
    # a Qwen2.5-7B decoder layer: q and o 3584 x 3584, k and v 512 x 3584, their biases 3584 + 512 + 512, gate, up
    # and down 18944 x 3584, two norms of 3584: 233,057,792 parameters
    tc = Evaluation(load_scenario(C8_32)).train_cost
    assert tc.fsdp_unit_numel == {False: 233_057_792.0}
    assert tc.fsdp_unit_s(False, "log_prob") == pytest.approx(1e-3)
    assert recorded_collectives == [("all_gather", 233_057_792 * 2.0)]
    recorded_collectives.clear()
    assert tc.fsdp_unit_s(False, "backward") == pytest.approx(2e-3)
    assert recorded_collectives == [("all_gather", 233_057_792 * 2.0), ("reduce_scatter", 233_057_792 * 4.0)]


def test_fsdp_shows_only_the_traffic_its_units_compute_does_not_hide(recorded_collectives):
    # 28 units of 1 ms forward traffic (2 ms backward): a pass computing 0.5 ms a unit shows 0.5 ms a unit plus the
    # first unit's gather; one computing 10 ms a unit shows only that first gather
    tc = Evaluation(load_scenario(C8_32)).train_cost
    assert tc.stage_layers[0].layers == 28
    assert tc.fsdp_exposed_s(0, 28 * 0.5e-3, "forward") == pytest.approx(28 * 0.5e-3 + 1e-3)
    assert tc.fsdp_exposed_s(0, 28 * 10e-3, "forward") == pytest.approx(1e-3)
    assert tc.fsdp_exposed_s(0, 28 * 0.5e-3, "backward") == pytest.approx(28 * 1.5e-3 + 1e-3)


def test_fsdps_optimizer_step_reduces_no_gradients_again(recorded_collectives):
    # the backward of every micro-batch reduce-scattered them: the step is the Adam pass alone
    tc = Evaluation(load_scenario(C8_32)).train_cost
    tc.optimizer_time()
    assert recorded_collectives == []


C10_CP4 = Path(__file__).resolve().parents[3] / "scenarios" / "c10-train-qwen3-235b-a3-128dies-cp4.yaml"


def test_zero_memory_recompute_hides_under_the_backwards_other_stream(monkeypatch):
    """moe_zero_memory's recomputed kernels fill the compute stream's wait on exposed communication and its
    re-dispatch the communication stream's idle compute; by hand, with 2 ms of recompute and 3 ms of re-dispatch:
    - 10 ms of compute, 5 ms of exposed and 4 ms of hidden communication: both fit (idle comm 10 - 4 = 6 ms): 0;
    - 1 ms exposed: 1 ms of the recompute overflows; hidden 8 ms leaves 2 ms idle: 1 ms of re-dispatch overflows."""
    tc = Evaluation(load_scenario(C10_CP4)).train_cost
    monkeypatch.setattr(type(tc), "zero_memory_recompute_s", lambda self, stage, tokens: (2e-3, 3e-3))
    assert tc.zero_memory_exposed_s(0, 1024.0, 10e-3, 5e-3, 4e-3) == pytest.approx(0.0)
    assert tc.zero_memory_exposed_s(0, 1024.0, 10e-3, 1e-3, 8e-3) == pytest.approx(2e-3)


def test_zero_memory_level1_redispatches_the_routed_tokens(recorded_collectives):
    # C10 CP4, stage 0: 23 MoE layers; 8192 tokens a micro-batch / CP4 = 2048 rows, / SP4 = 512 rows a rank, x top-8
    # = 4096 token-expert pairs, each 4096 bf16 values, at the busiest rank's share; priced at 1 ms a GB
    tc = Evaluation(load_scenario(C10_CP4)).train_cost
    _, redispatch = tc.zero_memory_recompute_s(0, 8192.0)
    [(op, nbytes)] = recorded_collectives
    assert op == "ep_dispatch" and nbytes == 1e9
    imbalance = float(tc.imbalance(4096.0))
    assert redispatch == pytest.approx(23 * 4096 * 4096 * 2 * imbalance * 1e-12)


C1 = Path(__file__).resolve().parents[3] / "scenarios" / "c1-dsr1-a3-128.yaml"


def test_a_backward_runs_the_forwards_collectives_conjugated_and_again_only_under_full_recompute(recorded_collectives):
    """Per layer, each collective costing 1 ms. C10's CP4 layout (TP4 with sequence parallelism, EP32, no recompute),
    a MoE layer: forward, per half an all-gather in and a reduce-scatter out, then dispatch and combine: 6 ms;
    backward, the conjugates (a reduce-scatter and an all-gather a half, combine and dispatch) plus one more
    all-gather a half for the weight gradient of each column-parallel linear: 8 ms, nothing recomputed. C1's
    (TP4 SP with tp-extend-ep: the TP traffic halved, the MLP's being the all-to-all; full recompute): a MoE layer
    2 + 2 = 4 ms forward, 3 + 2 = 5 ms backward; a dense layer 4 ms forward, 6 ms backward. Its first stage (3 dense,
    4 MoE layers, all recomputed) communicates 3 x (6 + 4) + 4 x (5 + 4) = 66 ms in a backward, 30 % of it hidden."""
    c10 = Evaluation(load_scenario(C10_CP4)).train_cost
    assert c10.layer_comm_s(1024.0, True, "forward") == pytest.approx(6e-3)
    assert c10.layer_comm_s(1024.0, True, "log_prob") == pytest.approx(6e-3)
    assert c10.layer_comm_s(1024.0, True, "backward") == pytest.approx(8e-3)
    c1 = Evaluation(load_scenario(C1)).train_cost
    assert c1.layer_comm_s(1024.0, True, "forward") == pytest.approx(4e-3)
    assert c1.layer_comm_s(1024.0, True, "backward") == pytest.approx(5e-3)
    assert c1.layer_comm_s(1024.0, False, "backward") == pytest.approx(6e-3)
    exposed, hidden = c1._comm_total(0, 1024.0, "backward")
    assert hidden == pytest.approx(66e-3 * 0.3)
    assert exposed == pytest.approx(66e-3 * 0.7 + c1.p2p_s(1024.0))


REAL_WEIGHTS = Path(__file__).resolve().parents[3] / "scenarios" / "c1-dsr1-a3-128-real-weights.yaml"


def _with_recompute(path: Path, **recompute) -> TrainCost:
    sc = load_scenario(path)
    lay = sc.layout.model_copy(update={"train": sc.layout.train.model_copy(
        update={"recompute": Recompute(granularity="full", **recompute)})})
    return Evaluation(sc.model_copy(update={"layout": lay})).train_cost


def test_block_recompute_runs_the_first_layers_of_each_stage_again():
    """Megatron's block method recomputes the first `layers` of each stage (TransformerBlock._checkpointed_forward),
    uniform all of them. DeepSeek-R1 on [7, 7, 8, 8, 8, 8, 8, 7] layers, 3 dense first: block 4 recomputes stage 0's
    3 dense and 1 MoE layer and 4 MoE layers of every other stage; block 8 the whole of each stage."""
    block4 = _with_recompute(REAL_WEIGHTS, method="block", layers=4)
    assert [(s.recomputed_dense, s.recomputed_moe) for s in block4.stage_layers] == [(3, 1)] + [(0, 4)] * 7
    block8 = _with_recompute(REAL_WEIGHTS, method="block", layers=8)
    uniform = _with_recompute(REAL_WEIGHTS, method="uniform", layers=1)
    whole = [(3, 4)] + [(0, n) for n in (7, 8, 8, 8, 8, 8, 7)]
    assert [(s.recomputed_dense, s.recomputed_moe) for s in block8.stage_layers] == whole
    assert [(s.recomputed_dense, s.recomputed_moe) for s in uniform.stage_layers] == whole


def test_a_backward_recomputes_the_forward_of_its_recomputed_layers_only(recorded_collectives):
    """Stage 1 (7 MoE layers, no head) at 2048 tokens: a backward's compute is twice the forward's plus the forward of
    the layers recomputed, 4 of 7 with block 4 and all with uniform (each layer the same cost); its communication,
    1 ms a collective: 7 x 5 ms of its own and 4 x 4 ms again with block 4 (51 ms), 7 x 4 ms with uniform (63 ms)."""
    block4 = _with_recompute(REAL_WEIGHTS, method="block", layers=4)
    uniform = _with_recompute(REAL_WEIGHTS, method="uniform", layers=1)
    tokens, squares = 2048.0, 2048.0**2
    forward = block4.microbatch_time(1, tokens, squares, "forward").compute_s
    assert uniform.microbatch_time(1, tokens, squares, "forward").compute_s == pytest.approx(forward)
    assert block4.microbatch_time(1, tokens, squares, "backward").compute_s == pytest.approx((2 + 4 / 7) * forward)
    assert uniform.microbatch_time(1, tokens, squares, "backward").compute_s == pytest.approx(3 * forward)
    assert sum(block4._comm_total(1, tokens, "backward")) == pytest.approx(51e-3 + block4.p2p_s(tokens))
    assert sum(uniform._comm_total(1, tokens, "backward")) == pytest.approx(63e-3 + uniform.p2p_s(tokens))


SCENARIOS = C8_32.parent


def _train_cost(name: str, **layout) -> TrainCost:
    sc = load_scenario(SCENARIOS / f"{name}.yaml")
    if layout:
        train = sc.layout.train.model_copy(update=layout)
        sc = sc.model_copy(update={"layout": sc.layout.model_copy(update={"train": train})})
    return Evaluation(sc).train_cost


@pytest.mark.parametrize(("name", "layout", "replicas"), [
    # DeepSeek-R1 on 256 dies, TP4 PP8: 32 ranks a stage, DP 8; tp-extend-ep spreads the experts over TP4 x EP8 =
    # 32 ranks, the whole stage: every replica in one all-to-all
    ("c1-dsr1-a3-128-real-weights", {}, 8),
    ("c1-dsr1-a3-128-real-weights", {"moe_tp_extend_ep": False}, 8),  # EP8 x ETP4 (Megatron's default: TP)
    ("c1-dsr1-a3-128-real-weights", {"moe_tp_extend_ep": False, "etp": 1}, 2),  # EP8 x ETP1 over TP4
    ("c1-dsr1-a3-128-real-weights", {"moe_tp_extend_ep": False, "etp": 1, "ep": 2}, 1),  # inside one replica's TP4
    ("c6-gspo-qwen3-30b-a3b-a3-16dies", {}, 4),  # EP8 x ETP1 over TP2 on 16 dies (DP 8)
    ("c7-dapo-qwen3-32b-a3-32dies", {}, 1),  # dense Megatron: gradients reduce once per optimizer step
    ("c6-gspo-qwen3-8b-a2-8-fsdp", {}, 4),  # FSDP on 8 NPUs with Ulysses SP2: every one of the 4 replicas
])
def test_lockstep_replicas_are_those_a_layers_collectives_join(name, layout, replicas):
    assert _train_cost(name, **layout).lockstep_replicas == replicas


def test_replicas_in_lockstep_wait_for_the_slowest_and_share_their_experts_load():
    # two DeepSeek-R1 replicas of one expert group with 1,000- and 3,000-token micro-batches: each expert rank
    # receives the pairs of both, 2,000 tokens a replica on average; the group waits for the 3,000-token replica
    tc = _train_cost("c1-dsr1-a3-128-real-weights")
    tokens, squares = np.array([[1000.0], [3000.0]]), np.array([[1000.0**2], [3000.0**2]])
    for kind in ("forward", "backward", "log_prob"):
        times = tc.lockstep_times(tokens, squares, kind)
        for s in (0, 3, 7):
            slowest = tc.microbatch_time(s, 3000.0, 3000.0**2, kind, expert_tokens=2000.0).total
            assert times[s, 0] == pytest.approx(float(slowest), rel=1e-12)
            own = tc.microbatch_time(s, 3000.0, 3000.0**2, kind).total
            assert tc.microbatch_time(s, 2000.0, 2000.0**2, kind).total < times[s, 0] < own


def test_fsdp_replicas_in_lockstep_take_the_slowest_micro_batch():
    tc = _train_cost("c6-gspo-qwen3-8b-a2-8-fsdp")
    tokens = np.array([[1500.0, 900.0], [700.0, 2000.0]])
    times = tc.lockstep_times(tokens, tokens**2, "forward")
    for s in range(times.shape[0]):
        for m in range(2):
            alone = [float(tc.microbatch_time(s, t, t * t, "forward").total) for t in tokens[:, m]]
            assert times[s, m] == max(alone)


def test_a_padded_micro_batch_runs_at_the_longest_of_its_sequences():
    """The real-weight DeepSeek-R1 run (the recipe pads each micro-batch to its longest): its reference pass takes 8
    sequences a micro-batch, each run at the longest of 8 draws, the 8/9 quantile of the responses' lognormal (mean
    1576.6 after the cap at 3,072, sigma 0.6: its location ln 1576.6 - 0.18 + 0.0680, test_lognormal;
    exp(that + 0.6 x 1.2206) = 2,931.9 tokens) beside the 77.8-token prompt; packed, at the mean 1,654.4."""
    import math
    from statistics import NormalDist

    tc = _train_cost("c1-dsr1-a3-128-real-weights")
    longest = math.exp(mu_for_clipped_mean(1576.6, 0.6, 3072) + 0.6 * NormalDist().inv_cdf(8 / 9))
    assert longest == pytest.approx(2931.9, abs=0.1)
    assert tc.computed_length(8, 1024) == pytest.approx(77.8 + longest, rel=1e-12)
    packed = _train_cost("c1-dsr1-a3-128-real-weights", padding="none")
    assert packed.computed_length(8, 1024) == pytest.approx(77.8 + 1576.6, rel=1e-12)
    assert tc.pipeline_time(8, backward=False)[0] > packed.pipeline_time(8, backward=False)[0]
    # the update's micro-batch of one sequence runs at that sequence's own length: on average the mean, as packed
    assert tc.computed_length(1, 1024) == pytest.approx(77.8 + 1576.6, rel=1e-12)


def test_a_padded_micro_batch_draws_the_prompts_its_responses_answer():
    """Prompts lognormal (mean 300, sigma 0.5, at most 2,048: 4 sigma above, too far to move the mean) in the
    real-weight run (16 responses a prompt, side by side in batch order): a micro-batch of 8 sequences answers one
    prompt, so its longest prompt is that one draw, on average the mean (300 tokens, not the median 264.7); padded
    to the rank's pass of 1,024 sequences, the longest of 64 prompts (the 64/65 quantile, z = 2.16004:
    300 x exp(-0.125 + 0.5 x 2.16004) = 779.7)."""
    sc = load_scenario(SCENARIOS / "c1-dsr1-a3-128-real-weights.yaml")
    prompts = LengthDist(mean=300, max=2048, dist="lognormal", sigma=0.5)
    sc = sc.model_copy(update={"workload": sc.workload.model_copy(update={"prompt_len": prompts})})
    responses = sc.workload.response_len
    assert sc.workload.n == 16
    per_micro_batch = Evaluation(sc).train_cost.computed_length(8, 1024)
    assert per_micro_batch == pytest.approx(300.0 + expected_longest(responses, 8), abs=0.1)
    train = sc.layout.train.model_copy(update={"padding": "mini_batch"})
    to_the_pass = Evaluation(sc.model_copy(update={"layout": sc.layout.model_copy(update={"train": train})}))
    assert to_the_pass.train_cost.computed_length(8, 1024) == pytest.approx(
        779.7 + expected_longest(responses, 1024), abs=0.1)
