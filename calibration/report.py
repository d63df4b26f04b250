"""`calibration report`: a profile's predictions against the measured cases, fitted and held out apart.

Every case of the profile's cluster kind with measured values is simulated with the profile (the
discrete-event step simulation) and each measured quantity becomes a row: predicted, measured and the
relative error. The cases named in the profile's provenance (those it was fitted on) form the "fitted"
group, every other case the "held out" group; the held-out error is the twin's accuracy. A quantity
measured as 0 (a skipped stage) has no relative error: its row shows the difference in seconds, and it
is left out of the MAPE. A case's published memory peak (`memory_peak_gb`: verl's
actor/perf/max_memory_allocated_gb, logged after update_actor: the torch allocator's peak in the trainer's process,
never reset, divided by 1024**3, so GiB) is compared with the twin's allocator peak of the trainer's passes, in GB.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from calibration.errors import CalibrationError
from calibration.targets import (
    Target,
    below,
    case_targets,
    divided,
    floor_of,
    target_values,
    unusable_prediction,
)
from twin.disaggregated import is_separate
from twin.profile import CrossValidation, Profile, serves_kind
from twin.scenario import Scenario
from twin.uncertainty import relative_band, stage_rel_error

if TYPE_CHECKING:
    from calibration.crossval import CrossValidated

Group = Literal["fitted", "held_out"]
GROUPS: tuple[Group, ...] = ("fitted", "held_out")
GROUP_TITLES = {"fitted": "fitted", "held_out": "held out"}
Kind = Literal["end_to_end", "stages"]
KIND_TITLES = {"end_to_end": "step and tokens/s", "stages": "stages"}
# issue 9: a published ablation is reproduced when its predicted ratio is on the measured side of 1 and within this
# share of the measured ratio
ABLATION_BAR = 0.25
GIB = 2**30  # verl logs max_memory_allocated() / 1024**3 under the name ..._gb
THROUGHPUTS = ("tps_per_card", "tps_per_device", "rollout_tps_per_card")  # tokens over a time: its band inverted


@dataclass(frozen=True)
class Row:
    """One measured quantity of one case against its prediction."""

    target: Target
    group: Group
    predicted: float
    floor_s: float | None = None  # the compute floor of a training stage (twin/cost_models/floors.py)
    band: tuple[float, float] | None = None  # the band `twin simulate` prints around the prediction
    known_lengths: bool = False  # the case's mean lengths are published or derived (Measured.lengths)

    @property
    def in_band(self) -> bool | None:
        """Whether the measured value lies inside the printed band; None for a row without one."""
        if self.band is None:
            return None
        return self.band[0] <= self.target.goal <= self.band[1]

    @property
    def below_floor(self) -> bool:
        """Measured faster than the case's workload can run: its assumed lengths or batch are wrong."""
        return below(self.target, self.floor_s)

    @property
    def kind(self) -> Kind:
        return "stages" if self.target.is_stage else "end_to_end"

    @property
    def in_seconds(self) -> bool:
        """Measured as 0: the error is the difference in seconds, not a percentage."""
        return self.target.goal == 0

    @property
    def error(self) -> float:
        return self.target.error(self.predicted)

    @property
    def is_ablation(self) -> bool:
        """A ratio to another case's same quantity: one published ablation."""
        return self.target.reference is not None

    @property
    def same_direction(self) -> bool:
        """An ablation whose predicted ratio lies on the measured side of 1 (the change helps, or hurts, as it did)."""
        return (self.target.goal - 1) * (self.predicted - 1) > 0

    @property
    def meets_ablation_bar(self) -> bool:
        """Issue 9's bar for a published ablation: the measured direction, within ABLATION_BAR of the measured ratio."""
        return self.same_direction and abs(self.error) <= ABLATION_BAR


@dataclass(frozen=True)
class MemoryRow:
    """A case's published peak of torch-allocated memory in the trainer's process against the twin's (GB, 1e9
    bytes)."""

    case: str
    group: Group
    measured_gb: float  # the published GiB figure converted to GB
    predicted_gb: float

    @property
    def error(self) -> float:
        return self.predicted_gb / self.measured_gb - 1


