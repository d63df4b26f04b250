"""Ranking with the uncertainty band: --risk p90 ranks by each step's 90th percentile, composed of its stages'
bands, and bands that overlap are said to overlap instead of ranked as if the difference were known."""

import pytest

from twin.explain import bands_overlap, risk_key, step_p90, why
from twin.planner import Planner, default_scenario, layout_group, search
from twin.results import Uncertainty
from twin.uncertainty import P90_OF_MEAN_ABS

SC = default_scenario("qwen2.5-7b", "a3", 8)


def with_band(r, lo: float, hi: float):
    return r.model_copy(update={"uncertainty": Uncertainty(step_s=(r.step_s * lo, r.step_s * hi), basis="test",
                                                           in_domain=True)})


def test_risk_key_and_overlap_on_hand_made_bands():
    base = search(Planner(SC), 1).ranked[0].model_copy(update={"uncertainty": None})
    a, b = with_band(base, 0.9, 1.1), with_band(base.model_copy(update={"step_s": base.step_s * 1.3}), 0.95, 1.05)
    assert risk_key(a, "p50") == base.step_s
    assert risk_key(a, "p90") == pytest.approx(base.step_s * (1 + 0.1 * P90_OF_MEAN_ABS))
    assert risk_key(base, "p90") == base.step_s  # no band: the prediction itself
    assert bands_overlap(a, b) is False and bands_overlap(a, with_band(base, 1.05, 1.2)) is True
    assert bands_overlap(a, base) is None


def test_p90_changes_the_ranking_when_bands_differ():
    p50 = search(Planner(SC), 40)
    first = p50.plan.layout
    s1, s2 = p50.ranked[0].step_s, p50.ranked[1].step_s
    # the winner's band reaches 0.5 % below the second's prediction (inside the second's band, 1 % either side): its
    # p90, 1.606 of that half-width above it, lands about 3 % above the second's p90
    wide = 0.995 * s2 / s1

    def banded(ev):  # the p50 winner's predictions (its layout at every utilization step) are the least certain
        r = ev.analytical(alternatives=False)
        return with_band(r, 0.97, wide) if layout_group(ev.layout) == layout_group(first) else with_band(r, 0.99, 1.01)

    # as many places as the p50 search ranked: the layouts within 3 % of the second rank come between it and the p50
    # winner, whose p90 still ranks it among them
    p90 = search(Planner(SC, risk="p90"), len(p50.ranked), finalize=banded)
    assert p90.plan.risk == "p90" and p90.plan.layout == p50.plan.runner_ups[0].layout
    keys = [e.key for e in p90.evaluated]
    assert keys == sorted(keys) and keys[0] == step_p90(p90.ranked[0])
    lost = next(u for u in p90.plan.runner_ups if u.layout == first)
    assert lost.versus.band_overlap is True and "faster at p50" in lost.why_lost
    assert "the bands overlap" in lost.why_lost
    same = search(Planner(SC), 3, finalize=banded)  # p50 with the same bands keeps the p50 order
    assert same.plan.layout == first


def test_why_says_when_the_difference_is_not_known():
    out = search(Planner(SC), 2, finalize=lambda ev: with_band(ev.analytical(alternatives=False), 0.5, 1.5))
    ru = out.plan.runner_ups[0]
    assert ru.versus.band_overlap is True
    assert why(ru.versus, out.ranked[0], "p50").endswith("the difference is within the model's error, not known")


def test_p90_by_hand():
    """A normal error whose mean absolute value is m has its 90th percentile 1.2816 x sqrt(pi/2) m = 1.606 m above
    the prediction; m is the step band's half-width or, where larger, the sum of the stages', so of two layouts with
    one step and one step band the one whose time sits in the less certain stage has the higher p90."""
    assert abs(P90_OF_MEAN_ABS - 1.6062) < 1e-4
    base = search(Planner(SC), 1).ranked[0]
    stages = {"rollout": 60.0, "update": 30.0, "offload": 10.0}

    def shaped(bands: dict[str, float]):
        r = base.model_copy(update={"stages_s": stages, "step_s": 100.0})
        u = Uncertainty(step_s=(90.0, 110.0), basis="test", in_domain=True,
                        stages_s={k: (v * (1 - bands[k]), v * (1 + bands[k])) for k, v in stages.items()})
        return r.model_copy(update={"uncertainty": u})

    certain_rollout = shaped({"rollout": 0.02, "update": 0.05, "offload": 0.35})  # stages 1.2 + 1.5 + 3.5 = 6.2 s
    uncertain_rollout = shaped({"rollout": 0.2, "update": 0.05, "offload": 0.05})  # 12 + 1.5 + 0.5 = 14 s
    assert step_p90(certain_rollout) == pytest.approx(100.0 + P90_OF_MEAN_ABS * 10.0)  # the step band's 10 s
    assert step_p90(uncertain_rollout) == pytest.approx(100.0 + P90_OF_MEAN_ABS * 14.0)
    assert risk_key(certain_rollout, "p90") < risk_key(uncertain_rollout, "p90")
    assert risk_key(certain_rollout, "p50") == risk_key(uncertain_rollout, "p50") == 100.0
