"""Length distributions (twin/workload.py): the longest of a batch, the TPS numerator it gives, and the spread a
published gear table makes likeliest."""

import math
from pathlib import Path

import numpy as np
import pytest

from twin.cost_models.graph_shapes import graph_rows
from twin.evaluate import Evaluation
from twin.scenario import LengthDist, Workload, load_scenario
from twin.workload import (
    expected_longest,
    length_std,
    sample_batch,
    sample_lengths,
    tokens_per_step_of_longest,
)

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"


def test_the_longest_of_n_draws_is_their_n_over_n_plus_1_quantile_truncated_at_max():
    # lognormal, mean 1000, sigma 0.5: mu = ln 1000 - 0.125; the 0.9 quantile (9 draws) is z = 1.28155
    wide = LengthDist(mean=1000, max=100_000, dist="lognormal", sigma=0.5)
    assert expected_longest(wide, 9) == pytest.approx(1000 * 2.718281828 ** (-0.125 + 0.5 * 1.2815516), rel=1e-6)
    assert expected_longest(wide, 9) == pytest.approx(1674.9, abs=0.1)
    # 12,288 draws reach z = 3.72: 5,806 tokens, above a 2,048 limit, so the limit
    capped = LengthDist(mean=1024, max=2048, dist="lognormal", sigma=0.5)
    assert expected_longest(capped, 12_288) == 2048.0
    assert expected_longest(LengthDist(mean=256, max=1024), 384) == 256.0  # fixed lengths: every one the mean
    # one draw is the draw itself, on average the mean, not the quantile 1/2 (the median, 1000 x e^-0.125 = 882.5)
    assert expected_longest(wide, 1) == 1000.0


def test_mindspeed_rls_longest_lengths_count_every_response():
    """DeepSeek-R1 on MindSpeed-RL (C10): 384 x 32 responses, prompts fixed at 256, responses capped at 2048."""
    wl = load_scenario(SCENARIOS / "c5-dsr1-a3-384dies.yaml").workload
    assert tokens_per_step_of_longest(wl) == 12_288 * (256 + 2048)
    assert wl.tokens_per_step == 12_288 * (256 + 840)  # the mean response read off the R1-Zero run's plot


# cann-recipes-train docs/llm_rl/qwen3_235B_32k_longseq_rl_train_optimization.md section 2.2.1: one MatMul of a
# profiled long-sequence rollout (deepscaler, the GRPO run's engine: each DP rank's sequences at once, a graph for each
# gear) ran the graph of 128 rows at 8K tokens decoded, 32 at 16K, 4 at 24K; the busiest rank sets every rank's gear
PUBLISHED_GEARS = {8192: 128, 16384: 32, 24576: 4}
C10_GRPO = SCENARIOS / "c10-grpo-qwen3-235b-a3-128dies-32k.yaml"


def _table_likelihood(dist: LengthDist, draws: int = 400) -> float:
    """Share of seeded draws of the GRPO run's responses, as the simulation draws them (its DP ranks' sequences at
    once), in which the busiest rank, still decoding, runs the published gear at every length of the table."""
    rc = Evaluation(load_scenario(C10_GRPO)).rollout_cost
    ranks = rc.ro.dp
    per_rank = rc.responses_per_round // ranks
    hits = 0
    for seed in range(draws):
        lengths = sample_lengths(dist, ranks * per_rank, np.random.default_rng(seed)).reshape(ranks, per_rank)
        busiest = {at: (lengths > at).sum(axis=1).max() for at in PUBLISHED_GEARS}
        hits += all(busiest[at] >= 1 and graph_rows(rc.graph_sizes, busiest[at]) == gear
                    for at, gear in PUBLISHED_GEARS.items())
    return hits / draws


def test_c10s_response_spread_is_the_one_its_gear_table_makes_likeliest():
    """C10's deepscaler scenarios draw responses lognormal around the published mean with sigma 0.54 (32 DP ranks of
    256 sequences in the GRPO run): the table holds in about a quarter of the draws there (0.23-0.24 of 1,000 draws
    from 0.53 to 0.55, its peak), in under a tenth 0.05 either side, and in 0.9 % at sigma 0.6 (what the scenarios
    assumed before)."""
    dist = load_scenario(C10_GRPO).workload.response_len
    assert (dist.dist, dist.sigma) == ("lognormal", 0.54)
    likeliest = _table_likelihood(dist)
    assert likeliest >= 0.2
    for sigma in (0.49, 0.59):
        assert _table_likelihood(dist.model_copy(update={"sigma": sigma})) < likeliest / 2


