"""The band of a prediction (DESIGN 4.3): the profile's leave-one-case-out error, and the dimensions in
which a scenario leaves what the fitting cases covered."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from twin.evaluate import Evaluation
from twin.profile import CrossValidation, embedded_profile
from twin.scenario import load_scenario
from twin.uncertainty import domain_of, outside, uncertainty_for

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = ROOT / "scenarios"
CV = CrossValidation(cases=["a", "b"], step_rel_error=0.1, stages_rel_error={"rollout": 0.2},
                     domain={"model_family": ["deepseek_v3"], "seq_len": [2048.0, 3072.0], "cards": [128.0, 128.0],
                             "cluster_kind": ["a3"]})


def test_band_from_the_cross_validated_error():
    sc = load_scenario(SCENARIOS / "c1-dsr1-a3-128.yaml")
    cv = CV.model_copy(update={"domain": domain_of([sc])})
    profile = embedded_profile("a3").model_copy(update={"cross_validation": cv})
    result = Evaluation(sc, profile).analytical()
    u = result.uncertainty
    assert u is not None and u.in_domain and u.outside == []
    assert u.step_s == pytest.approx((result.step_s * 0.9, result.step_s * 1.1))
    assert u.stages_s["rollout"] == pytest.approx((result.stages_s["rollout"] * 0.8, result.stages_s["rollout"] * 1.2))
    assert u.stages_s["update"] == pytest.approx((result.stages_s["update"] * 0.9, result.stages_s["update"] * 1.1))
    assert uncertainty_for(result, sc, embedded_profile("a3").model_copy(update={"cross_validation": None})) is None


def test_a_scenario_outside_the_fitting_domain_names_each_dimension():
    qwen = load_scenario(SCENARIOS / "c5-qwen25-7b-a3-16dies.yaml")
    assert outside(qwen, CV.domain) == [
        "model family qwen2 not among the fitted deepseek_v3",
        "sequence length 4096 outside the fitted 2048-3072",
        "scale (cards) 8 outside the fitted 128-128",
    ]
    c1 = load_scenario(SCENARIOS / "c1-dsr1-a3-128.yaml")
    assert outside(c1, domain_of([c1, qwen])) == []
    assert domain_of([c1, qwen])["cards"] == [8.0, 128.0]


def test_simulate_json_carries_the_band():
    out = subprocess.run([sys.executable, "-m", "twin", "simulate", str(SCENARIOS / "c1-dsr1-a3-128.yaml"), "--json"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    u = json.loads(out.stdout)["uncertainty"]
    assert u["in_domain"] and u["outside"] == [] and "leave-one-case-out" in u["basis"]
    lo, hi = u["step_s"]
    assert lo < json.loads(out.stdout)["step_s"] < hi


def test_a_critic_no_fitting_case_trained_leaves_the_domain_and_an_older_domain_does_not_check_it():
    """PPO's critic passes are costed only where a fitting case trained one: a PPO scenario against a GRPO/DAPO
    domain names the algorithm; a domain recorded before the algorithm was a dimension does not check it."""
    ppo = load_scenario(SCENARIOS / "c6-ppo-qwen3-8b-a2-8-fsdp.yaml")
    gspo = load_scenario(SCENARIOS / "c6-gspo-qwen3-8b-a2-8-fsdp.yaml")
    domain = domain_of([gspo])
    assert domain["algorithm"] == ["grpo"]
    assert outside(ppo, domain) == ["sequence length 4000 outside the fitted 4096-4096",  # 2000 + 2000 against 2048 x 2
                                    "algorithm ppo not among the fitted grpo"]
    assert outside(ppo, {k: v for k, v in domain.items() if k != "algorithm"}) == [
        "sequence length 4000 outside the fitted 4096-4096"]
