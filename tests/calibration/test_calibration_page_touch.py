"""The page_touch job's two points on this host, and the per-page cost the fit reads off them."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from calibration.fit_jobs import JobFit
from calibration.jobs import load_job
from calibration.jobs import page_touch as page_touch_job
from calibration.measurements import DeviceFacts, HostFacts, JobMeasurement, Stats, Versions
from twin.cost_models.host_pages import RETURNED_PAGE_TERM
from twin.profile import embedded_profile


def test_the_job_touches_a_fresh_buffer_at_once_and_after_an_idle_gap(cpu_ctx, assert_sane, monkeypatch):
    monkeypatch.setattr(page_touch_job, "IDLE_S", 0.2)  # the real gaps outlast the kernel's reporting
    monkeypatch.setattr(page_touch_job, "DRAIN_S", 0.1)
    job = load_job("page_touch")
    points = job.points(cpu_ctx)
    assert [(p.op, p.params) for p in points] == [("first_touch", {"bytes": 256 << 20, "idle_s": 0.0}),
                                                 ("first_touch", {"bytes": 256 << 20, "idle_s": 0.2})]
    records = list(job.run(cpu_ctx, points))
    for r in records:
        assert_sane(r)
        assert r.derived["pages"] * r.stats.median_s == pytest.approx(65536, rel=1e-12)  # pages per call
        assert "transparent huge pages" in r.note


def _record(idle_s: float, seconds: float) -> JobMeasurement:
    params = {"bytes": 256 << 20, "idle_s": idle_s}
    return JobMeasurement(
        key=f"page_touch|first_touch|{params}", job="page_touch", timestamp=datetime.now(timezone.utc),
        op="first_touch", params=params, dtype="uint8", stats=Stats.from_samples([seconds] * 3, warmup=1),
        derived={"pages": 65536 / seconds},
        device=DeviceFacts(kind="cpu", name="test-cpu", count=1, threads=1),
        host=HostFacts(hostname="h", cpu_model="c", cores=2, memory_gb=24.0), versions=Versions(python="3.11"))


def test_the_fit_takes_the_difference_per_page():
    """0.024 s at once and 0.435 s after the gap for 65,536 pages: (0.435 - 0.024) / 65536 = 6.2714 us a page."""
    records = [_record(0.0, 0.024), _record(4.0, 0.435)]
    profile = JobFit(embedded_profile("cpu"), records, "fp32").run("page_touch", ["synthetic"]).profile
    assert profile[RETURNED_PAGE_TERM] == pytest.approx((0.435 - 0.024) / 65536 * 1e6, rel=1e-9)
    assert "page_touch job" in profile.params[RETURNED_PAGE_TERM].source


def test_a_host_that_hands_back_nothing_costs_nothing():
    records = [_record(0.0, 0.030), _record(4.0, 0.029)]  # the idle call no slower: no host behind the pages
    profile = JobFit(embedded_profile("cpu"), records, "fp32").run("page_touch", ["synthetic"]).profile
    assert profile[RETURNED_PAGE_TERM] == 0.0


def test_one_gap_alone_leaves_the_base_value():
    out = JobFit(embedded_profile("cpu"), [_record(4.0, 0.435)], "fp32")
    with pytest.raises(ValueError, match="no job measurement"):
        out.run("page_touch", ["synthetic"])
    assert any("page_touch job" in n for n in out.notes)
