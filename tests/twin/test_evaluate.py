"""The scenario-level choices of twin/evaluate.py."""

from pathlib import Path

from twin.evaluate import Evaluation, reshard_method
from twin.scenario import load_scenario

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"


def test_the_reshard_method_follows_the_recipe_switch_then_the_framework():
    c1 = load_scenario(SCENARIOS / "c1-dsr1-a3-128.yaml")
    assert reshard_method(c1) == "directed"  # directed_reshard on
    plain = c1.model_copy(update={"optimizations": tuple(o for o in c1.optimizations if o != "directed_reshard")})
    assert reshard_method(plain) == "verl_bucketed"
    ms = load_scenario(SCENARIOS / "c5-dsr1-a3-384dies.yaml")
    assert reshard_method(ms) == "all_gather"  # MindSpeed-RL's ShardingManager
    assert Evaluation(ms).reshard().method == "all_gather"
