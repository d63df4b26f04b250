"""The responses' spread varied around a scenario's (twin.sensitivity): the same mean and cap, a spread the
scenario's own check refuses, and the rollout's direction."""

from pathlib import Path

from twin.evaluate import Evaluation
from twin.scenario import load_scenario
from twin.sensitivity import at_the_mean, spread_note, with_prompt_share, with_sigma
from twin.sim.step import simulate

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"
MOONLIGHT = SCENARIOS / "c6-dapo-moonlight-16b-a2-8-megatron.yaml"


def test_a_varied_spread_keeps_the_mean_and_the_cap():
    """Moonlight's responses: lognormal, mean 411.3, at most 2048, sigma 0.5. At 0.6 the same mean and cap; at 3.0 the
    clipped mean would fall far below 411.3 (the scenario's check refuses it), and 0 is no lognormal."""
    sc = load_scenario(MOONLIGHT)
    dist = sc.workload.response_len
    assert (dist.dist, dist.mean, dist.max, dist.sigma) == ("lognormal", 411.3, 2048, 0.5)
    wider = with_sigma(sc, 0.6).workload.response_len
    assert (wider.mean, wider.max, wider.sigma) == (411.3, 2048, 0.6)
    assert with_sigma(sc, 3.0) is None and with_sigma(sc, 0.0) is None


def test_a_wider_spread_lengthens_the_rollout_and_the_note_says_by_how_much():
    """Two replicas of 256 sequences each end with their longest response: a wider spread draws a longer one (the same
    seed, the same normal draws scaled), so the rollout grows from sigma 0.4 to 0.5 to 0.6; the note gives both."""
    ev = Evaluation(load_scenario(MOONLIGHT))
    base, _ = simulate(ev)
    rollouts = [simulate(ev.with_lengths(with_sigma(ev.sc, s)))[0].stages_s["rollout"] for s in (0.4, 0.6)]
    assert rollouts[0] < base.stages_s["rollout"] < rollouts[1]
    note = spread_note(ev, base, 1, None)
    assert f"sigma 0.4: rollout {rollouts[0]:,.0f} s (" in note and f"sigma 0.6: rollout {rollouts[1]:,.0f} s (" in note
    assert ev.with_lengths(ev.sc).cluster is ev.cluster


def test_fixed_lengths_have_no_spread_to_vary():
    ev = Evaluation(load_scenario(SCENARIOS / "c1-dsr1-a3-128.yaml"))
    assert spread_note(ev, simulate(ev)[0], 1, None) == "length spread: the responses are fixed, no spread to vary"


def test_every_response_at_the_mean_shows_what_the_spread_costs():
    """The real-weight DeepSeek-R1 run (sigma 0.6, one sequence a micro-batch in batch order through 8 pipeline
    stages): at the mean lengths its responses keep mean and cap, and its rollout (no long tail) and update (no 1F1B
    stall on uneven micro-batches) are shorter; the note gives the update beside the rollout and the step."""
    ev = Evaluation(load_scenario(SCENARIOS / "c1-dsr1-a3-128-real-weights.yaml"))
    flat = at_the_mean(ev.sc).workload.response_len
    assert (flat.dist, flat.mean, flat.max) == ("fixed", 1576.6, 3072)
    base = simulate(ev)[0]
    mean = simulate(ev.with_lengths(at_the_mean(ev.sc)))[0]
    assert mean.stages_s["update"] < base.stages_s["update"] and mean.stages_s["rollout"] < base.stages_s["rollout"]
    note = spread_note(ev, base, 1, None)
    assert (f"none (every response at the mean): rollout {mean.stages_s['rollout']:,.0f} s (" in note
            and f"update {mean.stages_s['update']:,.0f} s (" in note)


def test_responses_alike_within_a_prompt_stall_the_pipeline_less():
    """The real-weight DeepSeek-R1 update: one sequence a micro-batch through 8 pipeline stages, a prompt's 16
    responses side by side. With half their log-length variance shared, neighbouring micro-batches are more alike and
    the 1F1B stall smaller, each length drawn from the same lognormal; the note gives the variant."""
    ev = Evaluation(load_scenario(SCENARIOS / "c1-dsr1-a3-128-real-weights.yaml"))
    base = simulate(ev)[0]
    shared = simulate(ev.with_lengths(with_prompt_share(ev.sc, 0.5)))[0]
    mean = simulate(ev.with_lengths(at_the_mean(ev.sc)))[0]
    assert mean.stages_s["update"] < shared.stages_s["update"] < base.stages_s["update"]
    note = spread_note(ev, base, 1, None)
    assert "prompt share 0.5: rollout " in note and f"update {shared.stages_s['update']:,.0f} s (" in note


def test_the_note_gives_the_log_prob_passes_the_step_runs():
    """The real-weight DeepSeek-R1 run skips the old-policy pass and runs the reference pass, its micro-batches of 8
    padded to their longest: at the mean lengths the pass is shorter, and the note gives it, not the skipped one."""
    ev = Evaluation(load_scenario(SCENARIOS / "c1-dsr1-a3-128-real-weights.yaml"))
    base = simulate(ev)[0]
    mean = simulate(ev.with_lengths(at_the_mean(ev.sc)))[0]
    assert mean.stages_s["ref"] < base.stages_s["ref"] and base.stages_s["old_log_prob"] == 0
    note = spread_note(ev, base, 1, None)
    assert f"ref {mean.stages_s['ref']:,.0f} s (" in note and "old_log_prob" not in note
