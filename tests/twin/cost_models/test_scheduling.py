"""Task dispatch before a worker-group call, against C3's measured Ray-minus-TensorCache differences."""

from pathlib import Path

import pytest

from twin.cost_models.scheduling import collect_seconds, dispatch_seconds, dispatched_bytes_per_sequence
from twin.profile import reference_profile
from twin.scenario import load_scenario

SCENARIOS = Path(__file__).resolve().parents[3] / "scenarios"


def _c3(name: str):
    sc = load_scenario(SCENARIOS / f"{name}.yaml")
    return sc, sc.layout.train


def test_a_verl_call_carries_the_drivers_whole_batch_padded_to_the_limits():
    """C3 (prompts to 1024, responses to 3072, no old-policy pass, a KL loss): the ref call carries input_ids,
    attention_mask and position_ids over 4096 tokens, prompts over 1024, responses and response_mask over 3072
    (int64): 155,648 B a sequence; the update adds scores, rewards, advantages, returns and the ref's log-probs
    (fp32) over 3072: 217,088. C8 at 32 GPUs (2048 + 28672, the rollout's log-probs kept, no KL): 1,327,104 B at
    old_log_prob, 1,900,544 at the update (old log-probs and the four fp32 tensors more). MindSpeed-RL's consumers
    pull their columns at the mean lengths: 75 + 3052 tokens x 48 B."""
    sc, _ = _c3("c3-dsr1-a3-128-gloo-ray")
    assert dispatched_bytes_per_sequence(sc, "ref") == 24 * 4096 + 8 * 1024 + 16 * 3072 == 155_648
    assert dispatched_bytes_per_sequence(sc, "update") == 155_648 + 20 * 3072 == 217_088
    c8 = load_scenario(SCENARIOS / "c8-dapo-qwen25-math-7b-h20-32.yaml")
    assert dispatched_bytes_per_sequence(c8, "old_log_prob") == 24 * 30720 + 8 * 2048 + 20 * 28672 == 1_327_104
    assert dispatched_bytes_per_sequence(c8, "update") == 1_327_104 + 20 * 28672 == 1_900_544
    pulled = sc.model_copy(update={"software": sc.software.model_copy(update={"framework": "mindspeed_rl"})})
    assert dispatched_bytes_per_sequence(pulled, "update") == pytest.approx(3127 * 48)


def test_ray_dispatch_is_per_worker_plus_each_workers_share_serialised():
    pf = reference_profile("a3")
    sc, lay = _c3("c3-dsr1-a3-128-gloo-ray")
    # 8192 responses x 217,088 B over DP 8 = 0.22230 GB per worker; 256 workers (dies) one after another
    share = 8192 * 217_088 / 8 / 1e9
    expected = 256 * (0.0652 + share * 0.931) + pf["worker_call_s"]
    assert dispatch_seconds(sc, pf, lay, 256, "update") == pytest.approx(expected, rel=1e-12)


def test_ray_minus_tensorcache_reproduces_c3s_measured_differences():
    """The reference values are solved from these two differences (the update's and the ref's batches), so
    this pins the solution: 66.7 s and 51.7 s, to the rounding of the two values (0.0652 s, 0.931 s/GB)."""
    pf = reference_profile("a3")
    ray, lay = _c3("c3-dsr1-a3-128-gloo-ray")
    d2d, _ = _c3("c3-dsr1-a3-128-gloo-d2d")
    for call, measured in (("update", 400.9 - 334.2), ("ref", 156.8 - 105.1)):
        gap = dispatch_seconds(ray, pf, lay, 256, call) - dispatch_seconds(d2d, pf, lay, 256, call)
        assert gap == pytest.approx(measured, abs=0.1)


def test_mindspeed_rls_workers_pull_their_shares_at_once():
    """MindSpeed-RL's TransferDock (software.framework mindspeed_rl): one worker's share at Ray's rate, not 256 in
    turn, and its store holds each sample at its own length: C3's update columns at the mean lengths (0.15370 GB a
    worker) take 0.0652 + 0.15370 x 0.931 s plus the worker-group call."""
    pf = reference_profile("a3")
    sc, lay = _c3("c3-dsr1-a3-128-gloo-ray")
    pulled = sc.model_copy(update={"software": sc.software.model_copy(update={"framework": "mindspeed_rl"})})
    share = 8192 * 3127 * 48 / 8 / 1e9
    expected = 0.0652 + share * 0.931 + pf["worker_call_s"]
    assert dispatch_seconds(pulled, pf, lay, 256, "update") == pytest.approx(expected, rel=1e-12)
    assert dispatch_seconds(sc, pf, lay, 256, "update") > 90 * expected  # verl: 69.7 s


