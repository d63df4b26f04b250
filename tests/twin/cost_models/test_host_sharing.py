"""The rollout's agent-loop path sharing the host's cores with an engine that computes on them."""

from __future__ import annotations

import math

import pytest

from twin.cost_models.host_sharing import shared_host_rollout


def test_a_demand_within_the_cores_leaves_the_path_as_it_was():
    # 0.5 busy cores and one worker always stepping: 1.5 runnable on 2 cores
    shared = shared_host_rollout(4.0, 400, 0.5, 2, 1, 0.0, lambda batch: 10.0)
    assert shared.seconds == pytest.approx(4.0, rel=1e-12) and shared.slowdown == 1.0
    assert shared.duty == pytest.approx(1.0, abs=1e-9)


def test_an_engine_in_flight_throughout_takes_its_workers_share():
    # requests stay far longer than they arrive apart: duty 1, so (1.5 + 2) / 2 = 1.75x
    shared = shared_host_rollout(1.0, 100, 1.5, 2, 2, 0.0, lambda batch: 10.0)
    assert shared.slowdown == pytest.approx(1.75, rel=1e-9) and shared.seconds == pytest.approx(1.75, rel=1e-9)


def test_the_duty_follows_arrivals_and_residence():
    """Hand-derived: with a constant residence R the in-flight count lambda x R x slowdown = (n / T) R (T / A) =
    n R / A does not depend on the round's length: 500 x 0.02 / 10 = 1 request, duty 1 - e^-1 = 0.6321, slowdown
    (1.5 + 2 x 0.6321) / 2 = 1.3821, the round 13.821 s where the path alone took 10 s."""
    shared = shared_host_rollout(10.0, 500, 1.5, 2, 2, 0.0, lambda batch: 0.02)
    assert shared.in_flight == pytest.approx(1.0, rel=1e-6)
    assert shared.duty == pytest.approx(1 - math.exp(-1), rel=1e-6)
    assert shared.seconds == pytest.approx(10 * (1.5 + 2 * (1 - math.exp(-1))) / 2, rel=1e-6)


def test_the_front_ends_work_is_cpu_of_its_own():
    """2 s of front-end work over the round adds 2 / T cores: slowdown s = a + f / s with a = 1.3821 (above) and
    f = 2 / (10 x 2) = 0.1, so s = (a + sqrt(a^2 + 4f)) / 2 = 1.4510."""
    a = (1.5 + 2 * (1 - math.exp(-1))) / 2
    shared = shared_host_rollout(10.0, 500, 1.5, 2, 2, 2.0, lambda batch: 0.02)
    assert shared.slowdown == pytest.approx((a + math.sqrt(a * a + 0.4)) / 2, rel=1e-6)


def test_a_busier_engine_slows_the_path_more():
    slow, quick = (shared_host_rollout(8.0, 512, 1.5, 2, 2, 0.0, lambda b, r=r: r * (1 + 0.1 * b)).seconds
                   for r in (0.05, 0.005))
    assert slow > quick > 8.0


def test_no_path_is_no_round():
    assert shared_host_rollout(0.0, 512, 1.5, 2, 2, 0.0, lambda batch: 0.01).seconds == 0.0
