"""Everything in a plan.json re-derived and checked before the executor acts on it.

A plan is a file a user can edit. Its parts must agree: the layout with the scenario's, with the model
(catalog or config.json), the cluster kind and the device count (twin.layout.rules); the optimizations
with the scenario's and with the catalog of optimizations; the predictions with the cluster. A part that
disagrees is refused naming the field.
"""

from __future__ import annotations

from pathlib import Path

from twin.errors import LayoutError, TwinError
from twin.plan import Plan


def _refuse(path: Path | str, field: str, why: str) -> TwinError:
    return TwinError(f"plan {path}: field '{field}': {why}")


def check_plan(plan: Plan, path: Path | str) -> None:
    """Raise a one-line TwinError naming the first field of `plan` that disagrees with the rest."""
    from twin.catalog.registry import load_config
    from twin.layout.rules import validate_layout
    from twin.optimizations import OPTIMIZATIONS
    from twin.topology.clusters import cluster_kind

    sc = plan.scenario
    if sc.layout is not None and sc.layout != plan.layout:
        raise _refuse(path, "layout", "differs from scenario.layout (the plan's two copies of its layout disagree)")
    if sc.software.framework != "verl":
        raise _refuse(path, "scenario.software.framework", f"{sc.software.framework!r}: the executor launches verl "
                      "runs only (a MindSpeed-RL scenario is for the twin's predictions and calibration)")
    if plan.layout.placement != "colocated":
        raise _refuse(path, "layout.placement", f"{plan.layout.placement!r}: the executor launches colocated runs "
                      "(verl's hybrid engine) only")
    try:
        kind = cluster_kind(sc.cluster.kind)
    except TwinError as exc:
        raise _refuse(path, "scenario.cluster.kind", str(exc)) from None
    try:
        cfg = load_config(_model_ref(sc.model, path))
    except TwinError as exc:
        raise _refuse(path, "scenario.model", str(exc)) from None
    devices = sc.cluster.cards * kind.devices_per_card
    pred = plan.predictions
    for field, value, expected in (("predictions.cards", pred.cards, sc.cluster.cards),
                                   ("predictions.devices", pred.devices, devices),
                                   ("predictions.scenario", pred.scenario, sc.name)):
        if value != expected:
            raise _refuse(path, field, f"{value} does not match the scenario ({expected})")
    ids = [o.id for o in plan.optimizations]
    repeated = sorted({i for i in ids if ids.count(i) > 1})
    if repeated:
        raise _refuse(path, "optimizations", f"{', '.join(repeated)} listed more than once")
    enabled = {o.id for o in plan.optimizations if o.enabled}
    if enabled != set(sc.optimizations):
        extra, missing = sorted(enabled - set(sc.optimizations)), sorted(set(sc.optimizations) - enabled)
        raise _refuse(path, "optimizations", "the enabled ones differ from scenario.optimizations ("
                      + "; ".join(p for p in (f"not in the scenario: {', '.join(extra)}" if extra else "",
                                              f"not enabled: {', '.join(missing)}" if missing else "") if p) + ")")
    for o in plan.optimizations:
        info = OPTIMIZATIONS[o.id]
        if o.mechanism != info.mechanism:
            raise _refuse(path, f"optimizations.{o.id}.mechanism",
                          f"{o.mechanism!r}, but {o.id} is applied as {info.mechanism!r}")
    try:
        validate_layout(plan.layout, cfg, devices, kind, sc.has("directed_reshard"))
    except LayoutError as exc:
        raise _refuse(path, "layout", f"{exc} ({cfg.name} on {devices} {kind.name} devices)") from None


def _model_ref(model: str, path: Path | str) -> str:
    """A catalog name as is; a config path relative to the plan's directory when it exists there."""
    from twin.catalog.registry import CATALOG_SOURCES

    if model in CATALOG_SOURCES or Path(model).is_absolute():
        return model
    beside = Path(path).parent / model
    return str(beside) if beside.exists() else model
