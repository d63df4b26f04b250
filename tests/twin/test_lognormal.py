"""The clipped lognormal (twin/lognormal.py): its moments in closed form, and the location that gives a declared
clipped mean."""

import math

import numpy as np
import pytest

from twin.lognormal import clipped_moments, mu_for_clipped_mean, naive_mu


def test_far_from_its_clips_the_lognormal_keeps_its_textbook_moments():
    # mu = ln 1000 - 0.125, sigma 0.5: E[X] = 1000, E[X^2] = 1000^2 e^0.25; neither 1 nor 10^12 is reached
    mean, square = clipped_moments(naive_mu(1000, 0.5), 0.5, 1e12)
    assert mean == pytest.approx(1000, rel=1e-9)
    assert square == pytest.approx(1000**2 * math.exp(0.25), rel=1e-9)


def test_a_lognormal_far_above_its_cap_sits_on_it():
    mean, square = clipped_moments(math.log(5000), 0.01, 2048)  # 90 sigma above the cap
    assert (mean, square) == (pytest.approx(2048, rel=1e-12), pytest.approx(2048**2, rel=1e-12))


def test_the_clipped_moments_match_a_numerical_integral():
    """mu 7, sigma 0.6, top 3072 (the real-weight DeepSeek-R1's response cap): E[clip(e^(7 + 0.6 z), 1, 3072)^k]
    integrated over z on a fine grid."""
    z = np.linspace(-12, 12, 2_000_001)
    density = np.exp(-z**2 / 2) / math.sqrt(2 * math.pi)
    clipped = np.clip(np.exp(7 + 0.6 * z), 1, 3072)
    mean, square = clipped_moments(7.0, 0.6, 3072)
    assert mean == pytest.approx(np.trapezoid(clipped * density, z), rel=1e-7)
    assert square == pytest.approx(np.trapezoid(clipped**2 * density, z), rel=1e-7)


def test_the_location_restores_the_declared_mean_the_cap_took():
    """The real-weight DeepSeek-R1 run (mean response 1,576.6 tokens, cap 3,072, sigma 0.6): a lognormal of that
    mean clipped at the cap averages 1,490.7 (5.45 % short); 0.0680 higher on the log scale it averages the mean."""
    naive = naive_mu(1576.6, 0.6)
    assert clipped_moments(naive, 0.6, 3072)[0] == pytest.approx(1490.7, abs=0.1)
    mu = mu_for_clipped_mean(1576.6, 0.6, 3072)
    assert mu - naive == pytest.approx(0.0680, abs=1e-4)
    assert clipped_moments(mu, 0.6, 3072)[0] == pytest.approx(1576.6, rel=1e-12)
    assert mu_for_clipped_mean(1000, 0.5, 1e9) == pytest.approx(naive_mu(1000, 0.5), abs=1e-12)  # nothing clipped
