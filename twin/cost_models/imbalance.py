"""MoE routing imbalance: how much more work the busiest expert-parallel rank gets than the mean.

Every EP step (dispatch, grouped GEMM, combine) waits for the busiest rank, so its load sets the time. A
rank's load is the token-expert pairs routed to its experts. Two sources of spread, independent:

- learned routing prefers some experts: the experts' shares of the routed pairs spread with a coefficient
  of variation `cv` (the profile's `expert_load_cv`, from published per-expert load statistics). A rank
  holds `E/P` experts; their summed share spreads with cv / sqrt(E/P);
- sampling: `pairs` pairs land on `P` ranks as a multinomial draw (balls in bins), so one rank's count
  has relative spread sqrt((1 - 1/P) / (pairs / P)).

The maximum of `P` such loads sits about sqrt(2 ln P) standard deviations above the mean (the largest of P
normal draws, asymptotically), so imbalance = 1 + sqrt(2 ln P) * sqrt(cv_rank^2 + cv_sample^2), at most P
(every pair on one rank). Forced-balanced routing (the recipes' VLLM_ENABLE_FIX_ROUTE) has neither spread.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike


def gaussian_max_sigmas(ranks: int) -> float:
    """Standard deviations by which the largest of `ranks` normal draws exceeds their mean (sqrt(2 ln P))."""
    return math.sqrt(2 * math.log(ranks)) if ranks > 1 else 0.0


def expert_imbalance(ranks: int, experts: int, top_k: int, tokens: ArrayLike, load_cv: float,
                     routing: str = "learned") -> ArrayLike:
    """Busiest-rank load over the mean load of an EP group of `ranks` ranks holding `experts` routed experts,
    when `tokens` tokens (in the whole group) each pick `top_k` experts.

    `forced_balanced` routing spreads every token's experts evenly: the factor is 1."""
    tokens = np.asarray(tokens, dtype=float)
    if ranks <= 1 or routing == "forced_balanced":
        return np.ones_like(tokens) if tokens.ndim else 1.0
    per_rank = max(1, experts // ranks)
    cv_rank = load_cv / math.sqrt(per_rank)
    pairs = np.maximum(tokens * top_k, 1.0)
    cv_sample_sq = (1 - 1 / ranks) * ranks / pairs
    return np.minimum(1 + gaussian_max_sigmas(ranks) * np.sqrt(cv_rank**2 + cv_sample_sq), ranks)
