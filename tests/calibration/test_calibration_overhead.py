"""The overhead job's grid and the poll interval it reads from verl's code (its Ray calls run in the CPU loop)."""

from __future__ import annotations

from calibration.jobs import load_job
from calibration.jobs.overhead import poll_interval


def test_points_cover_every_group_size_and_payload(cpu_ctx):
    points = load_job("overhead").points(cpu_ctx)
    assert [(p.op, p.params) for p in points] == [
        ("worker_call", {"workers": 1}), ("worker_call", {"workers": 2}),
        ("worker_call_data", {"workers": 2, "payload_mb": 1}), ("worker_call_data", {"workers": 2, "payload_mb": 16}),
        ("rollout_poll", {"source": "verl code"})]


def test_the_poll_interval_comes_from_verl():
    value, where = poll_interval()
    assert value == 2.0  # verl 0.9.1: ReplayBuffer(poll_interval=2.0)
    assert where.split(":")[0].endswith("replay_buffer.py")
