"""The PNG of `calibration report --plot`: each quantity's error, and predicted against measured."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from calibration.report import GROUP_TITLES, GROUPS, Report, Row
from calibration.report_print import mape_text, quantity_label
from twin.fileio import save_figure

COLOURS = {"fitted": "#4c72b0", "held_out": "#dd8452"}
MARKERS = {"s": "o", "tokens/s": "^", "ratio": "s"}
LOG_RANGE = (1e-300, 1e300)


def _on_log_axes(value: float) -> bool:
    """A value a log axis can show with room around it: positive and far from the float limits (a measured 1e308 s
    is a value the file holds, not one to plot)."""
    return LOG_RANGE[0] < value < LOG_RANGE[1]


def _unit(row: Row) -> str:
    if row.target.reference:
        return "ratio"
    return "s" if row.target.is_stage or row.target.quantity == "step" else "tokens/s"


def _plotted(row: Row) -> bool:
    return _on_log_axes(row.target.goal) and _on_log_axes(row.predicted)


def plot_report(report: Report, path: Path, label: str | None = None, inputs: Iterable[Path | None] = ()) -> None:
    """Left: the signed relative error of every row; right: predicted vs measured with the identity line.
    Rows measured as 0 (no relative error, no place on a log axis) and rows off the log axes are counted in the
    caption only."""
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    rows = [r for r in report.rows if not r.in_seconds]
    fig = Figure(figsize=(15, max(4.5, 0.3 * len(rows) + 1.8)), layout="constrained")
    bars, scatter = fig.subplots(1, 2, width_ratios=[1.3, 1])
    ys = range(len(rows))
    errors = [r.error * 100 for r in rows]
    bars.barh(ys, errors, color=[COLOURS[r.group] for r in rows])
    for y, e in zip(ys, errors, strict=True):
        bars.annotate(f"{e:+.1f} %", (e, y), xytext=(3 if e >= 0 else -3, 0), textcoords="offset points",
                      ha="left" if e >= 0 else "right", va="center", fontsize=7)
    bars.margins(x=0.15)
    bars.set_yticks(ys, [f"{r.target.case}: {quantity_label(r)}" for r in rows], fontsize=7)
    bars.invert_yaxis()
    bars.axvline(0, color="black", linewidth=0.8)
    for limit in (-25, -10, 10, 25):
        bars.axvline(limit, color="grey", linewidth=0.6, linestyle=":" if abs(limit) == 10 else "--")
    bars.set_xlabel("error: predicted / measured - 1 (%); dotted +-10 %, dashed +-25 %")
    bars.set_title("error per measured quantity", fontsize=10)
    bars.legend(handles=[Patch(color=COLOURS[g], label=f"{GROUP_TITLES[g]} cases") for g in GROUPS], fontsize=8,
                loc="best")
    for group in GROUPS:
        for unit, marker in MARKERS.items():
            pts = [(r.target.goal, r.predicted) for r in rows
                   if r.group == group and _unit(r) == unit and _plotted(r)]  # log axes: a 0 s prediction is off
            if pts:
                scatter.scatter(*zip(*pts, strict=True), color=COLOURS[group], marker=marker, s=36,
                                label=f"{GROUP_TITLES[group]}, {unit}")
    values = [v for r in rows if _plotted(r) for v in (r.target.goal, r.predicted)] or [1.0]
    lo, hi = min(values) / 1.5, max(values) * 1.5
    scatter.plot([lo, hi], [lo, hi], color="black", linewidth=0.8, label="predicted = measured")
    scatter.set(xscale="log", yscale="log", xlim=(lo, hi), ylim=(lo, hi), xlabel="measured", ylabel="predicted")
    scatter.set_title("predicted vs measured (seconds, tokens/s, ratios)", fontsize=10)
    scatter.legend(fontsize=8, loc="upper left")
    mape = "; ".join(f"{GROUP_TITLES[g]}: step/tps {mape_text(report.mape(g, 'end_to_end'))}, stages "
                     f"{mape_text(report.mape(g, 'stages'))}" for g in GROUPS)
    fig.suptitle(f"profile {report.profile.id}: MAPE {mape}", fontsize=10)
    zero = len(report.rows) - len(rows)
    unplotted = sum(1 for r in rows if not _plotted(r))
    if zero or unplotted:
        fig.text(0.01, 0.005, f"not in the scatter (see the table): {zero} measured as 0 s, {unplotted} predicted "
                 f"as 0 s or off the log axes ({LOG_RANGE[0]:g} to {LOG_RANGE[1]:g})", fontsize=8)
    save_figure(fig, path, dpi=110, label=label, inputs=inputs)
