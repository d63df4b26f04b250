"""Run the three CLIs in-process on an argv and judge the outcome as issue 12 asks.

Every outcome is either exit 0 (the caller then checks the output) or a non-zero exit with exactly one
line on stderr; never a traceback, never over the time bound, and no input file changed.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, settings

TIME_BOUND_S = 30.0  # one command of the suite; the slowest valid one (a CPU plan search) takes about 5 s

# Derandomised, a fixed number of examples, no example database: the same cases on every run.
settings.register_profile("ci", derandomize=True, database=None, deadline=None, print_blob=False,
                          phases=[Phase.explicit, Phase.generate],  # no shrinking: a failure is reported as found
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                                 HealthCheck.filter_too_much, HealthCheck.data_too_large])
settings.load_profile("ci")


@dataclass
class Outcome:
    code: int
    stdout: str
    stderr: str
    seconds: float


def _app(prog: str):
    if prog == "twin":
        from twin.cli import app
    elif prog == "executor":
        from executor.cli import app
    else:
        from calibration.cli import app
    return app


def run(prog: str, *argv: str | Path) -> Outcome:
    """`prog argv...` in this process, as its console entry point runs it."""
    from calibration.errors import CalibrationError
    from twin.clirun import run_app

    out, err = io.StringIO(), io.StringIO()
    start = time.perf_counter()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            run_app(_app(prog), prog, (CalibrationError,) if prog == "calibration" else (), [str(a) for a in argv])
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
    return Outcome(code, out.getvalue(), err.getvalue(), time.perf_counter() - start)


def digest(paths: list[Path]) -> dict[Path, str]:
    """Content and mode of each existing input file, to prove a command left it alone."""
    return {p: hashlib.sha256(p.read_bytes()).hexdigest() + oct(p.stat().st_mode) for p in paths if p.is_file()}


def judged(prog: str, *argv: str | Path, inputs: list[Path] = ()) -> Outcome:
    """Run and assert the issue-12 contract; returns the outcome for output checks on success."""
    Counter.cases += 1
    before = digest(list(inputs))
    outcome = run(prog, *argv)
    assert "Traceback" not in outcome.stderr, outcome.stderr
    assert outcome.seconds < TIME_BOUND_S, f"{prog} {argv} took {outcome.seconds:.1f} s"
    if outcome.code != 0:
        lines = outcome.stderr.strip().splitlines()
        assert len(lines) == 1, f"{prog} {argv}: {outcome.stderr!r}"
        assert lines[0].startswith(f"{prog}: "), lines[0]
    assert digest(list(inputs)) == before, f"{prog} {argv} changed an input file"
    return outcome


class Counter:
    """How many generated cases the suite ran (printed in the session summary)."""

    cases = 0


@pytest.fixture(scope="session")
def cli():
    """judged(prog, *argv, inputs=[...]) -> Outcome."""
    return judged


@pytest.fixture(scope="session")
def work(tmp_path_factory) -> Path:
    """A directory shared by the suite's cases (each case names its files uniquely)."""
    return tmp_path_factory.mktemp("property")


def pytest_terminal_summary(terminalreporter) -> None:
    if Counter.cases:
        terminalreporter.write_line(f"property suite: {Counter.cases} generated command lines judged")
