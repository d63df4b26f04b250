"""Token-length distributions: seeded sampling and quantiles (fixed, lognormal or an empirical file)."""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import lru_cache
from statistics import NormalDist

import numpy as np

from twin.errors import TwinError
from twin.fileio import read_text
from twin.lognormal import clipped_moments, mu_for_clipped_mean
from twin.scenario import LengthDist, Workload

# Sequences drawn per simulated step at most (131,072: 16x the 8192 responses of the recipes' step). Past it
# the simulation draws this many representative sequences, each standing for several, scales the
# sequence-proportional times and says so in its notes: memory and time stay bounded for any batch.
MAX_SEQUENCES = 1 << 17


def represented(total: int, cap: int = MAX_SEQUENCES) -> tuple[int, float]:
    """(sequences to draw, real sequences each drawn one stands for) for `total` sequences."""
    drawn = min(total, cap)
    return drawn, total / drawn


def sampled_note(what: str, total: int, drawn: int) -> str:
    """The note of a simulation that drew fewer sequences than the step has."""
    return (f"{what}: {drawn:,} representative sequences of {total:,} simulated (memory and time stay bounded); "
            f"its times scaled by {total / drawn:.3g}")


@lru_cache(maxsize=32)
def _empirical(path: str) -> np.ndarray:
    label = f"empirical length file {path}"
    try:
        values = np.array([float(x) for x in read_text(path, label).split()], dtype=float)
    except ValueError:
        raise TwinError(f"{label}: expected numbers, one per line") from None
    if values.size == 0 or not np.isfinite(values).all() or (values <= 0).any():
        raise TwinError(f"{label}: needs at least one length, every one positive and finite")
    return np.sort(values)


def _lognormal_mu(dist: LengthDist) -> float:
    """The location whose lengths, clipped to [1, max], average the declared mean (a run's published mean is that of
    its clipped responses)."""
    return mu_for_clipped_mean(dist.mean, dist.sigma, dist.max)


def sample_batch(wl: Workload, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(prompt, response) lengths of `n` sequences of a batch in verl's order: a prompt's `wl.n` responses side by side
    (verl repeats a prompt's samples interleaved), one prompt length each run, the responses sharing
    `response_len.prompt_share` of their log-length variance within it."""
    prompts = _per_prompt(lambda k: sample_lengths(wl.prompt_len, k, rng), wl.n, n)
    return prompts, sample_lengths(wl.response_len, n, rng, group=wl.n)


def _per_prompt(draw: Callable[[int], np.ndarray], group: int, n: int) -> np.ndarray:
    """One value a prompt (`draw(prompts)` draws them), repeated for each of its `group` sequences, the batch cut to
    `n`."""
    return np.repeat(draw(-(-n // group)), group)[:n]


def sample_lengths(dist: LengthDist, n: int, rng: np.random.Generator, group: int = 1) -> np.ndarray:
    """`n` integer lengths in [1, max]; with `group` > 1, each run of `group` consecutive lengths answers one prompt
    and shares `dist.prompt_share` of its log-length variance with the rest of the run (each length keeps the
    distribution's own lognormal)."""
    if dist.dist == "fixed":
        return np.full(n, max(1, round(dist.mean)), dtype=np.int64)
    if dist.dist == "lognormal" and dist.prompt_share and group > 1:
        shared = _per_prompt(rng.standard_normal, group, n)
        z = math.sqrt(dist.prompt_share) * shared + math.sqrt(1 - dist.prompt_share) * rng.standard_normal(n)
        raw = np.exp(_lognormal_mu(dist) + dist.sigma * z)
    elif dist.dist == "lognormal":
        raw = rng.lognormal(_lognormal_mu(dist), dist.sigma, size=n)
    else:
        raw = rng.choice(_empirical(str(dist.file)), size=n, replace=True)
    return np.clip(np.rint(raw), 1, dist.max).astype(np.int64)


def length_quantile(dist: LengthDist, q: float) -> float:
    """The q-quantile of the distribution (before truncation at max; a lognormal's at the location that gives the
    declared mean after it)."""
    if dist.dist == "fixed":
        return dist.mean
    if dist.dist == "lognormal":
        return math.exp(_lognormal_mu(dist) + dist.sigma * NormalDist().inv_cdf(min(max(q, 1e-9), 1 - 1e-9)))
    values = _empirical(str(dist.file))
    return float(np.quantile(values, q))


def expected_longest(dist: LengthDist, draws: float) -> float:
    """The longest of `draws` lengths, as the quantile n / (n + 1) (where the largest of n draws falls on
    average, in probability), truncated at max: for a batch's longest prompt or response. One draw (or fewer) is
    the draw itself, on average the mean (the quantile 1/2 would be the median, short of a skewed mean)."""
    if draws <= 1:
        return float(dist.mean)
    return min(float(dist.max), length_quantile(dist, draws / (draws + 1)))


@lru_cache(maxsize=64)
def length_std(dist: LengthDist) -> float:
    """Standard deviation of the lengths as drawn, clipped to [1, max] (cached: the planner's memory screen asks it
    of one workload for every layout it probes)."""
    if dist.dist == "fixed":
        return 0.0
    if dist.dist == "lognormal":
        mean, square = clipped_moments(_lognormal_mu(dist), dist.sigma, dist.max)
        return math.sqrt(max(0.0, square - mean**2))
    return float(np.std(np.clip(_empirical(str(dist.file)), 1, dist.max)))


def largest_sequences_tokens(wl: Workload, sequences: int, draws: int) -> float:
    """The largest of `draws` groups of `sequences` sequences, in tokens (prompt and response): where the
    largest of n draws falls on average (the quantile n / (n + 1)) of the group's sum, taken as normal (the
    sum of independent lengths), between the group's mean and `sequences` full-length sequences."""
    mean = sequences * (wl.prompt_len.mean + wl.response_len.mean)
    spread = math.sqrt(sequences * (length_std(wl.prompt_len) ** 2 + length_std(wl.response_len) ** 2))
    z = NormalDist().inv_cdf(draws / (draws + 1)) if draws > 1 else 0.0
    return min(float(sequences * wl.max_seq_len), mean + z * spread)


def longest_sequence(wl: Workload, prompts: int, responses: int) -> float:
    """The longest prompt of `prompts` draws plus the longest response of `responses` (`expected_longest`)."""
    return expected_longest(wl.prompt_len, prompts) + expected_longest(wl.response_len, responses)


def tokens_per_step_of_longest(wl: Workload) -> float:
    """The TPS numerator of MindSpeed-RL's log_max_throughput (`Measured.tps_tokens: max`): every response
    counted at the step's longest prompt plus its longest response (global_batch prompts, responses answers)."""
    return wl.responses * longest_sequence(wl, wl.global_batch, wl.responses)
