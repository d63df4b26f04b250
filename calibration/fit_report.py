"""Tables of a fit: each target before and after, and the parameters that moved."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from calibration.fit import FitOutcome
from calibration.fit_jobs import JobFitOutcome
from calibration.identify import MIN_TARGETS, RELATIVE_THRESHOLD, Identifiability
from twin.profile import Profile


def print_fit(console: Console, outcome: FitOutcome, names: list[str], base: Profile) -> None:
    table = Table(title="Targets (relative error; a zero target in seconds)")
    for col in ("target", "measured", "before", "error", "after", "error"):
        table.add_column(col, justify="left" if col == "target" else "right")
    before, after = outcome.errors("before"), outcome.errors("after")
    for t, b, a, eb, ea in zip(outcome.targets, outcome.before, outcome.after, before, after, strict=True):
        table.add_row(t.label, f"{t.goal:.4g}", f"{b:.4g}", f"{eb * 100:+.1f} %", f"{a:.4g}", f"{ea * 100:+.1f} %")
    console.print(table)
    params = Table(title="Fitted parameters")
    for col in ("parameter", "base", "fitted", "bounds", "unit"):
        params.add_column(col, justify="left" if col in ("parameter", "unit") else "right")
    for n in names:
        p = base.params[n]
        params.add_row(n, f"{p.value:.4g}", f"{outcome.profile[n]:.4g}", f"{p.bounds}", p.unit)
    console.print(params)


def print_identifiability(console: Console, ident: Identifiability, title: str) -> None:
    """Singular values of the log-log Jacobian, the combinations they resolve, and what each parameter moves."""
    console.print(f"{title}: {len(ident.names)} parameters, {len(ident.targets)} distinct measured numbers, "
                  f"{ident.identifiable} directions identified (singular value >= {RELATIVE_THRESHOLD:g} of the "
                  "largest)", highlight=False, soft_wrap=True)
    for line in ident.directions():
        console.print(f"  {line}", highlight=False, soft_wrap=True)
    weak = [f"{n} ({len(ident.moved(n))})" for n in ident.names if len(ident.moved(n)) < MIN_TARGETS]
    if weak:
        console.print(f"  moving fewer than {MIN_TARGETS} distinct numbers: {', '.join(weak)}", highlight=False,
                      soft_wrap=True)


def print_job_fit(console: Console, outcome: JobFitOutcome, base: Profile) -> None:
    """The parameters the jobs set, and the fit error per job."""
    table = Table(title="Parameters from the calibration jobs")
    for col in ("parameter", "base", "fitted", "from"):
        table.add_column(col, justify="right" if col in ("base", "fitted") else "left", overflow="fold")
    for name, p in outcome.profile.params.items():
        if p.fitted:
            table.add_row(name, f"{base[name]:.4g}", f"{p.value:.4g}", p.source)
    console.print(table)
    for job, errors in outcome.errors.items():
        worst = max(errors, key=abs)
        mape = sum(map(abs, errors)) / len(errors) * 100
        console.print(f"{job}: {len(errors)} points, mean absolute error {mape:.1f} %, worst {worst * 100:+.1f} %")
    for note in outcome.notes:
        console.print(f"note: {note}")
