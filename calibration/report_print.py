"""What `calibration report` prints: a table per group (fitted, held out) and the MAPE of each."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from calibration.report import ABLATION_BAR, GROUP_TITLES, GROUPS, KIND_TITLES, Mape, Report, Row

SECONDS_NOTE = ("* measured as 0 (a skipped stage): the error is the predicted seconds, not a percentage, and the "
                "row is not in the MAPE")


def quantity_label(row: Row) -> str:
    t = row.target
    return f"{t.quantity} / {t.reference}'s" if t.reference else t.quantity


FLOOR_NOTE = ("! measured below the compute floor of the case's workload (its FLOPs at the devices' peak, "
              "twin/cost_models/floors.py): the scenario's assumed lengths or batch cannot be what ran")


def error_text(row: Row) -> str:
    text = f"{row.error:+.3g} s *" if row.in_seconds else f"{row.error * 100:+.1f} %"
    return f"{text} !" if row.below_floor else text


def mape_text(m: Mape) -> str:
    if m.value is None:
        return "-"
    return f"{m.value * 100:.1f} % (n={m.rows})"


def print_report(console: Console, report: Report) -> None:
    for group in GROUPS:
        rows = [r for r in report.rows if r.group == group]
        title = f"{GROUP_TITLES[group]} cases: profile {report.profile.id}"
        table = Table(title=title)
        for col in ("case", "quantity", "measured", "predicted", "error"):
            table.add_column(col, justify="left" if col in ("case", "quantity") else "right")
        for r in rows:
            table.add_row(r.target.case, quantity_label(r), f"{r.target.goal:.4g}", f"{r.predicted:.4g}",
                          error_text(r))
        if not rows:
            table.caption = "no case"
        console.print(table)
    summary = Table(title="MAPE (n: rows averaged)")
    summary.add_column("group")
    for kind in KIND_TITLES.values():
        summary.add_column(kind, justify="right")
    for group in GROUPS:
        summary.add_row(GROUP_TITLES[group], *(mape_text(report.mape(group, k)) for k in KIND_TITLES))
        if any(r.group == group and not r.known_lengths for r in report.rows):
            summary.add_row(f"{GROUP_TITLES[group]}, lengths known",
                            *(mape_text(report.mape(group, k, known_lengths=True)) for k in KIND_TITLES))
            summary.caption = ("lengths known: the cases whose mean prompt and response lengths are published or "
                               "derived (measured.lengths), not assumed")
    console.print(summary)
    print_band_coverage(console, report)
    if any(r.is_ablation for r in report.rows):
        print_ablations(console, report)
    if report.memory:
        print_memory(console, report)
    if report.sync:
        print_sync(console, report)
    if any(r.in_seconds for r in report.rows):
        console.print(SECONDS_NOTE, highlight=False, soft_wrap=True)
    if any(r.below_floor for r in report.rows):
        console.print(FLOOR_NOTE, highlight=False, soft_wrap=True)
    for case, why in report.skipped.items():
        console.print(f"not compared: {case}: {why}", highlight=False, soft_wrap=True)
    if report.cross_validated is not None:
        print_cross_validation(console, report)


def print_band_coverage(console: Console, report: Report) -> None:
    """How many measured values lie inside the band the twin prints around its prediction, per group."""
    counts = {g: report.band_coverage(g) for g in GROUPS}
    if not any(n for _, n in counts.values()):
        return
    parts = ", ".join(f"{GROUP_TITLES[g]} {k} of {n}" for g, (k, n) in counts.items() if n)
    console.print(f"measured inside the band `twin simulate` prints (the profile's leave-one-case-out error, a "
                  f"typical error, not a bound): {parts}", highlight=False, soft_wrap=True)


def print_ablations(console: Console, report: Report) -> None:
    """The ratio rows once more, as the published ablations they are, each against issue 9's bar."""
    table = Table(title=f"ablations: ratio to another case (bar: the measured direction, within "
                        f"{ABLATION_BAR:.0%} of the measured ratio)")
    for col in ("case", "over", "quantity", "group", "measured", "predicted", "error", "bar"):
        table.add_column(col, justify="left" if col in ("case", "over", "quantity", "group") else "right")
    for r in (r for r in report.rows if r.is_ablation):
        verdict = "met" if r.meets_ablation_bar else ("missed" if r.same_direction else "wrong direction")
        table.add_row(r.target.case, r.target.reference, r.target.quantity, GROUP_TITLES[r.group],
                      f"x{r.target.goal:.3g}", f"x{r.predicted:.3g}", error_text(r), verdict)
    console.print(table)