@dataclass(frozen=True)
class SyncRow:
    """A disaggregated case's measured weight sync against the twin's (twin weight-sync). A measurement below the
    physical floor (the model's bytes over the fastest link a rollout rank has) cannot be a whole sync: it is shown
    and left out of the MAPE."""

    case: str
    group: Group
    method: str
    measured_s: float
    predicted_s: float
    floor_s: float

    @property
    def error(self) -> float:
        return divided(self.predicted_s, self.measured_s) - 1  # a sync measured as 0 s is below its floor

    @property
    def below_floor(self) -> bool:
        return self.measured_s < self.floor_s


@dataclass(frozen=True)
class Mape:
    value: float | None  # mean |relative error|; None without a row to average
    rows: int  # rows averaged
    in_seconds: int  # rows measured as 0, not averaged


@dataclass
class Report:
    profile: Profile
    rows: list[Row]
    skipped: dict[str, str] = field(default_factory=dict)  # case -> why it has no rows
    cross_validated: CrossValidated | None = None  # leave-one-case-out error of the fitting cases
    memory: list[MemoryRow] = field(default_factory=list)  # published memory peaks against the twin's
    sync: list[SyncRow] = field(default_factory=list)  # disaggregated weight syncs against the twin's

    def sync_mape(self, group: Group) -> Mape:
        rows = [r for r in self.sync if r.group == group]
        kept = [abs(r.error) for r in rows if not r.below_floor]
        return Mape(sum(kept) / len(kept) if kept else None, len(kept), 0)

    def band_coverage(self, group: Group) -> tuple[int, int]:
        """(rows whose measured value lies inside the band the twin prints, rows with a band) of a group."""
        verdicts = [r.in_band for r in self.rows if r.group == group and r.in_band is not None]
        return sum(verdicts), len(verdicts)

    def mape(self, group: Group, kind: Kind, known_lengths: bool = False) -> Mape:
        """The group's MAPE of one kind of row; with `known_lengths`, of its cases whose mean lengths are known."""
        rows = [r for r in self.rows if r.group == group and r.kind == kind and (r.known_lengths or not known_lengths)]
        relative = [abs(r.error) for r in rows if not r.in_seconds]
        return Mape(sum(relative) / len(relative) if relative else None, len(relative), len(rows) - len(relative))

    def to_json(self) -> dict[str, Any]:
        """The machine-readable report (`calibration report --json`)."""
        return {
            "profile": self.profile.id,
            "cluster_kind": self.profile.cluster_kind,
            "fitted_cases": self.profile.provenance.cases,
            "rows": [{"case": r.target.case, "group": r.group, "quantity": r.target.quantity,
                      "reference": r.target.reference, "measured": r.target.goal, "predicted": r.predicted,
                      "error": r.error, "error_unit": "s" if r.in_seconds else "relative", "floor_s": r.floor_s,
                      "below_floor": r.below_floor, "band": list(r.band) if r.band else None,
                      "in_band": r.in_band} for r in self.rows],
            "ablations": [{"case": r.target.case, "reference": r.target.reference, "quantity": r.target.quantity,
                           "group": r.group, "measured_ratio": r.target.goal, "predicted_ratio": r.predicted,
                           "same_direction": r.same_direction, "meets_bar": r.meets_ablation_bar}
                          for r in self.rows if r.is_ablation],
            "mape": {g: {k: vars(self.mape(g, k)) for k in KIND_TITLES} for g in GROUPS},
            "mape_known_lengths": {g: {k: vars(self.mape(g, k, known_lengths=True)) for k in KIND_TITLES}
                                   for g in GROUPS},
            "band_coverage": {g: dict(zip(("inside", "rows"), self.band_coverage(g), strict=True)) for g in GROUPS},
            "skipped": self.skipped,
            "memory": [{"case": m.case, "group": m.group, "measured_gb": m.measured_gb, "predicted_gb": m.predicted_gb,
                        "error": m.error} for m in self.memory],
            "weight_sync": [{"case": r.case, "group": r.group, "method": r.method, "measured_s": r.measured_s,
                             "predicted_s": r.predicted_s, "floor_s": r.floor_s, "error": r.error,
                             "below_floor": r.below_floor} for r in self.sync],
            "weight_sync_mape": {g: vars(self.sync_mape(g)) for g in GROUPS},
            "cross_validation": (self.cross_validated.result.model_dump(mode="json")
                                 if self.cross_validated else None),
            "cross_validation_notes": self.cross_validated.notes if self.cross_validated else [],
        }


