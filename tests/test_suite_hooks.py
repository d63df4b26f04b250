"""The suite's own hooks (tests/conftest.py), run on a small suite of their own under two pytest-xdist workers: a
`host_alone` test shares the host with no other test, and what a test logs reaches the summary from a worker."""

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
SHARED = """
import time, pytest

@pytest.mark.parametrize("i", range(4))
def test_shared(i):
    start = time.time()
    time.sleep(0.5)
    open("spans.txt", "a").write(f"{__name__}-{i} {start} {time.time()}\\n")
"""


def test_a_host_alone_test_overlaps_no_other_and_its_log_reaches_the_summary(tmp_path: Path) -> None:
    shutil.copy(Path(__file__).with_name("conftest.py"), tmp_path / "conftest.py")
    (tmp_path / "test_a.py").write_text(SHARED)
    (tmp_path / "test_b.py").write_text(ALONE)
    (tmp_path / "test_c.py").write_text(SHARED)
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "2", "--dist", "loadfile",
                           "--no-loadscope-reorder", "-p", "no:cacheprovider"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    spans = {name: (float(a), float(b)) for name, a, b in
             (line.split() for line in (tmp_path / "spans.txt").read_text().splitlines())}
    assert len(spans) == 9
    start, end = spans.pop("alone")
    assert all(b <= start or a >= end for a, b in spans.values()), spans
    others = sorted(spans.values())
    assert any(b > a2 for (_, b), (a2, _) in itertools.pairwise(others)), others  # the workers did run side by side
    summary = proc.stdout[proc.stdout.index("figures the tests logged"):]
    assert "test_b.py::test_alone:\nfigures of the alone test\nsecond line" in summary
