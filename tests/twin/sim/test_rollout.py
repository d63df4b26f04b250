"""Continuous batching, KV-limited admission and lockstep instances in the rollout simulation."""

from pathlib import Path

import numpy as np

from twin.evaluate import Evaluation
from twin.scenario import LengthDist, load_scenario
from twin.sim.rollout import simulate_rollout
from twin.sim.trace import Trace

SCENARIOS = Path(__file__).resolve().parents[3] / "scenarios"


def _rollout(sc, kv_tokens=None):
    ev = Evaluation(sc)
    kv = ev.memory_report.kv_tokens if kv_tokens is None else kv_tokens
    return simulate_rollout(ev.rollout_cost, kv, sc, np.random.default_rng(0), Trace(), 0.0)


def test_fixed_lengths_take_waves_of_max_num_seqs():
    sc = load_scenario(SCENARIOS / "c1-dsr1-a3-128.yaml")  # 64 responses per DP replica, max_num_seqs 64
    one_wave = _rollout(sc)
    assert one_wave.steps >= 3040 and one_wave.steps < 3040 + 10  # decode steps + a few prefill chunks
    halved = sc.model_copy(update={"layout": sc.layout.model_copy(update={
        "rollout": sc.layout.rollout.model_copy(update={"max_num_seqs": 32})})})
    two_waves = _rollout(halved)
    assert 2 * 3040 <= two_waves.steps < 2 * 3040 + 20


def test_a_small_kv_cache_limits_concurrency():
    sc = load_scenario(SCENARIOS / "c1-dsr1-a3-128.yaml")
    full = _rollout(sc)
    tight = _rollout(sc, kv_tokens=16 * (75 + 3040))  # room for 16 whole sequences
    assert tight.steps >= 4 * 3040 and tight.seconds > 2 * full.seconds


def test_lockstep_instances_run_until_their_longest_response():
    sc = load_scenario(SCENARIOS / "own-qwen3-30b-a3b-a3-16dies.yaml")  # one EP16 instance of 8 DP ranks
    out = _rollout(sc)
    assert len(out.instance_seconds) == 1
    wl = sc.workload.model_copy(update={"response_len": LengthDist(mean=2048, max=8192)})
    fixed = _rollout(sc.model_copy(update={"workload": wl}))
    assert out.steps > fixed.steps  # the tail of the lognormal draws drags the whole instance
