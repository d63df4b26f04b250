"""Which timer reports each transition: the twin's split, or verl's own timers (twin.cost_models.timers)."""

from pathlib import Path

import pytest

from twin.cost_models.timers import MOMENT_TIMERS, as_timed, timed_note
from twin.cost_models.transition import OFFLOAD_MOMENTS, offload_moments, reshard_time
from twin.evaluate import Evaluation
from twin.scenario import Software, load_scenario
from twin.sim.step import StepSimulation

SPLIT = {"rollout": 100.0, "reward": 1.0, "old_log_prob": 10.0, "ref": 5.0, "advantage": 0.1, "update": 50.0,
         "reshard": 3.0, "offload": 7.0}
MOMENTS = {**dict.fromkeys(OFFLOAD_MOMENTS, 0.0), "after_rollout": 1.0, "log_prob_onload": 0.5,
           "log_prob_offload": 0.5, "ref_onload": 0.25, "ref_offload": 0.25, "before_update": 1.0,
           "after_update": 2.0, "before_reshard": 0.75, "after_reshard": 0.75}  # 7 s, the split's offload


def test_every_offload_moment_has_the_timer_that_holds_it():
    assert MOMENT_TIMERS.keys() == set(OFFLOAD_MOMENTS)


def test_a_run_verl_does_not_time_keeps_the_split():
    for software in (Software(), Software(framework="mindspeed_rl")):
        assert as_timed(SPLIT, MOMENTS, software) == SPLIT
        assert timed_note(SPLIT, SPLIT, software) is None


def test_verl_before_0_8_times_the_sync_and_its_offloads_in_gen():
    timed = as_timed(SPLIT, MOMENTS, Software(verl="0.6.0"))
    # gen: the rollout, its sleep (1), the sync (3) and the offloads around it (0.75 + 0.75)
    assert timed == pytest.approx({"rollout": 105.5, "reward": 1.0, "old_log_prob": 11.0, "ref": 5.5,
                                   "advantage": 0.1, "update": 53.0, "reshard": 0.0, "offload": 0.0}, abs=1e-12)
    assert sum(timed.values()) == pytest.approx(sum(SPLIT.values()), rel=1e-12)
    note = timed_note(SPLIT, timed, Software(verl="0.6.0"))
    assert "weight sync (3.00 s) and its offloads in gen" in note and "rollout +5.50 s" in note


def test_verl_from_0_8_times_the_sync_in_update_weights():
    timed = as_timed(SPLIT, MOMENTS, Software(verl="0.9.1"))
    assert timed["reshard"] == pytest.approx(4.5, rel=1e-12)
    assert timed["rollout"] == pytest.approx(101.0, rel=1e-12)
    assert timed["offload"] == 0.0
    assert "in update_weights" in timed_note(SPLIT, timed, Software(verl="0.9.1"))


def test_the_simulated_and_closed_form_steps_keep_their_length():
    """DeepSeek-V3 on 96 H20 names verl 0.5: its gen holds the rollout, its sleep, the sync and the offloads around
    the sync; the step is the split's sum."""
    sc = load_scenario(Path(__file__).resolve().parents[3] / "scenarios" / "c8-grpo-dsv3-h20-96.yaml")
    ev = Evaluation(sc)
    moments = offload_moments(ev.train_memory, ev.rollout_memory, sc, ev.cluster, ev.profile)
    in_gen = moments["after_rollout"] + moments["before_reshard"] + moments["after_reshard"]
    record = StepSimulation(ev).run(1)[0]
    split, timed = record.split, record.stages_s
    assert timed["reshard"] == 0.0 and timed["offload"] == 0.0 and split["reshard"] > 10.0
    assert timed["rollout"] == pytest.approx(split["rollout"] + split["reshard"] + in_gen, rel=1e-12)
    assert sum(timed.values()) == pytest.approx(sum(split.values()), rel=1e-12)
    closed = ev.stage_times()
    reshard = reshard_time(ev.reshard(), ev.cluster, ev.profile, ev.rollout_memory, ev.train_memory, sc)
    rollout = ev.rollout_cost.analytical_seconds(ev.memory_report.kv_tokens)
    assert closed["reshard"] == 0.0 and closed["offload"] == 0.0
    assert closed["rollout"] == pytest.approx(rollout + reshard + in_gen, rel=1e-12)
