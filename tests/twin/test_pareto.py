"""`twin plan --pareto`: the non-dominated set on step time, headroom, reshard volume (and cost when the card
count varies), hand-made and from a real search, and its plot."""

from types import SimpleNamespace

from twin.layout.models import Layout, RolloutLayout, TrainLayout
from twin.pareto import front, non_dominated, plot_front, point
from twin.plan import ParetoPoint
from twin.planner import (
    Candidate,
    Planner,
    default_scenario,
    evaluate_front,
    layout_group,
    same_pair,
    screen_front,
    search,
)


def analytical(ev):
    return ev.analytical(alternatives=False)


LAYOUT = Layout(train=TrainLayout(), rollout=RolloutLayout())


def pt(step: float, headroom: float, reshard: int, cards: int = 8) -> ParetoPoint:
    return ParetoPoint(layout=LAYOUT, cards=cards, step_s=step, headroom_fraction=headroom, reshard_bytes_total=reshard,
                       card_hours_per_step=cards * step / 3600)


def test_non_dominated_hand_made():
    pts = [(1, 3), (2, 2), (3, 1), (2, 3), (3, 3), (1, 3)]
    assert non_dominated(pts, lambda p: p) == [(1, 3), (2, 2), (3, 1), (1, 3)]  # equal points both stay
    assert non_dominated([], lambda p: p) == []


def test_front_axes():
    fast, safe, light, worse = pt(100, 0.05, 50), pt(120, 0.20, 50), pt(130, 0.05, 1), pt(130, 0.04, 60)
    assert front([worse, light, safe, fast]) == [fast, safe, light]  # fastest first, `worse` dominated
    big, small = pt(100, 0.1, 10, cards=16), pt(150, 0.1, 10, cards=8)  # 0.44 vs 0.33 card-hours per step
    assert front([big, small]) == [big, small]  # the cost axis appears only when the card count varies
    assert front([big, small.model_copy(update={"cards": 16, "card_hours_per_step": 16 * 150 / 3600})]) == [big]


def dominates(a: ParetoPoint, b: ParetoPoint) -> bool:
    ka, kb = ((p.step_s, -p.headroom_fraction, p.reshard_bytes_total) for p in (a, b))
    return all(x <= y for x, y in zip(ka, kb, strict=True)) and ka != kb


def test_front_of_a_search_is_non_dominated_and_trades_headroom():
    sc = default_scenario("qwen2.5-7b", "a3", 8)
    short = sc.workload.response_len.model_copy(update={"mean": 512.0, "max": 1024})
    planner = Planner(sc.model_copy(update={"workload": sc.workload.model_copy(update={"response_len": short})}))
    out = search(planner, 3)  # short responses: a typical batch fits at several utilization steps
    evaluate_front([(planner, out)], analytical)
    everything = [point(e.layout, e.result, e.layout == out.plan.layout) for e in out.evaluated]
    pts = front(everything)
    assert all(not any(dominates(o, p) for o in everything) for p in pts)
    assert all(any(dominates(p, o) for p in pts) for o in everything if o not in pts)
    assert sum(p.chosen for p in everything) == 1
    chosen = next(p for p in everything if p.chosen)
    steps = [p for p in everything if layout_group(p.layout) == layout_group(chosen.layout)]
    plan = out.distinct()[0].candidate
    tried = planner.utilizations(plan.train.parts["rollout"], plan.rollout.memory)
    got = {p.layout.rollout.gpu_memory_utilization for p in steps}
    # every step that keeps the headroom: the highest ones leave too little beside vLLM's graph pools
    assert len(steps) == len(got) > 1 and got <= set(tried)
    assert all(u > max(got) for u in set(tried) - got)
    # every utilization step of the plan's pair was evaluated: its headroom is a choice
    assert chosen in pts and chosen.step_s == min(p.step_s for p in steps)


_index = iter(range(10**6))


def cand(bound: float, peak_gb: float) -> Candidate:
    return Candidate(bound, next(_index), None, None, 0.9, peak_gb)


def searched(cards: int, pending: list[Candidate]) -> tuple[SimpleNamespace, SimpleNamespace]:
    """What screen_front reads of a search: the planner's HBM and card count, the outcome's pending candidates."""
    return (SimpleNamespace(capacity_gb=64, sc=SimpleNamespace(cluster=SimpleNamespace(cards=cards))),
            SimpleNamespace(pending=list(pending)))


def test_screen_front_sweeps_each_card_count_and_compares_across():
    small = [cand(100, 50), cand(110, 40), cand(105, 45), cand(120, 45), cand(130, 30), cand(100, 55)]
    [only] = screen_front([searched(8, small)])
    assert only == non_dominated(sorted(small), lambda c: (c.bound_s, c.peak_gb))
    assert [c.bound_s for c in only] == [100, 105, 110, 130]
    # 16 cards at 55 s and 20 GB: 880 card-seconds, so it dominates 110 s (880) and 130 s (1040) at 8 cards,
    # not 100 s (800) nor 105 s (840), which cost less
    killer = cand(55, 20)
    f8, f16 = screen_front([searched(8, small), searched(16, [killer])])
    assert [c.bound_s for c in f8] == [100, 105] and f16 == [killer]


def test_front_evaluations_are_capped_per_card_count_and_say_so():
    planner = Planner(default_scenario("qwen2.5-7b", "a3", 8))
    out = search(planner, 2)
    plan = out.distinct()[0].candidate
    own_steps = sum(1 for c in out.pending if same_pair(c, plan))  # the plan's own utilization steps, beside the cap
    # the front the cap applies to: the plan's own steps are evaluated first and leave it
    before = out.summary.simulated
    front_size = sum(1 for c in screen_front([(planner, out)])[0] if not same_pair(c, plan))
    assert front_size > 2
    evaluate_front([(planner, out)], analytical, cap=2)
    assert out.summary.simulated - before == 2 + own_steps
    assert out.summary.front_stopped.startswith(f"2 of the {front_size} screened candidates on the Pareto front "
                                                "evaluated in full (the most per card count), fastest first")


def test_plot_writes_a_png(tmp_path):
    pts = [pt(100, 0.05, 50_000_000_000), pt(120, 0.2, 10_000_000_000).model_copy(update={"chosen": True}),
           pt(130, 0.02, 60_000_000_000, cards=16)]
    path = tmp_path / "front.png"
    plot_front(pts, front(pts), path, "test")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
