"""The discrete-event twin on the published cases it was fitted to (C1-C3) and on its own invariants."""

import functools
import json
from pathlib import Path

import numpy as np
import pytest

from twin.evaluate import Evaluation
from twin.scenario import Software, load_scenario
from twin.sim.step import balanced_shares, mini_batch_indices, short_long_short, simulate

SCENARIOS = Path(__file__).resolve().parents[3] / "scenarios"
# a3.yaml (a3-fit-26) frees the six parameters the fitting cases identify and leave off their bounds (issue 10);
# on the operator-level physics (issues 9 and ops2) this fitted-case check is not reached. Strict: it passes only
# once the physics closes the gap its reason names (figures from `calibration report`, 2026-12-07).
C1_GAP = pytest.mark.xfail(strict=True, reason="a3-fit-26: C1 step +1.0 %, update +4.6 %, ref -7.1 %, reshard -1.1 % "
                                              "(the export loop, verl's hand-over and vLLM's load of 45k entries), "
                                              "but the offload is short (-35 %) and the advantage -58 %")
# C8's 7B rows are judge cases of the gpu profile (gpu-fit-23, which frees the dense GEMM scale and the eager
# rollout's host time per kernel; these rows decode in graph mode): the ablation is their ratio.


def _sim(name: str, **changes):
    sc = load_scenario(SCENARIOS / f"{name}.yaml")
    if changes:
        sc = sc.model_copy(update=changes)
    return simulate(Evaluation(sc))[0], sc


@C1_GAP
def test_c1_step_within_5_percent_and_every_stage_within_10():
    result, sc = _sim("c1-dsr1-a3-128")
    assert result.model_kind == "simulation" and result.profile == "a3-fit-26"
    assert result.step_s == pytest.approx(sc.measured.step_s, rel=0.05)
    for stage, measured in sc.measured.stages_s.items():
        assert result.stages_s[stage] == pytest.approx(measured, rel=0.10, abs=0.5), stage
    assert result.tps_per_card == pytest.approx(sc.measured.tps_per_card, rel=0.05)


def test_eos_sync_from_gloo_to_hccl_cuts_about_60_s_of_rollout():
    gloo, _ = _sim("c2-dsr1-a3-128-graph-gloo")
    hccl, _ = _sim("c2-dsr1-a3-128-graph-hccl")
    saved = gloo.stages_s["rollout"] - hccl.stages_s["rollout"]
    assert 45 < saved < 80  # measured: 385 s -> 322 s
    base, sc = _sim("c1-dsr1-a3-128")
    toggled, _ = _sim("c1-dsr1-a3-128", optimizations=tuple(o for o in sc.optimizations if o != "hccl_eos_sync"))
    assert 45 < toggled.stages_s["rollout"] - base.stages_s["rollout"] < 80
    assert toggled.stages_s["update"] == pytest.approx(base.stages_s["update"])  # only the rollout moves


@pytest.mark.xfail(strict=True, reason="a3-fit-26: x1.82 predicted against 419 / 162 = x2.59: the ladder's step "
                   "also moved from vLLM V0 to V1 and turned AIV on, which the twin does not model")
def test_graph_mode_multiplies_rollout_throughput_as_measured():
    """C2's eager/graph ladder, a judge case since a3-fit-21 (it set the eager per-operator host time until then).
    C2's 162 -> 419 changed three things (the source, seeds 001: TorchAir graph mode + AIV acceleration + the vLLM
    V1 framework); the two scenarios differ in graph mode only, and the eager host terms now come from two eager runs
    of one later stack (C7's source)."""
    eager, _sc = _sim("c2-dsr1-a3-128-eager-gloo")
    graph, _ = _sim("c2-dsr1-a3-128-graph-basic")
    ratio = eager.stages_s["rollout"] / graph.stages_s["rollout"]
    assert ratio == pytest.approx(419 / 162, rel=0.10)


@functools.cache
def _c8(cards: int):
    return _sim(f"c8-dapo-qwen25-math-7b-h20-{cards}")


def _c8_scaling(stage: str | None) -> tuple[float, float]:
    """(predicted, measured) ratio of C8's 7B step (stage None) or stage at 128 GPUs to 32."""
    (small, sc32), (large, sc128) = _c8(32), _c8(128)
    if stage is None:
        return large.step_s / small.step_s, sc128.measured.step_s / sc32.measured.step_s
    return large.stages_s[stage] / small.stages_s[stage], sc128.measured.stages_s[stage] / sc32.measured.stages_s[stage]


