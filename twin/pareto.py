"""`twin plan --pareto`: the candidates no other candidate beats on every axis, as a table and a PNG.

Axes, all minimized: step time, minus the memory headroom (the fraction of usable device memory the worst phase leaves
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
    note = (" (below the line: the plan, dominated: it is ranked by the step time at the chosen risk alone, which "
            "another layout can tie with more headroom or less reshard volume)") if dominated else ""
    console.print(f"# = the number on the plot; * = the chosen plan{note}")


ZOOM = 0.05  # the right panel: the layouts within 5 % of the fastest step, where the choice is usually made
# label spots around a point, in points, nearest first; a label not at the first gets a leader line
_SPOTS = ((6, 4), (6, -11), (-16, 4), (-16, -11), (-5, 12), (-5, -20))
_OFFSETS = tuple((dx * r, dy * r) for r in (1, 2.5, 4) for dx, dy in _SPOTS)


def plot_front(everything: list[ParetoPoint], pts: list[ParetoPoint], path: Path, title: str) -> None:
    """Step time against headroom, colour = reshard volume, one marker shape per card count; the front numbered
    as its table, the chosen plan starred, dominated layouts grey. Left: every layout evaluated in full (step time
    on a log scale); right: those within ZOOM of the fastest step, where the front is dense."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    markers = dict(zip(sorted({p.cards for p in everything}), "os^Dv<>", strict=False))
    costly = len(markers) > 1
    fig, axes = plt.subplots(1, 3 if costly else 2, figsize=(19 if costly else 14, 6.5), dpi=120)
    full, zoom = axes[0], axes[1]
    fastest = min(p.step_s for p in everything)
    near = [p for p in everything if p.step_s <= fastest * (1 + ZOOM)]
    vmax = max(p.reshard_bytes_total for p in everything) / 1e9 or 1.0
    number = {id(p): i + 1 for i, p in enumerate(pts)}
    chosen = next((p for p in everything if p.chosen), None)
    panels = [(full, everything, "step_s"), (zoom, near, "step_s")]
    if costly:  # the fourth axis: what a step costs in card-hours, against the headroom
        panels.append((axes[2], everything, "card_hours_per_step"))
        axes[2].set_xscale("log")
        axes[2].set_xlabel("card-hours per step, log scale (lower is cheaper)")
        axes[2].set_title("cost: cards x step time", fontsize=9)
    for ax, shown, x in panels:
        sc = _scatter(ax, shown, number, markers, vmax, x)
        if chosen is not None and chosen in shown:
            ax.scatter([getattr(chosen, x)], [chosen.headroom_fraction * 100], marker="*", s=500, facecolors="none",
                       edgecolors="red", linewidths=1.6, label="chosen plan", zorder=4)
        ax.set_ylabel("memory headroom in the worst phase, % of usable memory (higher is safer)")
        ax.grid(alpha=0.3, which="both")
    full.set_xscale("log")
    plain = FuncFormatter(lambda v, _: f"{v:g}")  # 500, 1000, 2000 rather than 5 x 10^2
    for ax in axes[::2]:
        ax.xaxis.set_major_formatter(plain)
        ax.xaxis.set_minor_formatter(plain)
        ax.tick_params(axis="x", which="minor", labelsize=7)
    full.set_xlabel("predicted step time, s, log scale (lower is better)")
    full.set_title(f"all {len(everything)} layouts evaluated in full; {len(pts)} on the front (numbered)", fontsize=9)
    full.axvspan(fastest, fastest * (1 + ZOOM), color="gold", alpha=0.15, label=f"right panel: within {ZOOM:.0%}")
    zoom.set_xlabel("predicted step time, s (lower is better)")
    zoom.set_title(f"within {ZOOM:.0%} of the fastest step ({fastest:.0f} s)", fontsize=9)
    _label(full, [p for p in pts if p.step_s > fastest * (1 + ZOOM)], number)
    _label(zoom, [p for p in pts if p in near], number)
    if costly:
        _label(axes[2], pts, number, "card_hours_per_step")
    fig.colorbar(sc, cax=fig.add_axes((0.9, 0.16, 0.012, 0.70)), label="reshard volume per step, GB")
    handles, labels = full.get_legend_handles_labels()
    legend = fig.legend(handles, labels, loc="lower center", ncol=min(len(labels), 6), fontsize=8, frameon=False)
    for handle, text in zip(legend.legend_handles, labels, strict=True):
        if text.startswith("Pareto front"):  # the shape says the card count; the colour is the points' own
            handle.set_array(None)
            handle.set_facecolor("white")
    plan = f"chosen plan (red star): {short(chosen.layout)}, {chosen.cards} cards, {chosen.step_s:.0f} s, " \
           f"{chosen.headroom_fraction:.1%} headroom" if chosen else "no plan chosen"
    fig.suptitle(f"{title}\n{plan}", fontsize=10)
    fig.subplots_adjust(left=0.05, right=0.87, bottom=0.16, top=0.86, wspace=0.2)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)


def _scatter(ax, shown: list[ParetoPoint], number: dict[int, int], markers: dict[int, str], vmax: float, x: str):
    """Dominated layouts grey, the front coloured by reshard volume, one marker per card count; `x` the field on
    the horizontal axis."""
    sc = None
    for cards, m in markers.items():
        grey = [p for p in shown if p.cards == cards and id(p) not in number]
        ax.scatter([getattr(p, x) for p in grey], [p.headroom_fraction * 100 for p in grey], c="lightgrey", marker=m,
                   s=25, label=f"dominated ({cards} cards)" if grey else None, zorder=2)
        mine = [p for p in shown if p.cards == cards and id(p) in number]
        sc = ax.scatter([getattr(p, x) for p in mine], [p.headroom_fraction * 100 for p in mine],
                        c=[p.reshard_bytes_total / 1e9 for p in mine], cmap="viridis", vmin=0, vmax=vmax, marker=m,
                        s=60, edgecolors="black", label=f"Pareto front ({cards} cards)" if mine else None, zorder=3)
    return sc


def _label(ax, shown: list[ParetoPoint], number: dict[int, int], x: str = "step_s") -> None:
    """Each point's number on the table, at the first nearby spot no earlier label takes (12 points apart), in the
    table's order."""
    ax.figure.canvas.draw()  # fixes the axis limits, so data map to display points
    taken: list[tuple[float, float]] = []
    scale = ax.figure.dpi / 72
    for p in sorted(shown, key=lambda p: number[id(p)]):  # the plan and the fastest get the nearest spots
        at = (getattr(p, x), p.headroom_fraction * 100)
        px, py = ax.transData.transform(at) / scale
        spot = next((o for o in _OFFSETS if all(abs(px + o[0] - tx) > 12 or abs(py + o[1] - ty) > 9
                                                 for tx, ty in taken)), _OFFSETS[0])
        taken.append((px + spot[0], py + spot[1]))
        far = spot != _OFFSETS[0]
        ax.annotate(str(number[id(p)]), at, xytext=spot, textcoords="offset points", fontsize=7, zorder=5,
                    arrowprops={"arrowstyle": "-", "lw": 0.5, "color": "grey"} if far else None)
