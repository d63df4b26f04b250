"""verl's framework time per call and per response (the overhead job's terms) in the stages of a step."""

from __future__ import annotations

import math
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


def test_the_agent_loop_adds_to_the_engine_before_the_poll():
    zero, with_terms = _stages(_cpu({})), _stages(_cpu(TERMS))
    parts = zero.rollout.components_s
    engine = zero.stages_s["rollout"] - parts["poll_wait"] - parts["rl_scheduling"]
    poll = embedded_profile("cpu")["rollout_poll_s"]  # 2 s
    expected = math.ceil((engine + 4.8) / poll - 1e-9) * poll + parts["rl_scheduling"]
    assert with_terms.stages_s["rollout"] == pytest.approx(expected, rel=1e-12)
    assert with_terms.rollout.components_s["agent_loop"] == pytest.approx(4.8, rel=1e-12)


def test_bypass_old_log_prob_and_update_gain_their_terms():
    zero, with_terms = _stages(_cpu({})), _stages(_cpu(TERMS))
    assert zero.stages_s["old_log_prob"] == 0.0
    assert with_terms.stages_s["old_log_prob"] == pytest.approx(0.01 + 384 * 1e-4, rel=1e-12)  # 0.0484 s
    assert with_terms.stages_s["update"] - zero.stages_s["update"] == pytest.approx(0.05 + 384 * 0.002, rel=1e-9)
