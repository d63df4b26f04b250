"""A lognormal token length clipped to [1, top], as the twin draws it: its moments in closed form, and the log-scale
location whose clipped lengths average a declared mean (a run's published mean is that of its clipped responses)."""

from __future__ import annotations

import math
from functools import lru_cache
from statistics import NormalDist

_CDF = NormalDist().cdf
_BISECTIONS = 80  # halves a bracket of 20 sigma to below 1e-20 of it: past float precision for any sigma


def _partial_moment(power: int, mu: float, sigma: float, top: float) -> float:
    """E[X^power ; 1 < X <= top] for X = exp(mu + sigma * Z), Z standard normal."""
    shift = mu + power * sigma**2
    inside = _CDF((math.log(top) - shift) / sigma) - _CDF(-shift / sigma)
    return math.exp(power * mu + (power * sigma) ** 2 / 2) * inside if inside > 0 else 0.0


def clipped_moments(mu: float, sigma: float, top: float) -> tuple[float, float]:
    """(E[Y], E[Y^2]) for Y = clip(exp(mu + sigma * Z), 1, top): the mass below 1 counts 1, the mass above top
    counts top."""
    below = _CDF(-mu / sigma)
    above = 1 - _CDF((math.log(top) - mu) / sigma)
    return (below + _partial_moment(1, mu, sigma, top) + top * above,
            below + _partial_moment(2, mu, sigma, top) + top**2 * above)


def naive_mu(mean: float, sigma: float) -> float:
    """The location at which the unclipped lognormal averages `mean`."""
    return math.log(mean) - sigma**2 / 2


@lru_cache(maxsize=4096)
def mu_for_clipped_mean(mean: float, sigma: float, top: float) -> float:
    """The location mu at which lengths clip(exp(mu + sigma * Z), 1, top) average `mean`: the clipped mean rises
    with mu from 1 to top, so bisection within 10 sigma of the unclipped solution; a mean the bracket cannot reach
    (at 1 or top, which the scenario's validation refuses) takes the bracket's end."""
    low = naive_mu(mean, sigma) - 10 * sigma
    high = naive_mu(mean, sigma) + 10 * sigma
    for _ in range(_BISECTIONS):
        middle = (low + high) / 2
        if clipped_moments(middle, sigma, top)[0] < mean:
            low = middle
        else:
            high = middle
    return (low + high) / 2
