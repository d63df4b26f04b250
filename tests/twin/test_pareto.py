"""`twin plan --pareto`: the non-dominated set on step time, headroom, reshard volume (and cost when the card
count varies), hand-made and from a real search, and its plot."""

from twin.layout.models import Layout, RolloutLayout, TrainLayout
from twin.pareto import front, non_dominated, plot_front, point
from twin.plan import ParetoPoint
from twin.planner import HEADROOM_STEPS, HEADROOM_VARIANTS, Planner, default_scenario, search

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
    out = search(Planner(default_scenario("qwen2.5-7b", "a3", 8)), 3, front=True)
    everything = [point(e.layout, e.result, e.layout == out.plan.layout)
                  for e in (*out.evaluated, *out.headroom_variants)]
    pts = front(everything)
    assert all(not any(dominates(o, p) for o in everything) for p in pts)
    assert all(any(dominates(p, o) for p in pts) for o in everything if o not in pts)
    assert sum(p.chosen for p in everything) == 1
    assert 0 < len(out.headroom_variants) <= HEADROOM_VARIANTS * HEADROOM_STEPS
    best = out.evaluated[:HEADROOM_VARIANTS]
    for v in out.headroom_variants:  # the same layout as one of the best, with less utilization and memory
        parent = next(e for e in best if e.layout == v.layout.model_copy(update={"rollout": v.layout.rollout.model_copy(
            update={"gpu_memory_utilization": e.layout.rollout.gpu_memory_utilization})}))
        assert v.layout.rollout.gpu_memory_utilization < parent.layout.rollout.gpu_memory_utilization
        assert v.result.memory_peak_gb_max < parent.result.memory_peak_gb_max


def test_plot_writes_a_png(tmp_path):
    pts = [pt(100, 0.05, 50_000_000_000), pt(120, 0.2, 10_000_000_000).model_copy(update={"chosen": True}),
           pt(130, 0.02, 60_000_000_000, cards=16)]
    path = tmp_path / "front.png"
    plot_front(pts, front(pts), path, "test")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
