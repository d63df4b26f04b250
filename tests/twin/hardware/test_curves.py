"""Efficiency curves: log-x linear interpolation between sourced points, clamped at both ends, vectorised."""

import math

import numpy as np
import pytest

from twin.errors import TwinError
from twin.hardware import CLUSTER_KINDS, DEVICES, Curve, LinkTier

SRC = {"source": "test", "confidence": "L"}


def curve(*points: tuple[float, float]) -> Curve:
    return Curve(points=[{"x": x, "value": v, **SRC} for x, v in points])


def test_values_between_points_are_linear_in_log_x():
    c = curve((10, 0.2), (1000, 0.6))
    assert c(100) == pytest.approx(0.4)  # log10 100 is halfway between 1 and 3
    assert c(10 ** 1.5) == pytest.approx(0.3)  # a quarter of the way
    assert c(10) == 0.2 and c(1000) == 0.6


def test_clamped_at_both_ends():
    c = curve((10, 0.2), (1000, 0.6))
    assert c(1) == 0.2 and c(0) == 0.2 and c(1e12) == 0.6


def test_vectorised_equals_scalar():
    c = curve((1e6, 0.05), (1e9, 0.5), (1e12, 0.9))
    xs = np.array([[0.0, 3e5, 1e6], [2e7, 5e10, 4e13]])
    out = c(xs)
    assert out.shape == xs.shape
    assert out.tolist() == [[c(float(x)) for x in row] for row in xs]
    assert isinstance(c(3e7), float)


def test_points_must_increase():
    with pytest.raises(ValueError, match="strictly increasing"):
        curve((100, 0.5), (10, 0.6))


def tier(*curves: dict) -> LinkTier:
    fig = {"value": 100.0, **SRC}
    return LinkTier(name="ub", bandwidth_gbs=fig, latency_us={"value": 2.0, **SRC}, switched=True,
                    collective_efficiency=list(curves))


def flat(value: float, peers: int, collective: str = "any") -> dict:
    return {"collective": collective, "peers": peers, "points": [{"x": 1e6, "value": value, **SRC}]}


def test_tier_interpolates_in_log_peers_and_clamps():
    t = tier(flat(0.8, 1), flat(0.4, 4))
    assert t.efficiency(1e6, peers=2) == pytest.approx(0.6)  # log 2 is halfway between log 1 and log 4
    assert t.efficiency(1e6, peers=1) == 0.8 and t.efficiency(1e6, peers=100) == 0.4
    peers = np.array([1, 2, 4, 8])
    assert t.efficiency(np.full(4, 1e6), peers=peers).tolist() == pytest.approx([0.8, 0.6, 0.4, 0.4])
    assert t.efficiency(np.array([1e3, 1e9]), peers=2).tolist() == pytest.approx([0.6, 0.6])
    assert t.latency_s == pytest.approx(2e-6) and t.bandwidth_bytes_s == 1e11


def test_tier_collective_falls_back_to_any():
    t = tier(flat(0.8, 1), flat(0.3, 1, "ep_dispatch"))
    assert t.efficiency(1e6, collective="ep_dispatch") == 0.3
    assert t.efficiency(1e6, collective="all_reduce") == 0.8
    with pytest.raises(ValueError, match="collective 'any'"):
        tier(flat(0.3, 1, "ep_dispatch"))


def test_shipped_910b_figures_and_gemm_curve():
    d = DEVICES["910b"]
    assert d.peak_flops() == pytest.approx(353.8e12) and d.hbm_bandwidth_bytes_s == 1.6e12
    assert d.efficiency("gemm", 2 * 8192 ** 3) == pytest.approx(0.927)  # measured 328 / 353.8
    # between the derived points 1e9 (0.467) and 1e10 (0.844): log10 3 of the way
    assert d.efficiency("gemm", 3e9) == pytest.approx(0.467 + math.log10(3) * (0.844 - 0.467))
    with pytest.raises(TwinError, match="no peak for dtype 'fp8'"):
        d.peak_flops("fp8")
    with pytest.raises(TwinError, match="no efficiency curve 'conv'"):
        d.efficiency("conv", 1.0)


def test_shipped_a3_ep_curves():
    ub = CLUSTER_KINDS["a3"].tier("ub")
    assert ub.efficiency(2.349e8, peers=7, collective="ep_dispatch") == pytest.approx(146 / 196, abs=1e-3)
    assert ub.efficiency(7.34e6, peers=31, collective="ep_dispatch") == pytest.approx(0.245)
    # EP128 beyond the last peers curve: clamped to it
    assert ub.efficiency(4.698e8, peers=500, collective="ep_combine") == pytest.approx(81 / 196, abs=1e-3)


def test_a3_decode_gemm_is_its_weight_read_then_its_compute():
    """The C10 document's profiled decode MatMul on a 910C die ([M, 2048] x [4096, 2048], section 2.2.1): 15, 19, 23
    and 32 us at M = 4, 32, 128 and 256. The die's curves give a weight read of 16.8 MB at the memory curve and a
    compute at the GEMM curve; their sum lands within 25 % of every measurement, their maximum (a roofline) misses
    M = 128 and 256 by a third and a half: the file's gemm_load_serial 1 says the sum."""
    d = DEVICES["a3-die"]
    assert d.gemm_serial == 1.0 and DEVICES["h20"].gemm_serial == 0.0  # unset: a roofline
    weights = 4096 * 2048 * 2
    read = weights / (d.hbm_bandwidth_bytes_s * d.efficiency("memory", weights))
    for m, measured_us in ((4, 15), (32, 19), (128, 23), (256, 32)):
        flops = 2 * m * 2048 * 4096
        compute = flops / (d.peak_flops() * d.efficiency("gemm", flops))
        assert (read + compute) * 1e6 == pytest.approx(measured_us, rel=0.25)
        if m >= 128:
            assert max(read, compute) * 1e6 < 0.7 * measured_us


def test_a_serial_share_is_at_most_one():
    raw = DEVICES["a3-die"].model_dump(by_alias=True)
    raw["gemm_load_serial"] = {"value": 1.5, **SRC}
    with pytest.raises(ValueError, match=r"gemm_load_serial 1\.5 is not a share of at most 1"):
        type(DEVICES["a3-die"]).model_validate(raw)