def test_a_prompts_responses_share_the_prompt_share_of_their_log_length_variance():
    """Runs of `group` consecutive lengths answer one prompt: with share 0 the draws are the ungrouped ones, with
    share 1 a run is one length, and at 0.5 the variance of log-lengths within a run is half sigma^2 while every length
    keeps the distribution's mean (mean 1000, sigma 0.6, 16 x 8192 draws)."""
    base = LengthDist(mean=1000, max=100_000, dist="lognormal", sigma=0.6)
    alone = sample_lengths(base, 4096, np.random.default_rng(3))
    assert (sample_lengths(base, 4096, np.random.default_rng(3), group=16) == alone).all()
    same = sample_lengths(base.model_copy(update={"prompt_share": 1.0}), 4096, np.random.default_rng(3), group=16)
    assert (same.reshape(256, 16) == same.reshape(256, 16)[:, :1]).all() and len(np.unique(same)) > 200
    half = sample_lengths(base.model_copy(update={"prompt_share": 0.5}), 16 * 8192, np.random.default_rng(3), group=16)
    logs = np.log(half).reshape(8192, 16)
    assert logs.var(axis=1, ddof=1).mean() == pytest.approx(0.5 * 0.36, rel=0.03)
    assert logs.var() == pytest.approx(0.36, rel=0.03) and half.mean() == pytest.approx(1000, rel=0.01)


def test_a_prompts_length_is_one_for_its_responses():
    dist = LengthDist(mean=300, max=2048, dist="lognormal", sigma=0.5)
    wl = Workload(n=8, prompt_len=dist)  # the recipes' fixed responses: they draw nothing
    prompts, responses = sample_batch(wl, 50, np.random.default_rng(1))  # 7 prompts, the last cut to 2 sequences
    assert len(prompts) == len(responses) == 50 and (responses == round(wl.response_len.mean)).all()
    assert (prompts[:48].reshape(6, 8) == prompts[:48].reshape(6, 8)[:, :1]).all()
    assert prompts[48] == prompts[49] and len(np.unique(prompts)) == 7
    rng = np.random.default_rng(1)
    assert (sample_batch(Workload(n=8), 50, rng)[0] == round(Workload().prompt_len.mean)).all()
    assert rng.random() == np.random.default_rng(1).random()  # fixed lengths draw nothing


def test_a_prompt_share_needs_a_lognormal_and_belongs_to_the_responses():
    with pytest.raises(ValueError, match="prompt_share needs a lognormal distribution, not 'fixed'"):
        LengthDist(mean=300, max=2048, prompt_share=0.5)
    shared = LengthDist(mean=300, max=2048, dist="lognormal", prompt_share=0.5)
    with pytest.raises(ValueError, match="a prompt has one length"):
        Workload(prompt_len=shared)
    assert Workload(response_len=shared).response_len.prompt_share == 0.5


def test_clipped_lognormal_draws_average_the_declared_mean_and_spread():
    """The real-weight DeepSeek-R1's responses (mean 1,576.6, sigma 0.6, cap 3,072): 10^6 seeded draws average the
    declared mean (a run's published mean is that of its clipped responses; drawn around ln(mean) - sigma^2 / 2 they
    averaged 5.45 % less) and spread as `length_std` says."""
    dist = LengthDist(mean=1576.6, max=3072, dist="lognormal", sigma=0.6)
    drawn = sample_lengths(dist, 1_000_000, np.random.default_rng(0))
    assert drawn.mean() == pytest.approx(1576.6, rel=2e-3)
    assert drawn.std() == pytest.approx(length_std(dist), rel=2e-3)
    assert length_std(dist) < 1576.6 * math.sqrt(math.expm1(0.36))  # the unclipped lognormal's spread


def test_an_empirical_files_spread_is_that_of_its_clipped_draws(tmp_path):
    """Lengths 10, 20 and 5,000 with max 100: drawn as 10, 20 and 100, whose standard deviation is 40.28 (the file's
    own, 2,350.0, would have the twin pack groups of sequences as if some ran 5,000 tokens)."""
    lengths = tmp_path / "lengths.txt"
    lengths.write_text("10\n20\n5000\n")
    dist = LengthDist(mean=40, max=100, dist="empirical", file=str(lengths))
    assert length_std(dist) == pytest.approx(40.28, abs=0.01)
    assert set(sample_lengths(dist, 300, np.random.default_rng(0))) == {10, 20, 100}
