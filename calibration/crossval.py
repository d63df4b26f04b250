"""Leave-one-case-out cross-validation of a case-fitted profile (DESIGN section 7).

For each case the profile was fitted on, the same parameters (its provenance's `fit.freed`) are refitted
from the base profile on the other cases, and the held-out case is predicted by the simulation. The mean
absolute relative error per stage and of the step becomes the profile's `cross_validation`, the band of
every prediction made from it (twin.uncertainty). A case that only serves as another's ratio reference is
never held out alone. A refit whose data no longer identifies every parameter still runs (the error it
shows is the honest cost of the missing case) and says so in `notes`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from calibration.errors import CalibrationError
from calibration.fit import CaseFit
from calibration.targets import STEP_LIKE, Target, case_targets, evaluation, predicted_stages, target_values
from twin.profile import CrossValidation, Profile
from twin.scenario import Scenario
from twin.uncertainty import domain_of


@dataclass(frozen=True)
class HeldOut:
    target: Target
    predicted: float

    @property
    def error(self) -> float:
        return self.target.error(self.predicted)


@dataclass
class CrossValidated:
    rows: list[HeldOut]
    result: CrossValidation
    notes: list[str] = field(default_factory=list)


def _mean_abs(values: list[float]) -> float:
    return sum(map(abs, values)) / len(values)


def leave_one_out(profile: Profile, base: Profile, cases: list[Scenario], outer: int = 1,
                  progress: Callable[[str], None] | None = None) -> CrossValidated:
    """Refit `profile`'s freed parameters from `base` without each of its fitting cases and predict it."""
    say = progress or (lambda _msg: None)
    record = profile.provenance.fit
    if record is None:
        raise CalibrationError(f"profile {profile.id} records no case fit (provenance.fit): nothing to cross-validate")
    by_name = {c.name: c for c in cases}
    missing = [n for n in profile.provenance.cases if n not in by_name]
    if missing:
        raise CalibrationError(f"the fitting case {missing[0]} of profile {profile.id} is not among the cases given")
    fit_cases = [by_name[n] for n in profile.provenance.cases]
    held = [c for c in fit_cases if c.measured is not None and not c.measured.reference_only]
    rows: list[HeldOut] = []
    notes: list[str] = []
    for sc in held:
        rest = [c for c in fit_cases if c.name != sc.name]
        say(f"leave out {sc.name}: refitting {len(record.freed)} parameters on {len(rest)} cases")
        try:
            fitter = CaseFit(base, rest)
            identified = fitter.identify(record.freed)
            why = identified.refusal()
            if why:
                notes.append(f"without {sc.name}: {why}")
            refit = fitter.run(f"{profile.id}-without-{sc.name}", identified, outer=outer, enforce=False).profile
        except ValueError as exc:
            raise CalibrationError(f"refit without {sc.name}: {exc}") from None
        targets = [t for t in case_targets(fit_cases) if t.case == sc.name and t.goal != 0]
        needed = {sc.name, *(t.reference for t in targets if t.reference)}
        evs = {n: evaluation(by_name[n], refit) for n in needed}
        stages = {n: predicted_stages(ev) for n, ev in evs.items()}
        rows += [HeldOut(t, p) for t, p in zip(targets, target_values(targets, stages, evs), strict=True)]
    if not rows:
        raise CalibrationError(f"none of the fitting cases of profile {profile.id} can be held out")
    by_stage: dict[str, list[float]] = {}
    for r in rows:
        by_stage.setdefault(r.target.stage, []).append(r.error)
    step_errors = [r.error for r in rows if r.target.quantity in STEP_LIKE]
    case_errors: dict[str, dict[str, float]] = {}
    for r in rows:
        label = f"{r.target.quantity} / {r.target.reference}" if r.target.reference else r.target.quantity
        case_errors.setdefault(r.target.case, {})[label] = round(r.error, 5)
    cv = CrossValidation(
        cases=[c.name for c in held],
        step_rel_error=round(_mean_abs(step_errors or [r.error for r in rows]), 5),
        stages_rel_error={s: round(_mean_abs(e), 5) for s, e in by_stage.items() if s != "step"},
        case_errors=case_errors,
        domain=domain_of(fit_cases),
    )
    if not step_errors:
        notes.append("no held-out case measures the step: its band is the mean over every held-out number")
    return CrossValidated(rows, cv, notes)
