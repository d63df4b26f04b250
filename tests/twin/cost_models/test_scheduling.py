"""Task dispatch before a worker-group call, against C3's measured Ray-minus-TensorCache differences."""

from pathlib import Path

import pytest

from twin.cost_models.scheduling import LOG_PROB_INPUT_BYTES_PER_TOKEN, UPDATE_INPUT_BYTES_PER_TOKEN, dispatch_seconds
from twin.profile import reference_profile
from twin.scenario import load_scenario

SCENARIOS = Path(__file__).resolve().parents[3] / "scenarios"


def _c3(name: str):
    sc = load_scenario(SCENARIOS / f"{name}.yaml")
    return sc, sc.layout.train


def test_ray_dispatch_is_per_worker_plus_each_workers_share_serialised():
    pf = reference_profile("a3")
    sc, lay = _c3("c3-dsr1-a3-128-gloo-ray")
    # 8192 responses x (1024 + 3072) tokens, padded to the limits as verl holds them, x 48 B over DP 8 = 0.20133 GB
    # per worker; 256 workers (dies)
    share = 8192 * 4096 * 48 / 8 / 1e9
    expected = 256 * (0.155 + share * 0.582) + pf["worker_call_s"]
    assert dispatch_seconds(sc, pf, lay, 256, UPDATE_INPUT_BYTES_PER_TOKEN) == pytest.approx(expected, rel=1e-12)


def test_ray_minus_tensorcache_reproduces_c3s_measured_differences():
    """The reference values are solved from these two differences (update 48 B/token, ref 24 B/token), so
    this pins the solution: 66.7 s and 51.7 s, to the rounding of the two values (0.155 s, 0.582 s/GB)."""
    pf = reference_profile("a3")
    ray, lay = _c3("c3-dsr1-a3-128-gloo-ray")
    d2d, _ = _c3("c3-dsr1-a3-128-gloo-d2d")
    for per_token, measured in ((UPDATE_INPUT_BYTES_PER_TOKEN, 400.9 - 334.2), (LOG_PROB_INPUT_BYTES_PER_TOKEN,
                                                                                 156.8 - 105.1)):
        gap = dispatch_seconds(ray, pf, lay, 256, per_token) - dispatch_seconds(d2d, pf, lay, 256, per_token)
        assert gap == pytest.approx(measured, abs=0.1)


def test_mindspeed_rls_workers_pull_their_shares_at_once():
    """MindSpeed-RL's TransferDock (software.framework mindspeed_rl): one worker's share at Ray's rate, not 256 in
    turn, and its store holds each sample at its own length: C3's update inputs at the mean lengths (0.15370 GB a
    worker) take 0.155 + 0.15370 x 0.582 s plus the worker-group call."""
    pf = reference_profile("a3")
    sc, lay = _c3("c3-dsr1-a3-128-gloo-ray")
    pulled = sc.model_copy(update={"software": sc.software.model_copy(update={"framework": "mindspeed_rl"})})
    share = 8192 * 3127 * 48 / 8 / 1e9
    expected = 0.155 + share * 0.582 + pf["worker_call_s"]
    assert dispatch_seconds(pulled, pf, lay, 256, UPDATE_INPUT_BYTES_PER_TOKEN) == pytest.approx(expected, rel=1e-12)
    assert dispatch_seconds(sc, pf, lay, 256, UPDATE_INPUT_BYTES_PER_TOKEN) > 90 * expected  # verl: 70.2 s


def test_dapos_filter_scores_every_generated_round():
    """Qwen3-32B's DAPO on MindSpeed-RL (C5 family): 2 rounds x 32 prompts x 8 responses are scored, 512 at the
    profile's per-response reward time, where the kept batch has 256."""
    from twin.cost_models.scheduling import driver_seconds

    pf = reference_profile("a3")
    sc = load_scenario(SCENARIOS / "c5-dapo-qwen3-32b-a3-16dies.yaml")
    wl = sc.workload
    assert (wl.gen_rounds, wl.generation_prompts, wl.n, wl.responses) == (2, 32, 8, 256)
    assert driver_seconds(sc, pf)["reward"] == pytest.approx(512 * pf["reward_ms_per_response"] * 1e-3, rel=1e-12)


def test_verl_ships_sequences_padded_to_the_limits_and_mindspeed_rl_at_their_lengths():
    """verl's driver holds every prompt left-padded to its limit and every response right-padded to its limit; the
    TransferDock keeps each sample at its own length: C3's 1024 + 3072 tokens against 75 + 3052."""
    from twin.cost_models.scheduling import dispatched_tokens_per_sequence

    sc, _ = _c3("c3-dsr1-a3-128-gloo-ray")
    assert dispatched_tokens_per_sequence(sc) == 4096
    pulled = sc.model_copy(update={"software": sc.software.model_copy(update={"framework": "mindspeed_rl"})})
    assert dispatched_tokens_per_sequence(pulled) == pytest.approx(3127)
