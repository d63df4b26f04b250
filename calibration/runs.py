"""The measured values of a scenario from a real verl run: the "run" records `calibration ingest` wrote.

verl's trainer times each stage of a step (`timing_s/<name>`, seconds) and logs its throughput
(`perf/throughput`: prompt + response tokens / step seconds / trainer devices); STAGE_METRICS maps them
to the twin's stages. The values are means over the steady-state steps: the first `skip_steps` steps of
the run are left out, since the first one carries the engine start-up (model loading, KV-cache
allocation, graph capture, first-call compilation) that later steps do not pay.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from statistics import fmean
from typing import Literal

from calibration.errors import CalibrationError
from calibration.measurements import RunMeasurement, load_measurements
from calibration.targets import evaluation
from twin.fileio import validated
from twin.scenario import Measured, Scenario

STAGE_METRICS = {
    "timing_s/gen": "rollout",
    "timing_s/reward": "reward",
    "timing_s/old_log_prob": "old_log_prob",
    "timing_s/ref": "ref",
    "timing_s/values": "values",  # PPO's critic
    "timing_s/adv": "advantage",
    "timing_s/update_critic": "update_critic",
    "timing_s/update_actor": "update",
    "timing_s/update_weights": "reshard",
}
STEP_METRIC = "timing_s/step"
THROUGHPUT_METRIC = "perf/throughput"  # tokens/s per device


@dataclass(frozen=True)
class RunValues:
    """What one run measured, averaged over its steady-state steps."""

    path: Path
    run_id: str
    steps: list[int]  # every step of the run
    used: list[int]  # the steps averaged
    measured: Measured
    bad_lines: int  # lines of the file that are not records
    cluster: tuple[str, int] | None  # kind and cards from the executor's run record, when ingested with one


def run_id(record: RunMeasurement) -> str:
    """The run a record belongs to: its key is `run|<run id>|step=<n>|<metric>`."""
    return record.key.removeprefix("run|").rsplit("|", 2)[0]


def load_run(path: Path, skip_steps: int, use: Literal["fit", "judge"] = "judge") -> RunValues:
    """The measured values of the one run recorded in `path` (a measurements file from `calibration ingest`)."""
    if not path.is_file():
        raise CalibrationError(f"runs {path}: no such file")
    loaded = load_measurements(path)
    records = [r for r in loaded.records if isinstance(r, RunMeasurement) and r.step is not None]
    if not records:
        raise CalibrationError(f"runs {path}: no \"run\" records with step numbers (`calibration ingest` writes them)")
    runs = sorted({run_id(r) for r in records})
    if len(runs) > 1:
        raise CalibrationError(f"runs {path}: records of {len(runs)} runs ({', '.join(runs)}); ingest one run per file")
    steps = sorted({r.step for r in records if r.step is not None})
    if skip_steps >= len(steps):
        raise CalibrationError(f"runs {path}: {len(steps)} steps ({steps[0]}..{steps[-1]}); skipping the first "
                               f"{skip_steps} leaves none to average")
    skipped, used = steps[:skip_steps], steps[skip_steps:]
    start_up = f"step {', '.join(map(str, skipped))} skipped (engine start-up)" if skipped else "no step skipped"
    measured = _mean_values([r for r in records if r.step in used], use, source=(
        f"verl run {runs[0]} ({path}): mean of steps {used[0]}..{used[-1]}; {start_up}"), label=f"runs {path}")
    if not measured.stages_s and measured.step_s is None and measured.tps_per_device is None:
        raise CalibrationError(f"runs {path}: none of {', '.join([*STAGE_METRICS, STEP_METRIC, THROUGHPUT_METRIC])} "
                               f"in steps {used[0]}..{used[-1]}")
    info = next((r.run for r in records if r.run is not None), None)
    cluster = (info.cluster_kind, info.cards) if info is not None else None
    return RunValues(path, runs[0], steps, used, measured, len(loaded.bad_lines), cluster)


def _mean_values(records: list[RunMeasurement], use: Literal["fit", "judge"], source: str, label: str) -> Measured:
    """Each mapped metric's mean over the records (of the steps that logged it), checked as a scenario's."""
    values: dict[str, list[float]] = {}
    for r in records:
        values.setdefault(r.metric, []).append(r.value)
    means = {metric: mean(v) for metric, v in values.items()}
    return validated(Measured, {
        "use": use,
        "stages_s": {stage: means[m] for m, stage in STAGE_METRICS.items() if m in means},
        "step_s": means.get(STEP_METRIC),
        "tps_per_device": means.get(THROUGHPUT_METRIC),
        "source": source,
    }, label)


def mean(values: list[float]) -> float:
    """The mean of finite values; one whose sum overflows (values near the largest float, 1e308) is taken over
    the values scaled by the largest, so it is never an OverflowError."""
    try:
        return fmean(values)
    except OverflowError:
        scale = max(map(abs, values))
        return scale * fmean(v / scale for v in values)


def run_case(sc: Scenario, run: RunValues) -> Scenario:
    """The scenario with the run's measured values in place of its own, validated again as a whole (a separate
    placement measures its weight sync only); its cluster must be the run's."""
    if run.cluster is not None and run.cluster != (sc.cluster.kind, sc.cluster.cards):
        kind, cards = run.cluster
        raise CalibrationError(f"runs {run.path}: the run was on {cards} {kind} cards, scenario {sc.name} "
                               f"describes {sc.cluster.cards} {sc.cluster.kind} cards")
    raw = sc.model_dump(mode="json", by_alias=True, exclude_none=True)
    return validated(Scenario, {**raw, "measured": run.measured.model_dump(mode="json", exclude_none=True)},
                     f"scenario {sc.name} with the measured values of {run.path}")


def checked_scenario(path: Path) -> Scenario:
    """The scenario (or a plan.json's) a run executed, read and checked as `twin simulate` checks it (its model,
    cluster kind, layout and profile), with a cluster or profile file named relative to it made absolute."""
    from twin.cli import load_case
    from twin.errors import TwinError

    sc, base = load_case(str(path))  # a file it cannot read or validate names itself
    try:
        evaluation(sc, None, base)
    except TwinError as exc:
        raise CalibrationError(f"scenario {path}: {exc}") from None
    return sc


def write_case(sc: Scenario, out: Path) -> None:
    """Write a scenario file; an existing file is never overwritten."""
    from twin.fileio import refuse_overwrite, write_atomic

    refuse_overwrite(out, "a scenario file")
    write_atomic(out, sc.dump_yaml())
