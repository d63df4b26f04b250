"""Fit a calibration profile to measured cases (scenarios with `measured:` values).

The residuals are the relative errors of every target (stage seconds, step, tokens/s, and ratios between
cases) plus the weak prior of calibration.lsq. The
predictions are the discrete-event simulation's; since a simulation costs far more than the closed-form
model and both share every cost model, the fit runs scipy's bounded least squares on the closed-form
model corrected stage by stage with the simulation's ratio to it, and recomputes those corrections from a
fresh simulation at the new point a few times (the corrections move little between iterations).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date

import numpy as np

from calibration.lsq import PRIOR_WEIGHT, ParameterSpace
from calibration.targets import Target, case_targets, target_values
from twin.evaluate import Evaluation
from twin.profile import Profile
from twin.scenario import Scenario

# Parameters the published end-to-end cases (C1-C3) can tell apart; the rest keep their sourced values.
CASE_PARAMETERS = (
    "gemm_efficiency_scale", "grouped_gemm_efficiency_scale", "attention_efficiency_scale",
    "train_comm_overlap", "memory_efficiency_scale", "a2a_base_latency_us",
    "a2a_per_peer_latency_us", "decode_host_ms_graph", "decode_host_ms_eager", "vllm_schedule_ms",
    "eager_op_launch_us", "rollout_fixed_s", "reward_ms_per_response", "worker_call_s",
    "dispatch_ray_s_per_worker", "dispatch_ray_s_per_gb", "dispatch_d2d_s", "reshard_round_latency_us",
    "host_efficiency_scale",
)


@dataclass
class FitOutcome:
    profile: Profile
    targets: list[Target]
    before: list[float]  # simulated value of each target with the base profile
    after: list[float]  # ... with the fitted profile
    iterations: int
    notes: list[str] = field(default_factory=list)

    def errors(self, which: str = "after") -> list[float]:
        """Relative error of each target (absolute seconds for a zero target)."""
        values = self.after if which == "after" else self.before
        return [t.error(v) for v, t in zip(values, self.targets, strict=True)]


class CaseFit:
    """Least-squares fit of `names` of `base` to the cases' measured values."""

    def __init__(self, base: Profile, cases: list[Scenario], names: tuple[str, ...] = CASE_PARAMETERS,
                 progress: Callable[[str], None] | None = None) -> None:
        self.base = base
        self.cases = {c.name: c for c in cases}
        self.targets = case_targets(cases)
        if not self.targets:
            raise ValueError("none of the cases has measured values to fit")
        self.space = ParameterSpace(base, list(names))
        self.names = self.space.names
        self.evs = {c.name: Evaluation(c, base) for c in cases}
        self.progress = progress or (lambda _msg: None)

    def simulate(self, profile: Profile) -> dict[str, dict[str, float]]:
        from twin.sim.step import simulate

        return {name: simulate(ev.with_profile(profile))[0].stages_s for name, ev in self.evs.items()}

    def analytical(self, profile: Profile) -> dict[str, dict[str, float]]:
        return {name: ev.with_profile(profile).stage_times() for name, ev in self.evs.items()}

    def run(self, new_id: str, outer: int = 3) -> FitOutcome:
        goals = np.array([t.goal for t in self.targets])
        z = self.space.z0.copy()
        before = target_values(self.targets, self.simulate(self.base), self.evs)
        for i in range(outer):
            point = self.space.profile(z)
            sim, ana = self.simulate(point), self.analytical(point)
            correction = {c: {k: (sim[c][k] / v if v > 0 else 1.0) for k, v in ana[c].items()} for c in sim}
            self.progress(f"outer iteration {i + 1}/{outer}: simulated {len(sim)} cases, fitting {len(self.names)} "
                          f"parameters to {len(self.targets)} targets")

            def predict(profile: Profile, correction: dict = correction) -> np.ndarray:
                stages = self.analytical(profile)
                corrected = {c: {k: v * correction[c][k] for k, v in st.items()} for c, st in stages.items()}
                return np.array(target_values(self.targets, corrected, self.evs))

            z = self.space.fit(predict, goals, z)
        fitted = self.space.profile(z, new_id)
        after = target_values(self.targets, self.simulate(fitted), self.evs)
        provenance = fitted.provenance.model_copy(update={
            "fitted_on": date.today(),
            "cases": sorted(self.cases),
            "residuals": {t.label: round(t.error(a), 5)
                          for t, a in zip(self.targets, after, strict=True)},
            "notes": f"least squares on {len(self.targets)} targets of {len(self.cases)} cases, prior weight "
                     f"{PRIOR_WEIGHT}, {outer} simulation-corrected iterations",
        })
        fitted = fitted.model_copy(update={"provenance": provenance, "description": (
            f"{self.base.id} fitted to {len(self.cases)} measured cases ({', '.join(sorted(self.cases))})")})
        return FitOutcome(fitted, self.targets, before, after, outer)
