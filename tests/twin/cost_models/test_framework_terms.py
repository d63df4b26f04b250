"""verl's framework time per call and per response (the overhead job's terms) in the stages of a step."""

from __future__ import annotations

from pathlib import Path

import pytest

from twin.cost_models.scheduling import carries, driver_seconds, framework_seconds
from twin.evaluate import Evaluation
from twin.profile import Profile, embedded_profile, reference_profile
from twin.scenario import load_scenario
from twin.sim.step import StepSimulation

SCENARIOS = Path(__file__).resolve().parents[3] / "scenarios"
TERMS = {"agent_loop_s_per_response": 0.0125, "bypass_log_prob_call_s": 0.01, "bypass_log_prob_s_per_response": 1e-4,
         "advantage_call_s": 0.02, "advantage_s_per_response": 2e-4, "update_call_s": 0.05,
         "update_s_per_response": 0.002}


def _cpu(terms: dict[str, float]) -> Profile:
    base = embedded_profile("cpu")
    return base.with_values(terms, base.id)


def _scenario():
    """The CPU loop's scenario at 96 prompts x 4 = 384 responses."""
    sc = load_scenario(SCENARIOS / "cpu-tiny-grpo.yaml")
    return sc.model_copy(update={"workload": sc.workload.model_copy(update={"global_batch": 96})})


def _stages(profile: Profile):
    return StepSimulation(Evaluation(_scenario(), profile)).run(1)[0]


def test_a_stages_framework_time_is_its_call_plus_each_response():
    pf = _cpu(TERMS)
    assert framework_seconds(pf, "advantage", 384) == pytest.approx(0.02 + 384 * 2e-4, rel=1e-12)  # 0.0968 s
    assert framework_seconds(pf, "rollout", 384) == pytest.approx(384 * 0.0125, rel=1e-12)  # 4.8 s, no call term
    assert framework_seconds(pf, "update", 100) == pytest.approx(0.05 + 0.2, rel=1e-12)


def test_profiles_without_the_terms_get_nothing():
    for pf in (embedded_profile("a3"), embedded_profile("a2"), embedded_profile("h100"), reference_profile("a3")):
        assert not any(carries(pf, s) for s in ("rollout", "old_log_prob", "advantage", "update"))
        assert framework_seconds(pf, "update", 8192) == 0.0


def test_with_the_agent_loop_term_the_reward_is_inside_the_rollout_and_the_advantage_is_verls_stage():
    sc = _scenario()
    assert driver_seconds(sc, _cpu(TERMS)) == {"reward": 0.0, "advantage": pytest.approx(0.0968, rel=1e-12)}
    plain = driver_seconds(sc, embedded_profile("cpu"))  # placeholders 0: still carried, so the same form
    assert plain == {"reward": 0.0, "advantage": 0.0}


def test_the_engine_steps_beside_the_agent_loop_on_the_hosts_cores():
    """With the path keeping 1.5 of the host's 2 cores busy alone, the engine's 2 workers stepping beside it slow it
    (twin.cost_models.host_sharing); the round ends when the last request leaves the engine, and the trainer
    sees it half a poll later on average."""
    from twin.cost_models.host_sharing import shared_host_rollout

    profile = _cpu({**TERMS, "agent_loop_busy_cores": 1.5, "host_cores": 2.0})
    run = _stages(profile)
    parts = run.rollout.components_s
    sc, ev = _scenario(), Evaluation(_scenario(), profile)
    rc, wl = ev.rollout_cost, sc.workload
    prompt, mean = wl.prompt_len.mean, wl.response_len.mean
    prefill = float(rc.prefill_compute_s(prompt, prompt / 2))
    shared = shared_host_rollout(4.8, 384, 1.5, 2, 2, rc.request_host_s,
                                 lambda b: prefill + (mean + 1) * float(rc.decode_step(b, prompt + mean / 2).total))
    assert parts["agent_loop"] == pytest.approx(4.8, rel=1e-12)
    assert parts["agent_loop"] + parts["host_sharing"] == pytest.approx(shared.seconds, rel=1e-12)
    assert shared.slowdown > 1.0 and 0.0 < parts["engine_tail"] < 0.5
    busy = shared.seconds + parts["engine_tail"]
    poll = profile["rollout_poll_s"]  # 2 s
    assert run.split["rollout"] == pytest.approx(busy + poll / 2 + parts["rl_scheduling"], rel=1e-12)
    idle = _stages(_cpu({**TERMS, "agent_loop_busy_cores": 0.0, "host_cores": 64.0})).rollout.components_s
    assert idle["host_sharing"] == 0.0  # cores to spare: the path as it ran alone


def test_only_the_paths_time_before_its_last_hand_over_shares_the_cores_with_the_engine():
    """With 3/4 of the path's 4.8 s before its last hand-over, the engine steps beside those 3.6 s (as a path of
    3.6 s alone would have it); the remaining 1.2 s of the path run after, overlapping the last request's stay."""
    from twin.cost_models.host_sharing import shared_host_rollout

    profile = _cpu({**TERMS, "agent_loop_busy_cores": 1.5, "agent_loop_arrival_share": 0.75, "host_cores": 2.0})
    parts = _stages(profile).rollout.components_s
    rc, wl = Evaluation(_scenario(), profile).rollout_cost, _scenario().workload
    prompt, mean = wl.prompt_len.mean, wl.response_len.mean
    prefill = float(rc.prefill_compute_s(prompt, prompt / 2))
    shared = shared_host_rollout(3.6, 384, 1.5, 2, 2, rc.request_host_s,
                                 lambda b: prefill + (mean + 1) * float(rc.decode_step(b, prompt + mean / 2).total))
    assert parts["agent_loop"] == pytest.approx(4.8, rel=1e-12)
    assert parts["host_sharing"] == pytest.approx(shared.seconds - 3.6, rel=1e-12)
    assert parts["engine_tail"] == 0.0  # the last request is back well within the path's last 1.2 s
    # the requests come faster (the engine busier beside the path), but over less of the path: a shorter round
    whole = _stages(_cpu({**TERMS, "agent_loop_busy_cores": 1.5, "host_cores": 2.0})).rollout.components_s
    assert shared.slowdown > 1 + whole["host_sharing"] / 4.8
    assert sum(parts.values()) < sum(whole.values())


def test_bypass_old_log_prob_and_update_gain_their_terms():
    zero, with_terms = _stages(_cpu({})), _stages(_cpu(TERMS))
    assert zero.stages_s["old_log_prob"] == 0.0
    assert with_terms.stages_s["old_log_prob"] == pytest.approx(0.01 + 384 * 1e-4, rel=1e-12)  # 0.0484 s
    assert with_terms.stages_s["update"] - zero.stages_s["update"] == pytest.approx(0.05 + 384 * 0.002, rel=1e-9)


def test_the_closed_form_carries_the_same_framework_terms_as_the_simulation():
    profile = _cpu({**TERMS, "agent_loop_busy_cores": 1.5, "host_cores": 2.0})
    ev = Evaluation(_scenario(), profile)
    closed, simulated = ev.stage_times(), _stages(profile).stages_s
    assert closed["rollout"] == pytest.approx(simulated["rollout"], rel=1e-12)  # one agent-loop round, polled
    assert closed["old_log_prob"] == pytest.approx(0.01 + 384 * 1e-4, rel=1e-12)  # the bypass copy
    assert closed["update"] == pytest.approx(simulated["update"], rel=0.02)
    assert closed["update"] - Evaluation(_scenario(), _cpu({})).stage_times()["update"] == pytest.approx(
        0.05 + 384 * 0.002, rel=1e-9)
