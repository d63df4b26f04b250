"""What a fit aims at and a report judges: the measured quantities of scenarios (stage seconds, step,
tokens/s, and ratios between cases) and how to read the same quantity off predicted stage times."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from twin.scenario import Scenario
from twin.workload import tokens_per_step_of_longest

if TYPE_CHECKING:
    from twin.disaggregated import SyncEvaluation
    from twin.evaluate import Evaluation
    from twin.profile import Profile

END_TO_END = ("step", "tps_per_card", "tps_per_device", "rollout_tps_per_card")


@dataclass(frozen=True)
class Target:
    """One measured quantity of one case; with `reference`, the target is its ratio to that case's."""

    case: str
    quantity: str  # stage:<name> | step | tps_per_card | tps_per_device | rollout_tps_per_card
    measured: float
    reference: str | None = None
    reference_measured: float | None = None

    @property
    def label(self) -> str:
        rel = f" / {self.reference}" if self.reference else ""
        return f"{self.case}{rel}: {self.quantity}"

    @property
    def goal(self) -> float:
        return self.measured / self.reference_measured if self.reference_measured else self.measured

    @property
    def is_stage(self) -> bool:
        return self.quantity.startswith("stage:")

    @property
    def stage(self) -> str:
        """The stage the quantity measures: its own, `rollout` for the rollout's throughput, else `step` (the step
        and the step's throughput)."""
        if self.is_stage:
            return self.quantity.removeprefix("stage:")
        return "rollout" if self.quantity == "rollout_tps_per_card" else "step"

    def error(self, predicted: float) -> float:
        """Relative error of `predicted`; for a zero goal (a skipped stage), the difference in its own unit."""
        return (predicted - self.goal) / (self.goal or 1.0)


def measured_values(sc: Scenario) -> dict[str, float]:
    """The measured quantities of a case by target quantity name (empty without `measured`)."""
    m = sc.measured
    if m is None:
        return {}
    values = {f"stage:{k}": v for k, v in m.stages_s.items()}
    if m.step_s is not None:
        values["step"] = m.step_s
    for q in END_TO_END[1:]:
        if getattr(m, q) is not None:
            values[q] = getattr(m, q)
    return values


def case_targets(cases: list[Scenario]) -> list[Target]:
    """Every measured quantity of the cases; `relative_to` turns a case's values into ratios."""
    by_name = {c.name: c for c in cases}
    out = []
    for sc in cases:
        m = sc.measured
        if m is None or m.reference_only:
            continue
        ref = by_name.get(m.relative_to) if m.relative_to else None
        if m.relative_to and ref is None:
            raise ValueError(f"case {sc.name} is relative to {m.relative_to}, which is not among the cases")
        ref_values = measured_values(ref) if ref is not None else {}
        for q, v in measured_values(sc).items():
            if ref is None:
                out.append(Target(sc.name, q, v))
            elif q in ref_values:
                out.append(Target(sc.name, q, v, ref.name, ref_values[q]))
    return out


def evaluation(sc: Scenario, profile: Profile | None, base_dir: Path | None = None) -> Evaluation | SyncEvaluation:
    """The twin's evaluation of a case: of its step, or of a disaggregated run's weight sync; building it checks
    the case's model, cluster kind, layout and profile (files named relative to `base_dir`)."""
    from twin.disaggregated import SyncEvaluation, is_separate
    from twin.evaluate import Evaluation

    if is_separate(sc):
        return SyncEvaluation(sc, profile, base_dir=base_dir)
    return Evaluation(sc, profile, base_dir=base_dir)


def predicted_stages(ev: Evaluation | SyncEvaluation) -> dict[str, float]:
    """The stage seconds of one simulated step; a weight sync's own seconds (it has no step to simulate)."""
    from twin.evaluate import Evaluation
    from twin.sim.step import simulate

    return simulate(ev)[0].stages_s if isinstance(ev, Evaluation) else ev.stage_times()


def floor_of(target: Target, ev: Evaluation | SyncEvaluation) -> float | None:
    """The compute floor of a target's training stage (twin.cost_models.floors); None for any other quantity,
    for a ratio to another case and for a stage measured as 0 (skipped: no pass ran)."""
    stage = target.quantity.removeprefix("stage:")
    if not target.is_stage or target.reference or target.goal == 0:
        return None
    return ev.training_floors.get(stage)


def below(target: Target, floor: float | None) -> bool:
    """Measured faster than its compute floor: the case's assumed workload cannot be what ran."""
    return floor is not None and target.goal < floor


