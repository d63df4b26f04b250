"""How far a simulated step moves with what its scenario assumes where the source publishes only a mean: the spread
of the response lengths. A rollout ends with its longest response and runs its last steps at the batch its longest
responses leave, so a lognormal's sigma, rarely published, can move a rollout of few sequences a replica by a fifth
(C10's rollout-TP ablation: -19 / +23 % at sigma 0.44 / 0.64 around its 0.54); uneven micro-batches in batch
order stall a 1F1B pipeline, each waiting for the longest of the replicas in lockstep with it (the real-weight
DeepSeek-R1 update: 281 s with every response at the mean, 382 s at sigma 0.6); and a micro-batch padded to its
longest sequence runs every one at that length (that run's reference pass: 177 s at sigma 0.6). A 1F1B stage's
neighbouring micro-batches are a prompt's responses (verl keeps them side by side), so the stall and the padding
follow the spread within a prompt, which sources do not publish: the note also simulates half the log-length
variance shared by a prompt's responses (`prompt_share`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import ValidationError

from twin.scenario import LengthDist, Scenario

if TYPE_CHECKING:
    from twin.evaluate import Evaluation
    from twin.results import SimulationResult

SIGMA_STEP = 0.1  # the spreads simulated: the scenario's sigma this much narrower and wider
VARIED_STAGES = ("rollout", "old_log_prob", "ref", "update")  # the stages the note gives, where the step runs them
PROMPT_SHARE = 0.5  # the within-prompt correlation simulated where the scenario has none (and none where it has one)


def with_sigma(sc: Scenario, sigma: float) -> Scenario | None:
    """`sc` with lognormal responses of spread `sigma` (same mean and cap); None where no such distribution keeps
    the declared mean under the cap (the scenario's own check) or `sigma` is not a spread."""
    try:
        return _with_responses(sc, {"sigma": sigma})
    except ValidationError:
        return None


def with_prompt_share(sc: Scenario, share: float) -> Scenario:
    """`sc` with `share` of its responses' log-length variance common to a prompt's responses."""
    return _with_responses(sc, {"prompt_share": share})


def at_the_mean(sc: Scenario) -> Scenario:
    """`sc` with every response at its mean length (no spread)."""
    return _with_responses(sc, {"dist": "fixed"})


def _with_responses(sc: Scenario, changes: dict[str, object]) -> Scenario:
    """`sc` with its response lengths' distribution changed as `changes` say (validated as a scenario's)."""
    dist = LengthDist.model_validate(sc.workload.response_len.model_dump() | changes)
    return sc.model_copy(update={"workload": sc.workload.model_copy(update={"response_len": dist})})


def spread_note(ev: Evaluation, base: SimulationResult, steps: int, seed: int | None) -> str:
    """One line: the rollout, the log-prob passes the step runs, the update and the step simulated (same steps, same
    seed) with the responses' spread `SIGMA_STEP` narrower and wider than the scenario's, with `PROMPT_SHARE` of it
    common to a prompt's responses (none where the scenario has a share), and with none, beside `base`, the
    scenario's own result."""
    from twin.sim.step import simulate

    dist = ev.sc.workload.response_len
    if dist.dist != "lognormal":
        return f"length spread: the responses are {dist.dist}, no spread to vary"
    variants: list[tuple[str, Scenario | None]] = [
        (f"sigma {sigma:.2g}", with_sigma(ev.sc, sigma))
        for sigma in (dist.sigma - SIGMA_STEP, dist.sigma + SIGMA_STEP) if sigma > 0]  # no narrower lognormal at 0
    share = 0.0 if dist.prompt_share else PROMPT_SHARE
    variants.append((f"prompt share {share:g}", with_prompt_share(ev.sc, share)))
    variants.append(("none (every response at the mean)", at_the_mean(ev.sc)))
    parts = []
    for label, varied in variants:
        if varied is None:
            parts.append(f"{label}: does not keep the mean under the cap")
            continue
        other, _ = simulate(ev.with_lengths(varied), steps=steps, seed=seed)
        moved = [f"{stage} {other.stages_s[stage]:,.0f} s ({_change(other.stages_s[stage], base.stages_s[stage])})"
                 for stage in VARIED_STAGES if base.stages_s.get(stage)]
        parts.append(f"{label}: {', '.join(moved)}, step {other.step_s:,.0f} s ({_change(other.step_s, base.step_s)})")
    return (f"length spread: responses lognormal with sigma {dist.sigma:g}, prompt share {dist.prompt_share:g} (the "
            "scenario's: sources rarely publish them); " + "; ".join(parts))


def _change(value: float, base: float) -> str:
    return f"{(value / base - 1) * 100:+.1f} %" if base else "n/a"
