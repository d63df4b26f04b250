"""The planner's memory headroom: its default from the profile, the candidates it removes, and the
gpu_memory_utilization chosen with it."""

import math

import pytest

from twin.cost_models.memory import RolloutMemory
from twin.errors import TwinError
from twin.layout.models import RolloutLayout
from twin.planner import Planner, default_headroom, default_scenario, search
from twin.profile import CrossValidation, embedded_profile
from twin.uncertainty import P95_ABS_OF_MEAN_ABS

SC = default_scenario("qwen2.5-7b", "a3", 8)


def test_default_headroom_from_the_profile():
    a3 = embedded_profile("a3")
    assert a3.cross_validation is None or a3.cross_validation.memory_rel_error is None  # no memory cross-validated
    assert default_headroom(a3)[0] == a3.params["memory_headroom_fraction"].value == 0.074
    cv = a3.model_copy(update={"cross_validation": CrossValidation(cases=["c1"], step_rel_error=0.1,
                                                                    memory_rel_error=0.05)})
    assert pytest.approx(1.96 / math.sqrt(2 / math.pi), rel=1e-15) == P95_ABS_OF_MEAN_ABS
    assert default_headroom(cv)[0] == 0.05 * P95_ABS_OF_MEAN_ABS
    bare = a3.model_copy(update={"params": {k: v for k, v in a3.params.items() if k != "memory_headroom_fraction"}})
    with pytest.raises(TwinError, match="pass --headroom"):
        default_headroom(bare)
    for kind in ("a2", "a3", "cpu", "h20"):
        assert embedded_profile(kind)["memory_headroom_fraction"] > 0


def test_utilization_keeps_the_headroom_in_the_rollout_phase():
    p = Planner(SC, headroom=0.2)
    assert p.capacity_gb == 65.79  # an A3 die's allocator capacity
    assert p.limit_gb == p.capacity_gb * 0.8
    assert p.utilization(4.0) == 0.7  # (52.632 - 4) / 65.79 = 0.7392, down to the 0.05 step
    assert Planner(SC, headroom=0.0).utilization(4.0) == 0.9  # capped at vLLM's 0.9
    assert p.utilization(60.0) <= 0


def test_utilization_steps_run_from_the_top_to_the_typical_batch():
    p = Planner(SC, headroom=0.0)
    wl = SC.workload
    lay = RolloutLayout(tp=1, dp=16, max_num_seqs=4, gpu_memory_utilization=0.9)
    rm = RolloutMemory(p.inv, lay, p.profile, p.capacity_gb)
    steps = p.utilizations(4.0, rm)
    typical = 4 * (wl.prompt_len.mean + wl.response_len.mean)  # 4 sequences of the mean length at once
    assert steps[0] == p.utilization(4.0) == 0.9
    assert steps == [round(0.9 - 0.05 * i, 2) for i in range(len(steps))]  # every 0.05 step, largest first
    assert all(rm.kv_tokens(u) >= typical for u in steps) and len(steps) > 1
    assert rm.kv_tokens(round(steps[-1] - 0.05, 2)) < typical
    seqs = int(rm.kv_tokens(0.9) / (typical / 4)) + 1  # more mean-length sequences than the top step holds ...
    wide = RolloutMemory(p.inv, lay.model_copy(update={"max_num_seqs": seqs}), p.profile, p.capacity_gb)
    assert wide.kv_tokens(0.9) < seqs * typical / 4 and wide.kv_tokens(0.9) >= wl.max_seq_len
    assert p.utilizations(4.0, wide) == [0.9]  # ... so the top step alone, while it holds one full sequence
    assert p.utilizations(60.0, rm) == []  # nothing left for vLLM


def test_headroom_removes_candidates_and_lowers_the_utilization():
    loose, tight = search(Planner(SC, headroom=0.0), 3), search(Planner(SC, headroom=0.25), 3)
    assert tight.summary.pairs_fitting < loose.summary.pairs_fitting
    limit = tight.plan.predictions.capacity_gb * 0.75
    assert all(r.memory_peak_gb_max <= limit for r in tight.ranked)
    assert any(r.memory_peak_gb_max > limit for r in loose.ranked)
    assert tight.plan.layout.rollout.gpu_memory_utilization < loose.plan.layout.rollout.gpu_memory_utilization
    assert tight.plan.headroom_fraction == 0.25 and tight.plan.headroom_source == "--headroom"
    assert any("less headroom" in reason for reason in tight.summary.rejected)


def test_headroom_must_be_a_fraction():
    with pytest.raises(TwinError, match="not a fraction of usable device memory"):
        Planner(SC, headroom=1.0)
