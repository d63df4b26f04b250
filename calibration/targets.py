"""What a fit aims at: the measured quantities of scenarios (stage seconds, step, tokens/s) and how to read
the same quantity off a prediction."""

from __future__ import annotations

from dataclasses import dataclass

from twin.results import SimulationResult
from twin.scenario import Scenario


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


def case_targets(cases: list[Scenario]) -> list[Target]:
    """Every measured quantity of the cases; `relative_to` turns a case's values into ratios."""
    by_name = {c.name: c for c in cases}
    out = []
    for sc in cases:
        m = sc.measured
        if m is None or m.reference_only:
            continue
        values = {f"stage:{k}": v for k, v in m.stages_s.items()}
        for q in ("step_s", "tps_per_card", "tps_per_device", "rollout_tps_per_card"):
            v = getattr(m, q)
            if v is not None:
                values["step" if q == "step_s" else q] = v
        ref = by_name.get(m.relative_to) if m.relative_to else None
        if m.relative_to and ref is None:
            raise ValueError(f"case {sc.name} is relative to {m.relative_to}, which is not among the cases")
        for q, v in values.items():
            if ref is not None:
                ref_values = _measured_values(ref)
                if q in ref_values:
                    out.append(Target(sc.name, q, v, ref.name, ref_values[q]))
            else:
                out.append(Target(sc.name, q, v))
    return out


def _measured_values(sc: Scenario) -> dict[str, float]:
    m = sc.measured
    assert m is not None
    values = {f"stage:{k}": v for k, v in m.stages_s.items()}
    for q in ("tps_per_card", "tps_per_device", "rollout_tps_per_card"):
        if getattr(m, q) is not None:
            values[q] = getattr(m, q)
    if m.step_s is not None:
        values["step"] = m.step_s
    return values


def read_quantity(result: SimulationResult, sc: Scenario, quantity: str) -> float:
    """The predicted value of `quantity` (`stage:<name>`, step, tokens/s per card, device or rollout)."""
    if quantity.startswith("stage:"):
        return result.stages_s[quantity.removeprefix("stage:")]
    if quantity == "step":
        return result.step_s
    if quantity == "rollout_tps_per_card":
        return sc.workload.tokens_per_step / result.stages_s["rollout"] / sc.cluster.cards
    return getattr(result, quantity)


def predicted(target: Target, results: dict[str, SimulationResult], cases: dict[str, Scenario]) -> float:
    value = read_quantity(results[target.case], cases[target.case], target.quantity)
    if target.reference:
        return value / read_quantity(results[target.reference], cases[target.reference], target.quantity)
    return value