def build_report(profile: Profile, cases: list[Scenario]) -> Report:
    """Simulate the cases of the profile's cluster kind that have measured values and compare."""
    from twin.cost_models.memory import GB, allocated_peak_gb
    from twin.evaluate import Evaluation
    from twin.sim.step import simulate
    from twin.topology.clusters import sleep_frees_memory

    names = [c.name for c in cases if c.measured is not None]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise CalibrationError(f"case {twice[0]} is given twice")
    skipped: dict[str, str] = {}
    kept, separate = [], []
    for sc in cases:
        if sc.measured is not None and not serves_kind(profile, sc.cluster.kind):
            skipped[sc.name] = f"cluster kind {sc.cluster.kind}, the profile's is {profile.cluster_kind}"
        elif sc.measured is not None:
            (separate if is_separate(sc) else kept).append(sc)
    fitted = set(profile.provenance.cases)
    sync = [_sync_row(sc, profile, fitted) for sc in separate if "weight_sync" in sc.measured.stages_s]
    skipped.update({sc.name: "a disaggregated run without a measured weight sync" for sc in separate
                    if "weight_sync" not in sc.measured.stages_s})
    try:
        targets = case_targets(kept)
    except ValueError as exc:
        raise CalibrationError(str(exc)) from None
    if not targets and not sync:
        raise CalibrationError(f"none of the {len(cases)} cases has measured step, stage or tokens/s values on "
                               f"cluster kind {profile.cluster_kind}")
    with_rows = {t.case for t in targets}
    for sc in kept:
        if sc.name not in with_rows:
            skipped[sc.name] = ("reference only: the denominator of other cases' ratios"
                                if sc.measured and sc.measured.reference_only else "no stage, step or tokens/s value")
    needed = with_rows | {t.reference for t in targets if t.reference}
    evs = {sc.name: Evaluation(sc, profile) for sc in kept if sc.name in needed}
    stages = {name: simulate(ev)[0].stages_s for name, ev in evs.items()}
    cv = profile.cross_validation
    known = {sc.name for sc in kept if sc.measured is not None and sc.measured.lengths_known}
    rows = [Row(t, "fitted" if t.case in fitted else "held_out", p, floor_of(t, evs[t.case]),
                band_of(t, p, cv) if cv else None, t.case in known)
            for t, p in zip(targets, target_values(targets, stages, evs), strict=True)]
    refuse_non_finite(profile, rows)
    memory = []
    for sc in kept:
        if sc.measured is not None and sc.measured.memory_peak_gb is not None:
            ev = evs.get(sc.name) or Evaluation(sc, profile)
            predicted = allocated_peak_gb(ev.train_memory, ev.rollout_memory, sleep_frees_memory(sc))
            memory.append(MemoryRow(sc.name, "fitted" if sc.name in fitted else "held_out",
                                    sc.measured.memory_peak_gb * GIB / GB, predicted))
    return Report(profile, rows, skipped, memory=memory, sync=sync)


def band_of(target: Target, predicted: float, cv: CrossValidation) -> tuple[float, float] | None:
    """The band `twin simulate` prints around a prediction (twin.uncertainty: the stage's own leave-one-case-out
    error, else the step's), a throughput's from its time's band inverted; None for a ratio to another case and for
    a stage measured as 0."""
    if target.reference or target.goal == 0:
        return None
    rel = stage_rel_error(cv, target.stage)
    if target.quantity in THROUGHPUTS:
        return predicted / (1 + rel), (predicted / (1 - rel) if rel < 1 else float("inf"))
    return relative_band(predicted, rel)


def refuse_non_finite(profile: Profile, rows: list[Row]) -> None:
    """One line naming the first prediction that is not a finite number (a stage predicted as 0 s or without
    bound turns a throughput or ratio into inf or NaN): the profile's parameters are out of any sane range."""
    bad = unusable_prediction(profile.id, [r.predicted for r in rows], [r.target for r in rows])
    if bad:
        raise CalibrationError(f"{bad}: a stage predicted as 0 s or without bound; check the profile's parameters "
                               "(`twin simulate CASE --profile PROFILE` shows its stages)")


def _sync_row(sc: Scenario, profile: Profile, fitted: set[str]) -> SyncRow:
    from twin.disaggregated import SyncEvaluation

    ev = SyncEvaluation(sc, profile)
    assert sc.measured is not None
    return SyncRow(sc.name, "fitted" if sc.name in fitted else "held_out", ev.method,
                   sc.measured.stages_s["weight_sync"], ev.time().seconds, ev.floor_s())
