"""Suite-wide hooks for running the tests in parallel (pytest-xdist, the README's `-n 2 --dist loadfile`):

- a test marked `host_alone` times this host, so no other test runs beside it: every test holds a shared lock on
  the host while it runs (set-up and teardown included, so module fixtures too) and a `host_alone` one an exclusive
  lock, taken through a gate that stops new tests from starting while it waits;
- a test marked `host_alone_in_parts` times the host only in some of its steps: it holds the host shared like any
  test and trades that for the host alone around those steps (`with alone_on_host(): ...`), so that its untimed
  steps (building assets, reading results) share the host with other tests;
- a test marked `engines` runs real engines (a verl run, four ranks with both engines) that keep most of a CI host
  busy: it may run beside short tests, which fill the cores it leaves idle, but never beside another `engines` test
  (two of them side by side each took 2-2.5x as long); it takes the `engines` lock before the host's. A test whose
  engines run in one step takes the lock around that step only (`with engines_turn(): ...`);
- `ci_log(text)` puts a test's figures into the run's terminal summary, from whichever process ran the test (xdist's
  workers print nowhere the CI log sees).

Without xdist the locks are uncontended and the summary is the same.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

LOCKS_ENV = "ASCEND_RL_TWIN_TEST_LOCKS"  # the directory of the run's host locks, made by the controlling process
HOST_ALONE = "host_alone"
HOST_ALONE_IN_PARTS = "host_alone_in_parts"
ENGINES = "engines"
CI_LOG = "ci_log"
_LOCKS = pytest.StashKey[Path]()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", f"{HOST_ALONE}: the test times this host; no other test runs beside it")
    config.addinivalue_line("markers", f"{HOST_ALONE_IN_PARTS}: the test takes the host alone around its timed steps "
                                       "(the alone_on_host fixture) and shares it otherwise")
    config.addinivalue_line("markers", f"{ENGINES}: the test runs real engines; no other {ENGINES} test runs beside it")
    if not hasattr(config, "workerinput"):  # the controlling process, before xdist starts its workers
        config.stash[_LOCKS] = Path(tempfile.mkdtemp(prefix="ascend-rl-twin-tests-"))
        os.environ[LOCKS_ENV] = str(config.stash[_LOCKS])


def pytest_unconfigure(config: pytest.Config) -> None:
    locks = config.stash.get(_LOCKS, None)
    if locks is not None:
        shutil.rmtree(locks, ignore_errors=True)


@contextlib.contextmanager
def _host(exclusive: bool) -> Iterator[None]:
    """Hold the host shared (or alone): the gate is taken exclusively by a waiting `host_alone` test, so tests
    that come after it wait at the gate instead of keeping the host shared forever."""
    locks = Path(os.environ[LOCKS_ENV])
    mode = fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH
    with open(locks / "gate", "a") as gate, open(locks / "host", "a") as host:
        fcntl.flock(gate, mode)
        fcntl.flock(host, mode)
        if not exclusive:  # past the gate: a waiting host_alone test may close it now
            fcntl.flock(gate, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(host, fcntl.LOCK_UN)
            if exclusive:
                fcntl.flock(gate, fcntl.LOCK_UN)


@contextlib.contextmanager
def _engines_turn(needed: bool) -> Iterator[None]:
    """Hold the `engines` lock (exclusively) when `needed`; waiting for it holds nothing else."""
    if not needed:
        yield
        return
    with open(Path(os.environ[LOCKS_ENV]) / ENGINES, "a") as turn:
        fcntl.flock(turn, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(turn, fcntl.LOCK_UN)


_PARTS_HOLD: list[contextlib.ExitStack] = []  # the shared hold of the running host_alone_in_parts test


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> object:
    if item.get_closest_marker(HOST_ALONE_IN_PARTS) is not None:  # shares the host but in its alone steps
        hold = contextlib.ExitStack()
        hold.enter_context(_host(exclusive=False))
        _PARTS_HOLD[:] = [hold]
        try:
            return (yield)
        finally:
            _PARTS_HOLD.pop().close()
    with _engines_turn(item.get_closest_marker(ENGINES) is not None), \
            _host(exclusive=item.get_closest_marker(HOST_ALONE) is not None):
        return (yield)


@contextlib.contextmanager
def _alone_step() -> Iterator[None]:
    """Trade the running test's shared hold for the host alone, and take the shared hold back after."""
    _PARTS_HOLD.pop().close()
    try:
        with _host(exclusive=True):
            yield
    finally:
        hold = contextlib.ExitStack()
        hold.enter_context(_host(exclusive=False))
        _PARTS_HOLD.append(hold)


@pytest.fixture(scope="module")
def alone_on_host(request: pytest.FixtureRequest) -> Callable[[], contextlib.AbstractContextManager]:
    """`with alone_on_host(): ...` runs a step with the host to itself; only in a `host_alone_in_parts` module."""
    if request.node.get_closest_marker(HOST_ALONE_IN_PARTS) is None:
        raise pytest.UsageError(f"{request.node.nodeid}: alone_on_host needs the module marked {HOST_ALONE_IN_PARTS}")
    return _alone_step


@pytest.fixture(scope="module")
def engines_turn(request: pytest.FixtureRequest) -> Callable[[], contextlib.AbstractContextManager]:
    """`with engines_turn(): ...` runs a step beside no other `engines` test or step; not in a module marked
    `engines`, which holds the lock already (a second lock on it from this process would wait for itself)."""
    if request.node.get_closest_marker(ENGINES) is not None:
        raise pytest.UsageError(f"{request.node.nodeid}: marked {ENGINES}, it holds the engines lock throughout")
    return lambda: _engines_turn(True)


@pytest.fixture
def ci_log(request: pytest.FixtureRequest) -> Callable[[str], None]:
    """`ci_log(text)`: print `text` in the run's terminal summary, under the test's name, whatever its outcome."""
    return lambda text: request.node.user_properties.append((CI_LOG, text))


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Collect what a test logged once it is done (xdist hands the controlling process its workers' reports)."""
    if report.when == "teardown":
        _LOGGED.extend((report.nodeid, text) for key, text in report.user_properties if key == CI_LOG)


_LOGGED: list[tuple[str, str]] = []


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    if _LOGGED:
        terminalreporter.section("figures the tests logged")
        for nodeid, text in _LOGGED:
            terminalreporter.write_line(f"{nodeid}:")
            terminalreporter.write_line(text)
