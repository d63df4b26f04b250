"""plan.json: the chosen layout, its predictions and the runner-ups (DESIGN section 4.4).

A versioned pydantic model with a published JSON Schema (`twin schema`). The executor imports this
module (and nothing else of the twin but its file helpers) and refuses schema versions it does not know.
"""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field

from twin import __version__
from twin.errors import TwinError
from twin.fileio import read_mapping, validated, write_atomic
from twin.layout.models import Layout
from twin.optimizations import OPTIMIZATIONS, OptimizationId, executor_refusals
from twin.results import SimulationResult
from twin.scenario import Scenario

if TYPE_CHECKING:
    from twin.catalog.config import ModelConfig

PLAN_SCHEMA = 1
Risk = Literal["p50", "p90"]  # the step-time quantile candidates are ranked by


class PlanOptimization(BaseModel):
    """One optimization of the plan, and how the executor applies it."""

    model_config = ConfigDict(extra="forbid")

    id: OptimizationId
    enabled: bool
    mechanism: str
    effect: str
    # why `executor run` refuses this plan for this optimization (its layout is one the executor's
    # implementation cannot run, twin.optimizations.EXECUTOR_SUPPORT); empty when it runs
    executor_refusals: list[str] = []

    @classmethod
    def of(cls, opt_id: OptimizationId, enabled: bool, layout: Layout, config: ModelConfig) -> PlanOptimization:
        info = OPTIMIZATIONS[opt_id]
        return cls(id=opt_id, enabled=enabled, mechanism=info.mechanism, effect=info.twin_effect,
                   executor_refusals=executor_refusals(opt_id, layout, config) if enabled else [])


class Versus(BaseModel):
    """How a layout compares with the chosen plan: its stages beside the plan's, the stage that decides
    the difference, and whether the two step-time bands overlap (None: a band is unknown)."""

    model_config = ConfigDict(extra="forbid")

    step_s: float
    step_band: tuple[float, float] | None = None
    stages_s: dict[str, float] = {}
    best_stages_s: dict[str, float] = {}
    deciding_stage: str | None = None  # the stage that adds most to the difference (None: faster everywhere)
    deciding_delta_s: float = 0.0
    band_overlap: bool | None = None
    headroom_fraction: float  # of usable memory, left free in the worst phase


class RunnerUp(BaseModel):
    """A layout that lost, with its predictions and why (the optional fields came with the explain work;
    older plans without them stay valid)."""

    model_config = ConfigDict(extra="forbid")

    rank: int
    layout: Layout
    step_s: float
    tps_per_card: float
    memory_peak_gb_max: float
    reshard_bytes_total: int
    why_lost: str
    cards: int | None = None
    versus: Versus | None = None


class Explanation(BaseModel):
    """`twin plan --explain`: where a given layout stands in the search, or what rejects it."""

    model_config = ConfigDict(extra="forbid")

    query: str  # the layout as given (a table string or a scenario file)
    layout: Layout | None = None  # with the knobs the planner chose where the query left them open
    rejected_by: str | None = None  # the rule or memory limit that rejects it
    rank: int | None = None  # 1 = the plan; rank_upper > rank when not every faster pair was evaluated
    rank_upper: int | None = None
    evaluated: int = 0  # layouts evaluated in full to place it
    versus: Versus | None = None
    summary: str


class ParetoPoint(BaseModel):
    """A candidate no other beats on every axis: step time, memory headroom, reshard volume (and cost)."""

    model_config = ConfigDict(extra="forbid")

    layout: Layout
    cards: int
    step_s: float
    headroom_fraction: float
    reshard_bytes_total: int
    card_hours_per_step: float
    chosen: bool = False


class SearchSummary(BaseModel):
    model_config = ConfigDict(extra="forbid")

    train_layouts: int
    rollout_layouts: int
    pairs_evaluated: int
    pairs_fitting: int
    candidates: int = 0  # fitting pairs times their gpu_memory_utilization steps: what the screen ranks
    rejected: dict[str, int]  # reason -> count
    simulated: int = 0
    wall_s: float
    stopped: str | None = None  # why the search ended before it had screened and ranked everything (--time-limit)
    front_stopped: str | None = None  # --pareto: why not every candidate on the screen's front was evaluated
    # the most a screen bound exceeded its full evaluation's step time, as a fraction of it (0: the bounds held)
    screen_overshoot: float = Field(default=0.0, ge=0.0)


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
    # of usable memory, kept free
    headroom_fraction: float | None = Field(default=None, ge=0.0, lt=1.0, allow_inf_nan=False)
    # in every phase by every candidate
    headroom_source: str | None = None
    risk: Risk = "p50"
    explained: Explanation | None = None
    pareto: list[ParetoPoint] = []

    def enabled(self, opt_id: str) -> bool:
        return any(o.id == opt_id and o.enabled for o in self.optimizations)

    def executor_refusals(self) -> dict[str, list[str]]:
        """Optimization id -> why `executor run` refuses this plan (empty when it runs as written)."""
        return {o.id: o.executor_refusals for o in self.optimizations if o.executor_refusals}


def plan_json_schema() -> dict:
    return Plan.model_json_schema(by_alias=True)


def save_plan(plan: Plan, path: Path | str) -> None:
    write_atomic(path, plan.model_dump_json(by_alias=True, indent=2) + "\n")


def load_plan(path: Path | str) -> Plan:
    """Read a plan.json; a schema version this code does not know is refused with a clear message."""
    label = f"plan {path}"
    return plan_from_mapping(read_mapping(path, label, "json"), label)


def plan_from_mapping(raw: dict, label: str) -> Plan:
    """A plan from its parsed JSON (`label` names the file in errors); an unknown schema version is refused."""
    version = raw.get("schema")
    if version != PLAN_SCHEMA:
        raise TwinError(f"{label}: schema version {version!r} is not supported (this version reads "
                        f"schema {PLAN_SCHEMA}; re-run `twin plan` with a matching twin)")
    return validated(Plan, raw, label)
