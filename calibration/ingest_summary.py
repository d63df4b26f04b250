"""What `calibration ingest` prints: one row per log, and every unusable line by number."""

from __future__ import annotations

from collections.abc import Callable

from rich.console import Console
from rich.table import Table

from calibration.ingest import IngestResult

SHOWN_LINES = 20


def print_ingest_summary(result: IngestResult, console: Console, warn: Callable[[str], None]) -> None:
    table = Table(title="calibration ingest")
    columns = {"log": "", "format": "", "steps": "", "records": "", "bad": "unreadable lines",
               "other": "console lines that are not metrics", "NaN": "non-finite values",
               "again": "steps logged again", "present": "records already in the output"}
    for column in columns:
        table.add_column(column, justify="left" if column in ("log", "format") else "right")
    table.caption = "; ".join(f"{name}: {meaning}" for name, meaning in columns.items() if meaning)
    for r in result.reports:
        table.add_row(str(r.path), r.format, str(r.steps), str(r.records), str(len(r.bad_lines)),
                      str(r.other_lines), str(r.non_finite), str(len(r.duplicate_steps)), str(r.already_in_output))
    console.print(table)
    for r in result.reports:
        if r.bad_lines:
            shown = ", ".join(f"{b.line} ({b.reason})" for b in r.bad_lines[:SHOWN_LINES])
            more = f" and {len(r.bad_lines) - SHOWN_LINES} more" if len(r.bad_lines) > SHOWN_LINES else ""
            warn(f"{r.path}: {len(r.bad_lines)} bad lines skipped: {shown}{more}")
        if r.duplicate_steps:
            warn(f"{r.path}: steps logged again on lines {r.duplicate_steps}; the first occurrence was kept")
        if r.non_finite:
            warn(f"{r.path}: {r.non_finite} metric values were NaN/inf/null and were not recorded")