def test_c8_rollout_scales_from_32_to_128_gpus_as_measured():
    """4x the replicas shorten the bulk of the decoding, not the longest response's tail at a small batch:
    measured 177.85 / 357.41 = 0.50."""
    predicted, measured = _c8_scaling("rollout")
    assert predicted == pytest.approx(measured, rel=0.25)


def test_c8_old_log_prob_scales_from_32_to_128_gpus_as_measured():
    """Measured 53.92 / 107.71 = 0.50: the three published scales fit 36 s + 2,295 s / GPUs, a part that 4x the GPUs
    do not shorten. verl 0.6's driver holds it: the padded batch put once, the outputs fetched, the entropies
    averaged and the rollout's log-probs compared (0.31 predicted while none of it was counted)."""
    predicted, measured = _c8_scaling("old_log_prob")
    assert predicted == pytest.approx(measured, rel=0.25)


def test_c8_step_scales_from_32_to_128_gpus_as_measured():
    """The step: measured 356.30 / 790.10 = 0.45, with the GPU profile (of its fitted values only the GEMM scale is in
    these graph-mode runs). It was 0.59 while
    FSDP's data-parallel size ignored Ulysses (4x too little work per GPU at 32 GPUs)."""
    predicted, measured = _c8_scaling(None)
    assert predicted == pytest.approx(measured, rel=0.25)


@pytest.mark.parametrize(("pair", "stage", "measured"), [
    (("rollout-qwen3-235b-a3-128dies-tp4", "rollout-qwen3-235b-a3-128dies-tp1"), "rollout", 1614.2 / 1369.4),
    (("train-qwen3-235b-a3-128dies-cp4", "train-qwen3-235b-a3-128dies-cp8"), "update", 1654 / 1057),
])
def test_c10s_published_ablations_in_direction_and_within_25_percent(pair, stage, measured):
    """Issue 9's ablation bar on two judge ablations of the Qwen3-235B 32K document (section 2.2.1: TP1 DP128 against
    TP4 DP32 at rollout, 1.179; section 3.1: CP8 against CP4 in training, 1.565)."""
    base, sc = _sim(f"c10-{pair[0]}")
    other, other_sc = _sim(f"c10-{pair[1]}")
    assert other_sc.measured.stages_s[stage] / sc.measured.stages_s[stage] == pytest.approx(measured)
    predicted = other.stages_s[stage] / base.stages_s[stage]
    assert predicted > 1 and predicted == pytest.approx(measured, rel=0.25)


def test_device_to_device_dispatch_removes_the_task_skew():
    ray, _sc = _sim("c3-dsr1-a3-128-gloo-ray")
    d2d, _ = _sim("c3-dsr1-a3-128-gloo-d2d")
    assert ray.stages_s["update"] - d2d.stages_s["update"] == pytest.approx(400.9 - 334.2, rel=0.25)
    assert ray.stages_s["ref"] - d2d.stages_s["ref"] == pytest.approx(156.8 - 105.1, rel=0.25)
    assert ray.stages_s["rollout"] == pytest.approx(d2d.stages_s["rollout"])


def test_same_seed_same_result_and_lengths_matter():
    sc = load_scenario(SCENARIOS / "own-qwen3-30b-a3b-a3-16dies.yaml")
    a = simulate(Evaluation(sc), seed=3)[0]
    b = simulate(Evaluation(sc), seed=3)[0]
    c = simulate(Evaluation(sc), seed=4)[0]
    assert a.stages_s == b.stages_s
    assert a.stages_s["rollout"] != c.stages_s["rollout"]  # lognormal lengths: another draw, another tail
    several = simulate(Evaluation(sc), steps=3, seed=3)[0]
    assert "simulated 3 step(s)" in several.notes[0]


def test_long_tail_makes_the_simulated_rollout_longer_than_the_mean_model():
    sc = load_scenario(SCENARIOS / "own-qwen3-30b-a3b-a3-16dies.yaml")
    ev = Evaluation(sc)
    assert simulate(ev)[0].stages_s["rollout"] > ev.analytical(alternatives=False).stages_s["rollout"]


