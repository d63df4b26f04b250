"""`twin plan --pareto`: the candidates no other candidate beats on every axis, as a table and a PNG.

Axes, all minimized: step time, minus the memory headroom (the fraction of HBM the worst phase leaves
free), the reshard volume, and, when the card count varies, the cost in card-hours per step.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

from rich.console import Console
from rich.table import Table

from twin.explain import headroom_fraction, short
from twin.layout.models import Layout
from twin.plan import ParetoPoint
from twin.results import SimulationResult

T = TypeVar("T")


def non_dominated(items: Sequence[T], key: Callable[[T], tuple[float, ...]]) -> list[T]:
    """The items no other item is at least as good as on every axis and better on one (all minimized);
    items with equal axes are all kept."""
    axes = [key(i) for i in items]

    def dominates(a: tuple[float, ...], b: tuple[float, ...]) -> bool:
        return all(x <= y for x, y in zip(a, b, strict=True)) and a != b

    return [item for item, a in zip(items, axes, strict=True) if not any(dominates(b, a) for b in axes)]


def point(layout: Layout, r: SimulationResult, chosen: bool = False) -> ParetoPoint:
    return ParetoPoint(layout=layout, cards=r.cards, step_s=r.step_s, headroom_fraction=headroom_fraction(r),
                       reshard_bytes_total=r.reshard.bytes_total, card_hours_per_step=r.cards * r.step_s / 3600,
                       chosen=chosen)


def axes(p: ParetoPoint, with_cost: bool) -> tuple[float, ...]:
    base = (p.step_s, -p.headroom_fraction, float(p.reshard_bytes_total))
    return (*base, p.card_hours_per_step) if with_cost else base


def front(points: list[ParetoPoint]) -> list[ParetoPoint]:
    """The non-dominated points, fastest first (cost is an axis when the card count varies)."""
    with_cost = len({p.cards for p in points}) > 1
    return sorted(non_dominated(points, lambda p: axes(p, with_cost)), key=lambda p: p.step_s)


def print_front(console: Console, everything: list[ParetoPoint], pts: list[ParetoPoint]) -> None:
    """The front as a table, the chosen plan marked (and listed below the front when it is dominated)."""
    costly = len({p.cards for p in everything}) > 1
    table = Table(title=f"Pareto front: {len(pts)} of {len(everything)} layouts evaluated in full are not dominated on "
                        "step time, headroom, reshard volume" + (", card-hours" if costly else ""))
    for col in ("#", "cards", "layout", "step s", "headroom", "reshard GB", "card-h/step"):
        table.add_column(col, justify="left" if col in ("#", "layout") else "right")
    dominated = [p for p in everything if p.chosen and p not in pts]
    for i, p in enumerate([*pts, *dominated]):
        label = (str(i + 1) if i < len(pts) else "") + ("*" if p.chosen else "")
        table.add_row(label, str(p.cards), short(p.layout), f"{p.step_s:.1f}",
                      f"{p.headroom_fraction:.1%}", f"{p.reshard_bytes_total / 1e9:,.0f}",
                      f"{p.card_hours_per_step:.2f}", end_section=p is pts[-1] and bool(dominated))
    console.print(table)
    note = (" (below the line: dominated; the plan is the fastest at the chosen risk, with the largest utilization "
            "that keeps the headroom unless a smaller one already holds max_num_seqs longest sequences)"
            ) if dominated else ""
    console.print(f"# = the number on the plot; * = the chosen plan{note}")


def plot_front(everything: list[ParetoPoint], pts: list[ParetoPoint], path: Path, title: str) -> None:
    """Step time against headroom, colour = reshard volume; the front numbered as its table, the chosen plan
    starred, dominated layouts grey. One marker shape per card count."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    markers = dict(zip(sorted({p.cards for p in everything}), "os^Dv<>", strict=False))
    fig, ax = plt.subplots(figsize=(8, 5.5), dpi=120)
    on_front = {id(p) for p in pts}
    rest = [p for p in everything if id(p) not in on_front]
    for cards, m in markers.items():
        grey = [p for p in rest if p.cards == cards]
        ax.scatter([p.step_s for p in grey], [p.headroom_fraction * 100 for p in grey], c="lightgrey", marker=m,
                   s=25, label=f"dominated ({cards} cards)" if grey else None)
    vmax = max(p.reshard_bytes_total for p in everything) / 1e9 or 1.0
    sc = None
    for cards, m in markers.items():
        mine = [p for p in pts if p.cards == cards]
        if mine:
            sc = ax.scatter([p.step_s for p in mine], [p.headroom_fraction * 100 for p in mine],
                            c=[p.reshard_bytes_total / 1e9 for p in mine], cmap="viridis", vmin=0, vmax=vmax,
                            marker=m, s=60, edgecolors="black", label=f"Pareto front ({cards} cards)")
    for i, p in enumerate(pts):
        ax.annotate(str(i + 1), (p.step_s, p.headroom_fraction * 100), fontsize=8, xytext=(6, 4),
                    textcoords="offset points")
    chosen = [p for p in everything if p.chosen]
    if chosen:
        ax.scatter([chosen[0].step_s], [chosen[0].headroom_fraction * 100], marker="*", s=400, facecolors="none",
                   edgecolors="red", linewidths=1.5, label="chosen plan")
        ax.annotate(short(chosen[0].layout), (chosen[0].step_s, chosen[0].headroom_fraction * 100), fontsize=7,
                    xytext=(10, 10), textcoords="offset points", color="red")
    if sc is not None:
        fig.colorbar(sc, ax=ax, label="reshard volume per step, GB")
    ax.set_xlabel("predicted step time, s (lower is better)")
    ax.set_ylabel("memory headroom in the worst phase, % of HBM (higher is safer)")
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="center right")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
