"""plan.json: the chosen layout, its predictions and the runner-ups (DESIGN section 4.4).

A versioned pydantic model with a published JSON Schema (`twin schema`). The executor imports this
module (and nothing else of the twin but its file helpers) and refuses schema versions it does not know.
"""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from twin import __version__
from twin.errors import TwinError
from twin.fileio import read_mapping, validated, write_atomic
from twin.layout.models import Layout
from twin.optimizations import OPTIMIZATIONS, OptimizationId
from twin.results import SimulationResult
from twin.scenario import Scenario

PLAN_SCHEMA = 1


class PlanOptimization(BaseModel):
    """One optimization of the plan, and how the executor applies it."""

    model_config = ConfigDict(extra="forbid")

    id: OptimizationId
    enabled: bool
    mechanism: str
    effect: str

    @classmethod
    def of(cls, opt_id: OptimizationId, enabled: bool) -> PlanOptimization:
        info = OPTIMIZATIONS[opt_id]
        return cls(id=opt_id, enabled=enabled, mechanism=info.mechanism, effect=info.twin_effect)


class RunnerUp(BaseModel):
    """A layout that lost, with its predictions and why."""

    model_config = ConfigDict(extra="forbid")

    rank: int
    layout: Layout
    step_s: float
    tps_per_card: float
    memory_peak_gb_max: float
    reshard_bytes_total: int
    why_lost: str


class SearchSummary(BaseModel):
    model_config = ConfigDict(extra="forbid")

    train_layouts: int
    rollout_layouts: int
    pairs_evaluated: int
    pairs_fitting: int
    rejected: dict[str, int]  # reason -> count
    simulated: int = 0
    wall_s: float
    stopped: str | None = None  # why the search ended before it had screened and ranked everything (--time-limit)


class Plan(BaseModel):
    """What `twin plan` writes and `executor run` reads."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    schema_version: int = Field(default=PLAN_SCHEMA, alias="schema")
    twin_version: str = __version__
    created_at: datetime = Field(default_factory=lambda: datetime.now(timezone.utc))
    scenario: Scenario  # with the chosen layout filled in
    layout: Layout
    optimizations: list[PlanOptimization]
    predictions: SimulationResult
    profile: str
    runner_ups: list[RunnerUp] = []
    search: SearchSummary | None = None

    def enabled(self, opt_id: str) -> bool:
        return any(o.id == opt_id and o.enabled for o in self.optimizations)


def plan_json_schema() -> dict:
    return Plan.model_json_schema(by_alias=True)


def save_plan(plan: Plan, path: Path | str) -> None:
    write_atomic(path, plan.model_dump_json(by_alias=True, indent=2) + "\n")


def load_plan(path: Path | str) -> Plan:
    """Read a plan.json; a schema version this code does not know is refused with a clear message."""
    label = f"plan {path}"
    raw = read_mapping(path, label, "json")
    version = raw.get("schema")
    if version != PLAN_SCHEMA:
        raise TwinError(f"{label}: schema version {version!r} is not supported (this version reads "
                        f"schema {PLAN_SCHEMA}; re-run `twin plan` with a matching twin)")
    return validated(Plan, raw, label)