def test_symmetry_says_which_ranks_are_represented():
    result, _sc = _sim("c1-dsr1-a3-128")
    lanes = result.represented_ranks
    rollout = [ranks for lane, ranks in lanes.items() if lane.startswith("rollout")]
    assert rollout == [list(range(256))]  # fixed lengths: one replica stands for all 128
    stages = [ranks for lane, ranks in lanes.items() if lane.startswith("pipeline stage")]
    assert len(stages) == 8 and sorted(r for ranks in stages for r in ranks) == list(range(256))


def test_trace_and_plots(tmp_path):
    from twin.sim.plots import memory_timeline, stage_breakdown

    sc = load_scenario(SCENARIOS / "c1-dsr1-a3-128.yaml")
    result, sim = simulate(Evaluation(sc))
    sim.trace.write(tmp_path / "trace.json")
    trace = json.loads((tmp_path / "trace.json").read_text())
    names = {e["args"]["name"] for e in trace["traceEvents"] if e["ph"] == "M" and e["name"] == "process_name"}
    assert any(n.startswith("rollout") for n in names) and any(n.startswith("pipeline stage 7") for n in names)
    spans = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    decode = [e for e in spans if e["cat"] == "decode"]
    assert 1 <= len(decode) <= 64  # about 3000 engine steps aggregated into readable spans
    assert max(e["ts"] + e["dur"] for e in spans) / 1e6 == pytest.approx(result.step_s, rel=1e-6)
    for png in (memory_timeline(sim.trace, result, tmp_path / "m.png"), stage_breakdown(result, sc.measured,
                                                                                          tmp_path / "s.png")):
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_ppo_runs_the_critics_passes_in_verls_order_in_both_models():
    """PPO's step: values after the reference pass's place, update_critic before update_actor; the simulation and the
    closed form agree on them; the critic's forward costs less than the actor's (no vocabulary projection)."""
    result, sc = _sim("c6-ppo-qwen3-8b-a2-8-fsdp")
    ev = Evaluation(sc)
    closed = ev.stage_times()
    order = ["rollout", "reward", "old_log_prob", "ref", "values", "advantage", "update_critic", "update", "reshard",
             "offload"]
    assert list(result.stages_s) == list(closed) == order
    for stage in ("values", "update_critic"):
        assert result.stages_s[stage] == pytest.approx(closed[stage], rel=0.05)
    critic = ev.train_cost.value_model
    assert critic is not None and critic.log_prob_time() < ev.train_cost.log_prob_time()
    grpo, _ = _sim("c6-gspo-qwen3-8b-a2-8-fsdp")
    assert "values" not in grpo.stages_s and "update_critic" not in grpo.stages_s


def test_a_critic_packs_by_tokens_in_the_simulation_too_where_the_actor_runs_fixed_micro_batches():
    """verl's critic packs its micro-batches by tokens even beside an actor of fixed micro-batches: the simulated
    critic passes follow its own layout (TrainLayout.for_critic), as the closed form does."""
    sc = load_scenario(SCENARIOS / "c6-ppo-qwen3-8b-a2-8-fsdp.yaml")
    train = sc.layout.train.model_copy(update={"dynamic_batch_tokens": None})
    sc = sc.model_copy(update={"layout": sc.layout.model_copy(update={"train": train})})
    ev = Evaluation(sc)
    critic = ev.train_cost.value_model
    assert critic is not None and critic.lay.dynamic_batch_tokens == 32768
    result = simulate(ev)[0]
    closed = ev.stage_times()
    for stage in ("values", "update_critic"):
        assert result.stages_s[stage] == pytest.approx(closed[stage], rel=0.05)


def test_balance_batch_deals_equal_workloads_heaviest_first_to_the_lightest_share():
    """Workloads 8..1 into two shares, in rounds of two: 8, 7 to the empty shares (8 | 7); 6 to the lighter second,
    5 to the first (13 | 13); 4, 3 in share order (17 | 16); 2 to the second, 1 to the first: 18 each."""
    work = np.array([8.0, 7, 6, 5, 4, 3, 2, 1])
    first, second = balanced_shares(work, 2)
    assert first.tolist() == [0, 3, 4, 7] and second.tolist() == [1, 2, 5, 6]
    assert work[first].sum() == work[second].sum() == 18