def print_memory(console: Console, report: Report) -> None:
    table = Table(title="memory: torch allocator peak of the trainer's passes, GB (published GiB x 1.0737)")
    for col in ("case", "group", "measured", "predicted", "error"):
        table.add_column(col, justify="left" if col in ("case", "group") else "right")
    for m in report.memory:
        table.add_row(m.case, GROUP_TITLES[m.group], f"{m.measured_gb:.2f}", f"{m.predicted_gb:.2f}",
                      f"{m.error * 100:+.1f} %")
    console.print(table)


def print_sync(console: Console, report: Report) -> None:
    table = Table(title="weight sync of disaggregated runs (twin weight-sync), s")
    for col in ("case", "group", "method", "measured", "predicted", "error", "floor"):
        table.add_column(col, justify="left" if col in ("case", "group", "method") else "right")
    for r in report.sync:
        error = f"{r.error * 100:+.1f} %" + (" **" if r.below_floor else "")
        table.add_row(r.case, GROUP_TITLES[r.group], r.method, f"{r.measured_s:.4g}", f"{r.predicted_s:.4g}", error,
                      f"{r.floor_s:.3g}")
    table.caption = "MAPE: " + ", ".join(f"{GROUP_TITLES[g]} {mape_text(report.sync_mape(g))}" for g in GROUPS)
    console.print(table)
    if any(r.below_floor for r in report.sync):
        console.print("** measured below the floor (the model's bytes over the fastest link of a rollout rank): not "
                      "a whole sync as the twin counts one; left out of the MAPE", highlight=False, soft_wrap=True)


def print_cross_validation(console: Console, report: Report) -> None:
    """Leave-one-case-out rows per case, and per stage the fitted, held-out and leave-one-out MAPE side by side."""
    cv = report.cross_validated
    assert cv is not None
    table = Table(title=f"leave-one-case-out: profile {report.profile.id} refitted without each case")
    for col in ("case", "quantity", "measured", "predicted", "error"):
        table.add_column(col, justify="left" if col in ("case", "quantity") else "right")
    for r in cv.rows:
        rel = f" / {r.target.reference}'s" if r.target.reference else ""
        table.add_row(r.target.case, r.target.quantity + rel, f"{r.target.goal:.4g}", f"{r.predicted:.4g}",
                      f"{r.error * 100:+.1f} %")
    console.print(table)
    summary = Table(title="mean absolute error per stage (n: numbers averaged)")
    summary.add_column("stage")
    for col in ("fitted", "held out", "leave-one-out"):
        summary.add_column(col, justify="right")
    columns: dict[str, dict[str, list[float]]] = {"fitted": {}, "held_out": {}, "loo": {}}
    for row in report.rows:
        if not row.in_seconds:
            columns[row.group].setdefault(row.target.stage, []).append(abs(row.error))
    for held in cv.rows:
        columns["loo"].setdefault(held.target.stage, []).append(abs(held.error))
    stages = sorted({s for col in columns.values() for s in col}, key=lambda s: (s == "step", s))
    for stage in stages:
        cells = [columns[c].get(stage) for c in ("fitted", "held_out", "loo")]
        summary.add_row(stage, *(f"{sum(v) / len(v) * 100:.1f} % (n={len(v)})" if v else "-" for v in cells))
    console.print(summary)
    console.print(f"band written with --write-cv: step +-{cv.result.step_rel_error * 100:.1f} %", highlight=False)
    for note in cv.notes:
        console.print(f"note: {note}", highlight=False, soft_wrap=True)
