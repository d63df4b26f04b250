"""The band around a prediction (DESIGN 4.3): the profile's leave-one-case-out error, and the dimensions in
which a scenario leaves what the profile's fitting cases covered.

A stage's band is its own cross-validated relative error where the cases measured that stage, else the
step's. The domain is recorded by `calibration report --write-cv` from the fitting cases (`domain_of`)
and compared here dimension by dimension: model family (the config's model_type), sequence length (prompt
plus response maximum), scale (cards), cluster kind, software (the scenario's `software` versions where it has
them) and algorithm (a domain recorded before it was a dimension does not check it). Outside the domain the band
is a floor, not an estimate: the warning says so.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from statistics import NormalDist

from rich.console import Console

from twin.profile import CrossValidation, Profile
from twin.results import SimulationResult, Uncertainty
from twin.scenario import Scenario


def normal_sigmas_per_mean_abs(sigmas: float) -> float:
    """`sigmas` standard deviations of a normal error in units of its mean absolute value (sigma x sqrt(2/pi)): what
    a band, a mean absolute error, is multiplied by to reach a quantile of the error."""
    return sigmas * math.sqrt(math.pi / 2)


# the 95th percentile of |error| (1.96 sigma) and the 90th percentile of the error (1.2816 sigma above the prediction),
# each in mean absolute errors
P95_ABS_OF_MEAN_ABS = normal_sigmas_per_mean_abs(1.96)
P90_OF_MEAN_ABS = normal_sigmas_per_mean_abs(NormalDist().inv_cdf(0.9))
RANGES = ("seq_len", "cards")  # numeric dimensions: [lo, hi]; the others are sets of names
LABELS = {"model_family": "model family", "seq_len": "sequence length", "cards": "scale (cards)",
          "cluster_kind": "cluster kind", "software": "software", "algorithm": "algorithm"}


def scenario_domain(sc: Scenario) -> dict[str, str | float]:
    """Where one scenario lies in each domain dimension."""
    from twin.catalog.registry import load_config
    from twin.disaggregated import is_separate

    point: dict[str, str | float] = {
        "model_family": load_config(sc.model).model_type,
        "cards": float(sc.cluster.cards),
        "cluster_kind": sc.cluster.kind,
    }
    if not is_separate(sc):  # a weight sync's case runs no sequences
        point["seq_len"] = float(sc.workload.max_seq_len)
    # what it states, so that a field the schema gains later leaves a recorded domain as it is
    point["software"] = sc.software.stated()
    point["algorithm"] = sc.workload.algorithm  # PPO's critic passes are costed only where a fitting case trained one
    return point


def domain_of(cases: Iterable[Scenario]) -> dict[str, list[str | float]]:
    """What the cases cover: [lo, hi] of each numeric dimension, the sorted names of the others."""
    points = [scenario_domain(sc) for sc in cases]
    out: dict[str, list[str | float]] = {}
    for dim in LABELS:
        values = [p[dim] for p in points if dim in p]
        if not values:
            continue
        if dim in RANGES:
            nums = [float(v) for v in values]
            out[dim] = [min(nums), max(nums)]
        else:
            out[dim] = sorted({str(v) for v in values})
    return out


def outside(sc: Scenario, domain: dict[str, list[str | float]]) -> list[str]:
    """The dimensions in which the scenario leaves the domain, each with its value and the covered range."""
    point = scenario_domain(sc)
    out = []
    for dim, covered in domain.items():
        if dim not in point:
            continue
        value = point[dim]
        if dim in RANGES:
            lo, hi = float(covered[0]), float(covered[1])
            if not lo <= float(value) <= hi:
                out.append(f"{LABELS[dim]} {float(value):g} outside the fitted {lo:g}-{hi:g}")
        elif str(value) not in covered:
            out.append(f"{LABELS[dim]} {value} not among the fitted {', '.join(map(str, covered))}")
    return out


def stage_rel_error(cv: CrossValidation, stage: str) -> float:
    """The relative error of a stage's band: its own leave-one-case-out error, else the step's."""
    return cv.step_rel_error if stage == "step" else cv.stages_rel_error.get(stage, cv.step_rel_error)


def relative_band(value: float, rel: float) -> tuple[float, float]:
    """`value` less and more its relative error `rel` (never below zero)."""
    return (max(0.0, value * (1 - rel)), value * (1 + rel))


def uncertainty_for(result: SimulationResult, scenario: Scenario, profile: Profile) -> Uncertainty | None:
    """The band of `result` from the profile's cross-validated error; None for a profile without one."""
    cv: CrossValidation | None = profile.cross_validation
    if cv is None:
        return None
    leaves = outside(scenario, cv.domain)
    own = sorted(s for s in result.stages_s if s in cv.stages_rel_error)
    return Uncertainty(
        step_s=relative_band(result.step_s, cv.step_rel_error),
        stages_s={s: relative_band(v, stage_rel_error(cv, s))
                  for s, v in result.stages_s.items()},
        memory_peak_gb_max=(relative_band(result.memory_peak_gb_max, cv.memory_rel_error)
                            if cv.memory_rel_error is not None else None),
        basis=(f"profile {profile.id}: leave-one-case-out error over {len(cv.cases)} cases "
               f"({', '.join(cv.cases)}); step +-{cv.step_rel_error * 100:.1f} %; stages with their own error: "
               f"{', '.join(own) or 'none'} (the others use the step's)"),
        in_domain=not leaves,
        outside=leaves,
    )


def print_uncertainty(console: Console, result: SimulationResult) -> None:
    """The band of every prediction, and a warning when the scenario leaves the fitting domain."""
    u = result.uncertainty
    if u is None:
        console.print(f"no uncertainty band: profile {result.profile} has no cross-validated error "
                      "(`calibration report --write-cv`)", highlight=False, soft_wrap=True)
        return
    bands = ", ".join(f"{s} {lo:.2f}-{hi:.2f}" for s, (lo, hi) in u.stages_s.items())
    console.print(f"band: step {u.step_s[0]:.2f}-{u.step_s[1]:.2f} s; stages (s): {bands}", highlight=False,
                  soft_wrap=True)
    console.print(f"band basis: {u.basis}", highlight=False, soft_wrap=True)
    for dim in u.outside:
        console.print(f"[bold yellow]warning:[/] outside the fitting domain: {dim}; the band is a floor, not an "
                      "estimate", soft_wrap=True)