def test_verl_orders_each_share_short_long_short_from_0_6_1():
    """verl 0.6.1's `partition[::2] + partition[1::2][::-1]` of a share sorted by workload: 1 3 5 7 8 6 4 2."""
    work = np.array([5.0, 1, 8, 3, 2, 7, 4, 6])
    share = np.arange(8)
    assert work[short_long_short(share, work, True)].tolist() == [1, 3, 5, 7, 8, 6, 4, 2]
    assert short_long_short(share, work, False).tolist() == share.tolist()
    assert [Software(verl=v).orders_for_pipeline for v in ("0.4.1.dev", "0.6.0", "0.6.1", "0.10.0")] == [
        False, False, True, True]
    assert not Software().orders_for_pipeline


def test_a_mini_batch_is_the_same_part_of_every_ranks_run():
    """Two ranks of four sequences each, two mini-batches: rank 0 holds 0-3, rank 1 4-7, so the first mini-batch is
    0, 1 (rank 0) and 4, 5 (rank 1)."""
    assert mini_batch_indices(0, 2, 8, 2).tolist() == [0, 1, 4, 5]
    assert mini_batch_indices(1, 2, 8, 2).tolist() == [2, 3, 6, 7]
    assert mini_batch_indices(1, 2, 9, 2) == slice(4, 8)  # uneven runs: consecutive parts


def test_verls_short_long_short_order_shrinks_the_pipeline_stall_of_uneven_micro_batches():
    """C8's Megatron PP2 row (micro-batches of 2 sequences of lognormal lengths, sigma 0.8): ordered as verl 0.9.1
    orders them, neighbouring micro-batches are alike and the 1F1B stall nearly vanishes; in batch order (balance_batch
    off) the update stalls for longer."""
    name = "c8-dapo-qwen25-math-7b-h20-16-megatron"
    sc = load_scenario(SCENARIOS / f"{name}.yaml")

    def update(balance: bool, verl: str) -> tuple[float, float]:
        train = sc.layout.train.model_copy(update={"balance_batch": balance})
        changed = sc.model_copy(update={"layout": sc.layout.model_copy(update={"train": train}),
                                        "software": sc.software.model_copy(update={"verl": verl})})
        result, sim = simulate(Evaluation(changed))
        runs = [run for label, run in sim.records[0].pipelines.items() if label.startswith("update ")]
        return result.stages_s["update"], max(run.bubble_fraction for run in runs)

    ordered, ordered_bubble = update(True, "0.9.1")
    unordered, unordered_bubble = update(False, "0.9.1")
    assert ordered < unordered
    assert ordered_bubble < 0.5 * unordered_bubble


def test_dynamic_micro_batches_are_as_many_on_every_replica_as_the_busiest_needs():
    # C6's Qwen3-30B-A3B packs 30,720 tokens a rank: a replica of 16 sequences of 3,000 tokens needs 2 micro-batches,
    # one of 16 at 1,000 one; verl's rearrange_micro_batches takes the maximum over the ranks, so both run 2
    from twin.sim.step import StepSimulation

    sc = load_scenario(SCENARIOS / "c6-gspo-qwen3-30b-a3b-a3-16dies.yaml")
    ev = Evaluation(sc)
    sim = StepSimulation(ev)
    dp = ev.train_memory.dp
    lengths = np.array([3000] * 16 + [1000] * 16 * (dp - 1))
    replicas = sim._replicas(np.zeros_like(lengths), lengths, 1, False, ev.train_cost)
    assert [len(tokens) for tokens, _ in replicas] == [2] * len(replicas)
    assert replicas[0][0].tolist() == [24000.0, 24000.0] and replicas[1][0].tolist() == [8000.0, 8000.0]


def test_a_padded_micro_batch_computes_every_sequence_at_its_longest():
    """Four sequences of 100, 300, 200 and 400 tokens in two micro-batches (the first two, the last two): packed they
    compute 400 and 600 tokens; padded to the micro-batch's longest 2 x 300 and 2 x 400; to the pass's longest 2 x 400
    each, every row's attention over its padded length."""
    from twin.sim.step import micro_batch_work

    lengths, bins = np.array([100.0, 300.0, 200.0, 400.0]), np.array([0, 0, 1, 1])
    expected = {"none": ([400, 600], [100**2 + 300**2, 200**2 + 400**2]),
                "micro_batch": ([600, 800], [2 * 300**2, 2 * 400**2]),
                "mini_batch": ([800, 800], [2 * 400**2, 2 * 400**2])}
    for padding, (tokens, squares) in expected.items():
        got = micro_batch_work(lengths, bins, 2, padding)
        assert got[0].tolist() == tokens and got[1].tolist() == squares
