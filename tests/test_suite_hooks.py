"""The suite's own hooks (tests/conftest.py), run on a small suite of their own under two pytest-xdist workers: a
`host_alone` test shares the host with no other test, nor does the alone step of a `host_alone_in_parts` test; an
`engines` test or step shares it with short tests but not with another `engines` test or step, and what a test logs
reaches the summary from a worker."""

from __future__ import annotations

import itertools
import shutil
import subprocess
import sys
from pathlib import Path

ALONE = """
import time, pytest
pytestmark = pytest.mark.host_alone

def test_alone(ci_log):
    start = time.time()
    time.sleep(1.5)
    open("spans.txt", "a").write(f"alone {start} {time.time()}\\n")
    ci_log("figures of the alone test\\nsecond line")
"""
ENGINES = """
import time, pytest

@pytest.mark.engines
def test_engines():
    start = time.time()
    time.sleep(1.5)
    open("spans.txt", "a").write(f"engines-{__name__} {start} {time.time()}\\n")
"""
IN_PARTS = """
import time, pytest
pytestmark = pytest.mark.host_alone_in_parts

def _span(name, seconds):
    start = time.time()
    time.sleep(seconds)
    open("spans.txt", "a").write(f"{name} {start} {time.time()}\\n")

@pytest.fixture(scope="module")
def steps(alone_on_host, engines_turn):
    _span("parts-untimed", 1.0)
    with alone_on_host():
        _span("parts-alone", 1.0)
    with engines_turn():
        _span("engines-parts", 1.0)

def test_in_parts(steps):
    pass
"""
SHARED = """
import time, pytest

@pytest.mark.parametrize("i", range(4))
def test_shared(i):
    start = time.time()
    time.sleep(0.5)
    open("spans.txt", "a").write(f"{__name__}-{i} {start} {time.time()}\\n")
"""


def _overlap(a: tuple[float, float], b: tuple[float, float]) -> bool:
    return a[0] < b[1] and b[0] < a[1]


def test_host_alone_and_engines_tests_keep_their_company_and_their_logs_reach_the_summary(tmp_path: Path) -> None:
    shutil.copy(Path(__file__).with_name("conftest.py"), tmp_path / "conftest.py")
    for name, text in zip("abcdefghi", (SHARED, ALONE, SHARED, ENGINES, IN_PARTS, SHARED, ENGINES, SHARED, SHARED),
                          strict=True):
        (tmp_path / f"test_{name}.py").write_text(text)
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "2", "--dist", "loadfile",
                           "--no-loadscope-reorder", "-p", "no:cacheprovider"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    spans = {name: (float(a), float(b)) for name, a, b in
             (line.split() for line in (tmp_path / "spans.txt").read_text().splitlines())}
    assert len(spans) == 26
    untimed = spans.pop("parts-untimed")  # a host_alone_in_parts test's untimed step shares the host, not alone's
    assert not _overlap(untimed, spans["alone"]), (untimed, spans["alone"])
    for name in ("alone", "parts-alone"):  # a host_alone test, and the alone step of a host_alone_in_parts one
        alone = spans.pop(name)
        assert not any(_overlap(alone, span) for span in spans.values()), (name, spans)
    engines = [spans.pop(name) for name in sorted(spans) if name.startswith("engines-")]
    assert len(engines) == 3 and not any(_overlap(a, b) for a, b in itertools.combinations(engines, 2)), engines
    assert any(_overlap(e, span) for e in engines for span in spans.values()), spans  # beside short tests
    others = sorted(spans.values())
    assert any(b > a2 for (_, b), (a2, _) in itertools.pairwise(others)), others  # the workers did run side by side
    summary = proc.stdout[proc.stdout.index("figures the tests logged"):]
    assert "test_b.py::test_alone:\nfigures of the alone test\nsecond line" in summary
