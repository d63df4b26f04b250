"""The table printed at the end of `calibration run`."""

from __future__ import annotations

from rich.table import Table

from calibration.runner import RunOutcome

# The figure that sums up each kind of record, in order of preference.
HEADLINES = (("busbw_gbps", "bus GB/s"), ("tflops", "TFLOP/s"), ("tokens_per_s", "tokens/s"), ("gbps", "GB/s"))


def summary_table(outcome: RunOutcome) -> Table:
    """Per job: grid points, points already in the file, measured now, failed, headline range now."""
    table = Table(title="calibration run")
    for column in ("job", "points", "in file", "measured", "failed", "range"):
        table.add_column(column, justify="left" if column in ("job", "range") else "right")
    for tally in outcome.tallies:
        table.add_row(tally.job, str(tally.planned), str(tally.skipped), str(len(tally.measured)),
                      str(len(tally.failed)), headline_range(tally.measured))
    return table


def headline_range(records: list) -> str:
    """min-max of the first headline figure the records carry, e.g. "0.15-1.1 TFLOP/s"."""
    for name, unit in HEADLINES:
        values = [r.derived[name] for r in records if name in r.derived]
        if values:
            return f"{min(values):.3g}-{max(values):.3g} {unit}"
    return ""