def test_verl_06s_driver_fetches_outputs_and_compares_log_probs_after_the_old_policy_pass():
    """C8 at 32 GPUs on verl 0.6: 8192 x 28672 padded response elements; old_log_prob's outputs (log-probs and
    entropies, fp32) come back, the entropies are averaged and the rollout's log-probs compared with the trainer's;
    the ref pass brings its log-probs alone; the update nothing. Earlier verl: none of it apart from C3's terms."""
    pf = reference_profile("h20")
    sc = load_scenario(SCENARIOS / "c8-dapo-qwen25-math-7b-h20-32.yaml")
    elements = 8192 * 28672
    per_element = (pf["driver_entropy_ns_per_element"] + pf["driver_debug_ns_per_element"]) * 1e-9
    assert collect_seconds(sc, pf, "old_log_prob") == pytest.approx(
        elements * 8 / 1e9 * pf["driver_get_s_per_gb"] + elements * per_element, rel=1e-12)
    assert collect_seconds(sc, pf, "ref") == pytest.approx(elements * 4 / 1e9 * pf["driver_get_s_per_gb"], rel=1e-12)
    assert collect_seconds(sc, pf, "update") == 0.0
    older = sc.model_copy(update={"software": sc.software.model_copy(update={"verl": "0.5.0"})})
    assert collect_seconds(older, pf, "old_log_prob") == 0.0


def test_dapos_filter_scores_every_generated_round():
    """Qwen3-32B's DAPO on MindSpeed-RL (C5 family): 2 rounds x 32 prompts x 8 responses are scored, 512 of the mean
    response's tokens at the profile's per-token reward time, where the kept batch has 256."""
    from twin.cost_models.scheduling import driver_seconds

    pf = reference_profile("a3")
    sc = load_scenario(SCENARIOS / "c5-dapo-qwen3-32b-a3-16dies.yaml")
    wl = sc.workload
    assert (wl.gen_rounds, wl.generation_prompts, wl.n, wl.responses) == (2, 32, 8, 256)
    tokens = 512 * wl.response_len.mean
    assert driver_seconds(sc, pf)["reward"] == pytest.approx(tokens * pf["reward_us_per_token"] * 1e-6, rel=1e-12)
    assert pf["reward_us_per_token"] == pytest.approx(13.7 / (8192 * 3039.8) * 1e6, rel=1e-3)  # C1's reward stage


def test_ppo_calls_carry_the_critics_values_and_gae_walks_every_position():
    """C6's PPO (prompts to 2000, responses to 2000, the rollout's log-probs kept, no KL): compute_values carries the
    old_log_prob call's 24 x 4000 + 8 x 2000 + 20 x 2000 B and the old log-probs (4 x 2000): 160,000 B; the updates
    carry scores, rewards, advantages, returns and the values (fp32) on top: 200,000 B; the critic hands back one fp32
    value a position. GAE's loop: 2000 positions x (22.5 us + 32 responses x 63.9 ns) = 49.09 ms."""
    from twin.cost_models.scheduling import driver_seconds, gae_seconds

    pf = reference_profile("a2")
    sc = load_scenario(SCENARIOS / "c6-ppo-qwen3-8b-a2-8-fsdp.yaml")
    assert dispatched_bytes_per_sequence(sc, "old_log_prob") == 24 * 4000 + 8 * 2000 + 20 * 2000 == 152_000
    assert dispatched_bytes_per_sequence(sc, "values") == 152_000 + 4 * 2000 == 160_000
    assert dispatched_bytes_per_sequence(sc, "update_critic") == dispatched_bytes_per_sequence(sc, "update") == (
        160_000 + 20 * 2000)
    assert gae_seconds(sc, pf) == pytest.approx(2000 * (22.5e-6 + 32 * 63.9e-9), rel=1e-12)
    grpo = sc.model_copy(update={"workload": sc.workload.model_copy(update={"algorithm": "grpo"})})
    assert driver_seconds(sc, pf)["advantage"] - driver_seconds(grpo, pf)["advantage"] == pytest.approx(
        gae_seconds(sc, pf), rel=1e-12)
    assert dispatched_bytes_per_sequence(grpo, "update") == 152_000 + 4 * 2000 + 16 * 2000  # no values
