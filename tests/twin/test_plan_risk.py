"""Ranking with the uncertainty band: --risk p90 ranks by the upper end of each step-time band, and bands
that overlap are said to overlap instead of ranked as if the difference were known."""

from twin.explain import bands_overlap, risk_key, why
from twin.planner import Planner, default_scenario, layout_group, search
from twin.results import Uncertainty

SC = default_scenario("qwen2.5-7b", "a3", 8)


def with_band(r, lo: float, hi: float):
    return r.model_copy(update={"uncertainty": Uncertainty(step_s=(r.step_s * lo, r.step_s * hi), basis="test",
                                                           in_domain=True)})


def test_risk_key_and_overlap_on_hand_made_bands():
    base = search(Planner(SC), 1).ranked[0].model_copy(update={"uncertainty": None})
    a, b = with_band(base, 0.9, 1.1), with_band(base.model_copy(update={"step_s": base.step_s * 1.3}), 0.95, 1.05)
    assert risk_key(a, "p50") == base.step_s and risk_key(a, "p90") == base.step_s * 1.1
    assert risk_key(base, "p90") == base.step_s  # no band: the prediction itself
    assert bands_overlap(a, b) is False and bands_overlap(a, with_band(base, 1.05, 1.2)) is True
    assert bands_overlap(a, base) is None


def test_p90_changes_the_ranking_when_bands_differ():
    p50 = search(Planner(SC), 3)
    first = p50.plan.layout
    s1, s2 = p50.ranked[0].step_s, p50.ranked[1].step_s
    wide = 1.02 * s2 / s1  # the winner's p90 lands 2 % above the second's prediction, whose p90 is 1 % above it

    def banded(ev):  # the p50 winner's predictions (its layout at every utilization step) are the least certain
        r = ev.analytical(alternatives=False)
        return with_band(r, 0.97, wide) if layout_group(ev.layout) == layout_group(first) else with_band(r, 0.99, 1.01)

    # five places: candidates within 0.1 % of the second may rank between it and the p50 winner
    p90 = search(Planner(SC, risk="p90"), 5, finalize=banded)
    assert p90.plan.risk == "p90" and p90.plan.layout == p50.plan.runner_ups[0].layout
    keys = [e.key for e in p90.evaluated]
    assert keys == sorted(keys) and keys[0] == p90.ranked[0].uncertainty.step_s[1]
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
