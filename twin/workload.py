"""Token-length distributions: seeded sampling and quantiles (fixed, lognormal or an empirical file)."""

from __future__ import annotations

import math
from functools import lru_cache
from pathlib import Path
from statistics import NormalDist

import numpy as np

from twin.errors import TwinError
from twin.scenario import LengthDist


@lru_cache(maxsize=32)
def _empirical(path: str) -> np.ndarray:
    p = Path(path)
    if not p.is_file():
        raise TwinError(f"empirical length file {path}: no such file")
    try:
        values = np.array([float(x) for x in p.read_text().split()], dtype=float)
    except ValueError:
        raise TwinError(f"empirical length file {path}: expected numbers, one per line") from None
    if values.size == 0 or (values <= 0).any():
        raise TwinError(f"empirical length file {path}: needs at least one positive length")
    return np.sort(values)


def _lognormal_mu(dist: LengthDist) -> float:
    return math.log(dist.mean) - dist.sigma**2 / 2  # so that the untruncated mean is dist.mean


def sample_lengths(dist: LengthDist, n: int, rng: np.random.Generator) -> np.ndarray:
    """`n` integer lengths in [1, max]."""
    if dist.dist == "fixed":
        return np.full(n, max(1, round(dist.mean)), dtype=np.int64)
    if dist.dist == "lognormal":
        raw = rng.lognormal(_lognormal_mu(dist), dist.sigma, size=n)
    else:
        raw = rng.choice(_empirical(str(dist.file)), size=n, replace=True)
    return np.clip(np.rint(raw), 1, dist.max).astype(np.int64)


def length_quantile(dist: LengthDist, q: float) -> float:
    """The q-quantile of the distribution (before truncation at max)."""
    if dist.dist == "fixed":
        return dist.mean
    if dist.dist == "lognormal":
        return math.exp(_lognormal_mu(dist) + dist.sigma * NormalDist().inv_cdf(min(max(q, 1e-9), 1 - 1e-9)))
    values = _empirical(str(dist.file))
    return float(np.quantile(values, q))
