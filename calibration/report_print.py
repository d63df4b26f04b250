"""What `calibration report` prints: a table per group (fitted, held out) and the MAPE of each."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from calibration.report import GROUP_TITLES, GROUPS, KIND_TITLES, Mape, Report, Row

SECONDS_NOTE = ("* measured as 0 (a skipped stage): the error is the predicted seconds, not a percentage, and the "
                "row is not in the MAPE")


def quantity_label(row: Row) -> str:
    t = row.target
    return f"{t.quantity} / {t.reference}'s" if t.reference else t.quantity


def error_text(row: Row) -> str:
    return f"{row.error:+.3g} s *" if row.in_seconds else f"{row.error * 100:+.1f} %"


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
    console.print(summary)
    if any(r.in_seconds for r in report.rows):
        console.print(SECONDS_NOTE, highlight=False, soft_wrap=True)
    for case, why in report.skipped.items():
        console.print(f"not compared: {case}: {why}", highlight=False, soft_wrap=True)