def below_floor_refusal(targets: list[Target], evs: Mapping[str, Evaluation | SyncEvaluation]) -> str | None:
    """One line naming the first target measured below its compute floor, or None."""
    for t in targets:
        floor = floor_of(t, evs[t.case])
        if below(t, floor):
            return (f"case {t.case}: measured {t.quantity.removeprefix('stage:')} {t.goal:.4g} s is below the "
                    f"{floor:.4g} s its workload's FLOPs take at the devices' peak (twin/cost_models/floors.py): the "
                    "scenario's lengths or batch cannot be what ran; correct them before fitting")
    return None


STEP_LIKE = ("step", "tps_per_card", "tps_per_device")  # one number: the step time, restated as throughput
SUM_TOLERANCE = 0.01  # a measured step within 1 % of its measured stages' sum is that sum restated


def distinct_targets(targets: list[Target], cases: list[Scenario]) -> list[Target]:
    """The targets that are distinct measured numbers: a zero (a skipped stage) is left out, a TPS that
    restates the case's step or rollout time counts once, and a step that is the sum of the case's measured
    stages counts with them, not again."""
    by_name = {c.name: c for c in cases}
    out: list[Target] = []
    for key in dict.fromkeys((t.case, t.reference) for t in targets):
        group = [t for t in targets if (t.case, t.reference) == key and t.goal != 0]
        quantities = {t.quantity for t in group}
        step_like = [t for t in group if t.quantity in STEP_LIKE]
        keep_step = step_like[0] if step_like and not _step_is_stage_sum(by_name[key[0]], key[1]) else None
        for t in group:
            if t.quantity == "rollout_tps_per_card" and "stage:rollout" in quantities:
                continue
            if t.quantity in STEP_LIKE and t is not keep_step:
                continue
            out.append(t)
    return out


def _step_is_stage_sum(sc: Scenario, reference: str | None) -> bool:
    m = sc.measured
    if reference is not None or m is None or not m.stages_s:
        return False
    step = m.step_s
    if step is None and m.tps_per_card:
        step = tps_tokens(sc) / m.tps_per_card / sc.cluster.cards
    return step is not None and abs(sum(m.stages_s.values()) - step) <= SUM_TOLERANCE * step


def tps_tokens(sc: Scenario) -> float:
    """The tokens a case's published TPS counts per step (`measured.tps_tokens`): the step's at the mean
    lengths, every response at the step's longest lengths, or every generated round's at the mean lengths."""
    wl, counted = sc.workload, sc.measured.tps_tokens if sc.measured is not None else "mean"
    if counted == "max":
        return tokens_per_step_of_longest(wl)
    if counted == "generated":
        return wl.generated_responses * (wl.prompt_len.mean + wl.response_len.mean)
    return wl.tokens_per_step


def unusable_prediction(profile_id: str, predicted: Sequence[float], targets: Sequence[Target],
                        positive: bool = False) -> str | None:
    """'profile P predicts V for TARGET' for the first prediction that is not a finite number (with `positive`, not
    a positive one either), else None: a stage predicted as 0 s or without bound."""
    for value, target in zip(predicted, targets, strict=True):
        if not math.isfinite(value) or (positive and value <= 0):
            return f"profile {profile_id} predicts {value:g} for {target.label}"
    return None


def divided(a: float, b: float) -> float:
    """a / b of non-negative values; for b = 0 (a predicted stage of 0 s) inf, or NaN when a is 0 too, never a
    ZeroDivisionError: the caller reports a non-finite value."""
    if b:
        return a / b
    return math.inf if a else math.nan


def quantity(stages: Mapping[str, float], sc: Scenario, devices: int, name: str) -> float:
    """The value of quantity `name` for one step with these stage seconds (the step is their sum)."""
    if name.startswith("stage:"):
        return stages[name.removeprefix("stage:")]
    if name == "rollout_tps_per_card":
        return divided(tps_tokens(sc), stages["rollout"]) / sc.cluster.cards
    step = sum(stages.values())
    if name == "step":
        return step
    return divided(tps_tokens(sc), step) / {"tps_per_card": sc.cluster.cards, "tps_per_device": devices}[name]


def target_values(targets: list[Target], stages: Mapping[str, Mapping[str, float]],
                  evs: Mapping[str, Evaluation | SyncEvaluation]) -> list[float]:
    """The value of each target under the stage seconds of every case (`stages[case]`)."""
    out = []
    for t in targets:
        v = quantity(stages[t.case], evs[t.case].sc, evs[t.case].devices, t.quantity)
        if t.reference:
            v = divided(v, quantity(stages[t.reference], evs[t.reference].sc, evs[t.reference].devices, t.quantity))
        out.append(v)
    return out
