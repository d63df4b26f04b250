"""Fit a calibration profile to measured cases (scenarios with `measured:` values), freeing only what the
data identifies (DESIGN section 7).

The targets are the cases' distinct measured numbers (calibration.targets.distinct_targets: a TPS that
restates a step or rollout time, or a step that is the sum of its measured stages, counts once). Before
fitting, the Jacobian of log(targets) with respect to log(parameters) is taken at the start point
(calibration.identify); its singular values say how many parameter combinations the data resolves. A fit
of a named set refuses when the set has more parameters than identified directions or holds a parameter
that moves fewer than three distinct numbers; `select` picks the largest set that passes (what
`calibration fit` does without --free). Nothing else moves: every other parameter keeps its sourced value.

The predictions are the discrete-event simulation's. A simulation costs far more than the closed-form
model and both share every cost model, so the fit runs scipy's bounded least squares (calibration.lsq,
relative residuals plus a weak prior towards the start values) on the closed-form model corrected stage
by stage with the simulation's ratio to it, and recomputes those corrections from a fresh simulation at
the new point `outer` times. A freed parameter that ends on a bound is a model error: it is reported in
`bound_hits`, and the caller decides whether the profile may be written.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date

import numpy as np

from calibration.identify import RELATIVE_THRESHOLD, Identifiability, log_jacobian
from calibration.lsq import PRIOR_WEIGHT, ParameterSpace
from calibration.targets import (
    Target,
    below_floor_refusal,
    case_targets,
    distinct_targets,
    evaluation,
    predicted_stages,
    target_values,
)
from twin.profile import FitRecord, Profile
from twin.scenario import Scenario

BOUND_TOLERANCE = 1e-4  # a value within this fraction of its bound width from a bound is on it

Stages = dict[str, dict[str, float]]


@dataclass
class FitOutcome:
    profile: Profile
    targets: list[Target]  # every measured quantity (duplicates included), as reported
    before: list[float]  # simulated value of each target with the base profile
    after: list[float]  # ... with the fitted profile
    iterations: int
    identified: Identifiability  # the freed parameters' Jacobian at the start point
    bound_hits: list[str] = field(default_factory=list)

    def errors(self, which: str = "after") -> list[float]:
        """Relative error of each target (absolute seconds for a zero target)."""
        values = self.after if which == "after" else self.before
        return [t.error(v) for v, t in zip(values, self.targets, strict=True)]


def candidates(profile: Profile) -> list[str]:
    """Every parameter with fitting bounds and a positive value: what a fit may consider freeing."""
    return [n for n, p in profile.params.items() if p.bounds is not None and p.value > 0]


class CaseFit:
    """Least-squares fit of some parameters of `base` to the cases' distinct measured numbers."""

    def __init__(self, base: Profile, cases: list[Scenario], progress: Callable[[str], None] | None = None) -> None:
        self.base = base
        self.cases = {c.name: c for c in cases}
        self.targets = case_targets(cases)
        self.distinct = distinct_targets(self.targets, cases)
        if not self.distinct:
            raise ValueError("none of the cases has measured values to fit")
        self.evs = {c.name: evaluation(c, base) for c in cases}
        impossible = below_floor_refusal(self.targets, self.evs)
        if impossible:
            raise ValueError(impossible)
        self.progress = progress or (lambda _msg: None)

    def simulate(self, profile: Profile) -> Stages:
        return {name: predicted_stages(ev.with_profile(profile)) for name, ev in self.evs.items()}

    def analytical(self, profile: Profile) -> Stages:
        return {name: ev.with_profile(profile).stage_times() for name, ev in self.evs.items()}

    def corrected(self, point: Profile) -> Callable[[Profile], np.ndarray]:
        """The closed-form prediction of the distinct targets, corrected by the simulation at `point`."""
        sim, ana = self.simulate(point), self.analytical(point)
        correction = {c: {k: (sim[c][k] / v if v > 0 else 1.0) for k, v in ana[c].items()} for c in sim}

        def predict(profile: Profile) -> np.ndarray:
            stages = self.analytical(profile)
            fixed = {c: {k: v * correction[c][k] for k, v in st.items()} for c, st in stages.items()}
            return np.array(target_values(self.distinct, fixed, self.evs))

        return predict

    def identify(self, names: list[str]) -> Identifiability:
        """The Jacobian of the distinct targets in `names` at the base values."""
        missing = [n for n in names if n not in self.base.params or self.base.params[n].bounds is None]
        if missing:
            raise ValueError(f"profile {self.base.id} has no bounded parameter {missing[0]!r}")
        self.progress(f"Jacobian of {len(self.distinct)} distinct measured numbers in {len(names)} parameters")
        return log_jacobian(self.base, names, self.distinct, self.corrected(self.base))

    def run(self, new_id: str, identified: Identifiability, outer: int = 3, enforce: bool = True) -> FitOutcome:
        """Fit the parameters of `identified`, refusing a set the data cannot tell apart unless `enforce` is
        False (cross-validation refits a shipped set on fewer cases)."""
        why = identified.refusal()
        if why and enforce:
            raise ValueError(why)
        names = identified.names
        space = ParameterSpace(self.base, names)
        goals = np.array([t.goal for t in self.distinct])
        z = space.z0.copy()
        before = target_values(self.targets, self.simulate(self.base), self.evs)
        for i in range(outer):
            self.progress(f"outer iteration {i + 1}/{outer}: fitting {len(names)} parameters to "
                          f"{len(self.distinct)} distinct measured numbers")
            z = space.fit(self.corrected(space.profile(z)), goals, z)
        fitted = space.profile(z, new_id)
        after = target_values(self.targets, self.simulate(fitted), self.evs)
        hits = [n for n in names if _on_bound(fitted, n)]
        record = FitRecord(
            freed=names, distinct_targets=len(self.distinct),
            moved={n: len(identified.moved(n)) for n in names},
            singular_values=[float(s) for s in identified.singular], relative_threshold=RELATIVE_THRESHOLD,
            identifiable=identified.identifiable)
        provenance = fitted.provenance.model_copy(update={
            "fitted_on": date.today(),
            "cases": sorted(self.cases),
            "residuals": {t.label: round(t.error(a), 5) for t, a in zip(self.targets, after, strict=True)},
            "fit": record,
            "notes": f"least squares on {len(self.distinct)} distinct measured numbers ({len(self.targets)} "
                     f"targets) of {len(self.cases)} cases, {len(names)} freed parameters, prior weight "
                     f"{PRIOR_WEIGHT}, {outer} simulation-corrected iterations",
        })
        fitted = fitted.model_copy(update={"provenance": provenance, "description": (
            f"{self.base.id} fitted to {len(self.cases)} measured cases ({', '.join(sorted(self.cases))})")})
        return FitOutcome(fitted, self.targets, before, after, outer, identified, hits)


def _on_bound(profile: Profile, name: str) -> bool:
    p = profile.params[name]
    assert p.bounds is not None
    lo, hi = p.bounds
    return min(p.value - lo, hi - p.value) <= BOUND_TOLERANCE * (hi - lo)
