"""Length distributions (twin/workload.py): the longest of a batch, the TPS numerator it gives."""

from pathlib import Path

import pytest

from twin.scenario import LengthDist, load_scenario
from twin.workload import expected_longest, tokens_per_step_of_longest

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


def test_mindspeed_rls_longest_lengths_count_every_response():
    """DeepSeek-R1 on MindSpeed-RL (C10): 384 x 32 responses, prompts fixed at 256, responses capped at 2048."""
    wl = load_scenario(SCENARIOS / "c5-dsr1-a3-384dies.yaml").workload
    assert tokens_per_step_of_longest(wl) == 12_288 * (256 + 2048)
    assert wl.tokens_per_step == 12_288 * (256 + 840)  # the mean response read off the R1-Zero run's plot
