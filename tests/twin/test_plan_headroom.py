"""The planner's memory headroom: its default from the profile, the candidates it removes, and the
gpu_memory_utilization chosen with it."""

import math

import pytest

from twin.cost_models.memory import RolloutMemory
from twin.errors import TwinError
from twin.layout.models import RolloutLayout
from twin.planner import P95_OF_MEAN_ABS, Planner, default_headroom, default_scenario, search
from twin.profile import CrossValidation, embedded_profile

SC = default_scenario("qwen2.5-7b", "a3", 8)


def test_default_headroom_from_the_profile():
    a3 = embedded_profile("a3")
    assert a3.cross_validation is None or a3.cross_validation.memory_rel_error is None  # no memory cross-validated
    assert default_headroom(a3)[0] == a3.params["memory_headroom_fraction"].value == 0.074
    cv = a3.model_copy(update={"cross_validation": CrossValidation(cases=["c1"], step_rel_error=0.1,
                                                                    memory_rel_error=0.05)})
    assert P95_OF_MEAN_ABS == 1.96 / math.sqrt(2 / math.pi)  # noqa: SIM300 (the constant under test first)
    assert default_headroom(cv)[0] == 0.05 * P95_OF_MEAN_ABS
    bare = a3.model_copy(update={"params": {k: v for k, v in a3.params.items() if k != "memory_headroom_fraction"}})
    with pytest.raises(TwinError, match="pass --headroom"):
        default_headroom(bare)
    for kind in ("a2", "a3", "cpu", "h20"):
        assert embedded_profile(kind)["memory_headroom_fraction"] > 0


def test_utilization_keeps_the_headroom_in_the_rollout_phase():
    p = Planner(SC, headroom=0.2)
    assert p.limit_gb == 64 * 0.8
    assert p.utilization(4.0) == 0.7  # (51.2 - 4) / 64 = 0.7375, down to the 0.05 step
    assert Planner(SC, headroom=0.0).utilization(4.0) == 0.9  # capped at vLLM's 0.9
    assert p.utilization(60.0) <= 0


def test_utilization_stops_where_the_kv_cache_holds_every_running_sequence():
    p = Planner(SC, headroom=0.0)
    lay = RolloutLayout(tp=1, dp=16, max_num_seqs=4, gpu_memory_utilization=0.9)
    rm = RolloutMemory(p.inv, lay, p.profile, p.hbm_gb)
    need = 4 * SC.workload.max_seq_len  # 4 sequences of the longest length at once per replica
    util = p.utilization(4.0, rm)
    assert rm.kv_tokens(util) >= need and rm.kv_tokens(round(util - 0.05, 2)) < need
    assert util < p.utilization(4.0) == 0.9  # the room would allow 0.9; a larger cache is never used
    wide = lay.model_copy(update={"max_num_seqs": 100_000})  # a cache that is never enough: the room decides
    assert p.utilization(4.0, RolloutMemory(p.inv, wide, p.profile, p.hbm_gb)) == 0.9


def test_headroom_removes_candidates_and_lowers_the_utilization():
    loose, tight = search(Planner(SC, headroom=0.0), 3), search(Planner(SC, headroom=0.25), 3)
    assert tight.summary.pairs_fitting < loose.summary.pairs_fitting
    assert all(r.memory_peak_gb_max <= 64 * 0.75 for r in tight.ranked)
    assert any(r.memory_peak_gb_max > 64 * 0.75 for r in loose.ranked)
    assert tight.plan.layout.rollout.gpu_memory_utilization < loose.plan.layout.rollout.gpu_memory_utilization
    assert tight.plan.headroom_fraction == 0.25 and tight.plan.headroom_source == "--headroom"
    assert any("less headroom" in reason for reason in tight.summary.rejected)


def test_headroom_must_be_a_fraction():
    with pytest.raises(TwinError, match="not a fraction of HBM"):
        Planner(SC, headroom=1.0)
