"""The collectives job on 2 gloo processes, uneven all_to_all_single included."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from calibration.errors import CalibrationError
from calibration.jobs import load_job
from calibration.jobs.base import Failure
from calibration.jobs.collective_groups import blocks, uneven_splits
from calibration.jobs.collective_worker import LATENCY_BYTES, LATENCY_REPEATS
from calibration.jobs.collectives import OPS, bus_factor, group_shapes


def test_uneven_splits_differ_per_peer_but_balance():
    for n in (2, 3, 4, 8):
        matrix = [uneven_splits(r, n, unit=2) for r in range(n)]
        assert all(len(set(row)) == n for row in matrix)  # every peer gets a different amount
        assert len({sum(row) for row in matrix}) == 1  # every rank sends the same total
        assert all(matrix[r][j] == matrix[j][r] for r in range(n) for j in range(n))  # recv == send


def test_group_shapes_partition_the_world():
    shapes = group_shapes(8, "full")
    assert {(g.group_size, g.layout) for g in shapes} == {
        (2, "contiguous"), (2, "strided"), (4, "contiguous"), (4, "strided"), (8, "contiguous")}
    for g in shapes:
        groups = blocks(g)
        assert sorted(r for b in groups for r in b) == list(range(8))
        assert g.ranks == groups[0] and len(groups) == g.groups
    assert blocks(next(g for g in shapes if g.layout == "strided" and g.group_size == 4)) == [[0, 2, 4, 6],
                                                                                            [1, 3, 5, 7]]


def test_world_below_two_is_a_user_error(cpu_ctx):
    cpu_ctx.world = 1
    with pytest.raises(CalibrationError, match="--world"):
        load_job("collectives").points(cpu_ctx)


def test_two_gloo_ranks_measure_every_op(cpu_ctx, assert_sane):
    job = load_job("collectives")
    points = [p for p in job.points(cpu_ctx) if p.params["size"] == 1 << 20]
    assert {p.op for p in points} == set(OPS)
    outcomes = list(job.run(cpu_ctx, points))
    assert not [o for o in outcomes if isinstance(o, Failure)]
    assert sorted(o.key for o in outcomes) == sorted(p.key(cpu_ctx.device_facts) for p in points)
    for record in outcomes:
        assert_sane(record)
        assert record.backend == "gloo" and record.group.group_size == 2 and record.group.world_size == 2
        assert record.bytes <= record.params["size"] and record.bytes > 0.9 * record.params["size"]
        algbw = record.bytes / record.stats.median_s / 1e9
        assert math.isclose(record.derived["algbw_gbps"], algbw)
        assert math.isclose(record.derived["busbw_gbps"], algbw * bus_factor(record.op, 2))
    by_op = {r.op: r for r in outcomes}
    assert by_op["all_to_all_single"].params["splits"] == "uneven"
    assert by_op["all_reduce"].derived["busbw_gbps"] == pytest.approx(by_op["all_reduce"].derived["algbw_gbps"])


def test_a_failing_worker_turns_its_points_into_failures(cpu_ctx):
    job = load_job("collectives")
    good = next(p for p in job.points(cpu_ctx) if p.op == "broadcast")
    bogus = replace(good, op="no_such_collective")
    outcomes = list(job.run(cpu_ctx, [good, bogus]))
    assert not isinstance(outcomes[0], Failure) and outcomes[0].op == "broadcast"
    assert isinstance(outcomes[1], Failure) and "no_such_collective" in outcomes[1].message


def test_latency_bound_points_take_more_repeats_than_the_run(cpu_ctx):
    """At the run's 3 repeats, a 1 KiB all-to-all is timed LATENCY_REPEATS times (its median is the latency, not a
    rank's occasional wake-up of several ms), a 1 MiB one 3 times."""
    job = load_job("collectives")
    sizes = {1 << 10, 1 << 20}
    points = [p for p in job.points(cpu_ctx) if p.op == "all_to_all_single" and p.params["size"] in sizes]
    outcomes = {o.params["size"]: o for o in job.run(cpu_ctx, points)}
    assert cpu_ctx.repeats == 3 < LATENCY_REPEATS and (1 << 10) <= LATENCY_BYTES < (1 << 20)
    assert len(outcomes[1 << 10].stats.samples_s) == LATENCY_REPEATS
    assert len(outcomes[1 << 20].stats.samples_s) == 3
