"""`twin plan`: search every valid (training, rollout) layout pair and rank those that fit by step time.

The search splits each pair into its training side and its rollout side, which the memory and cost models
compute separately (a phase's peak is the training side's worst stage plus what the rollout side adds to
every device), so thousands of pairs are screened exactly except for the reshard, whose time is bounded
below without its transfer list. The best pairs by that bound are then evaluated in full (exact reshard
transfer lists; the simulation from the command line), best first, until no unevaluated pair can beat the
k-th best.
"""

from __future__ import annotations

import heapq
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from twin.catalog.config import ModelConfig
from twin.catalog.registry import load_config, load_model
from twin.cost_models.memory import RolloutMemory, TrainMemory, rollout_parts, train_parts
from twin.cost_models.rollout import RolloutCost
from twin.cost_models.scheduling import driver_seconds
from twin.cost_models.stages import train_stage_seconds
from twin.cost_models.training import TrainCost
from twin.cost_models.transition import offload_time, reshard_lower_bound
from twin.errors import TwinError
from twin.evaluate import Evaluation, reshard_method, sleep_frees_memory
from twin.layout.enumerate import enumerate_rollout, enumerate_train
from twin.layout.models import Layout, Offload, Recompute, RolloutLayout, TrainLayout
from twin.layout.rules import check_pair
from twin.optimizations import RECIPE_OPTIMIZATIONS
from twin.plan import Plan, PlanOptimization, RunnerUp, SearchSummary
from twin.profile import Profile, resolve_profile
from twin.results import SimulationResult
from twin.scenario import ClusterRef, Scenario, Workload
from twin.topology.clusters import ClusterKind, cluster_kind
from twin.topology.routing import Cluster

MAX_NUM_SEQS = (32, 64, 128, 256)
LOG_PROB_MICRO_BATCHES = (8, 4, 2, 1)
UTILIZATION_STEP = 0.05
UTILIZATION_MAX = 0.9


def default_scenario(model: str, kind: str, cards: int) -> Scenario:
    """The recipes' workload (C1: GRPO, 512 prompts x 16, prompt 75, response 3039.8) and optimizations."""
    cfg = load_config(model)
    return Scenario(name=f"plan-{cfg.name}-{cluster_kind(kind).name}-{cards}", model=model,
                    cluster=ClusterRef(kind=kind, cards=cards), workload=Workload(), optimizations=RECIPE_OPTIMIZATIONS)


def train_variants(lay: TrainLayout) -> Iterator[TrainLayout]:
    """Memory knobs tried on every structural layout: recompute and host offload."""
    full = Recompute(granularity="full", method="uniform", layers=1)
    if lay.engine == "fsdp":
        yield lay
        yield lay.model_copy(update={"offload": Offload(param=True, grad=True, optimizer="offload")})
        return
    yield lay
    yield lay.model_copy(update={"recompute": Recompute(granularity="selective")})
    yield lay.model_copy(update={"recompute": full})
    yield lay.model_copy(update={"recompute": full, "offload": Offload(param=True, grad=True, optimizer="offload")})
    yield lay.model_copy(update={"recompute": full, "offload": Offload(param=True, grad=True, optimizer="swap")})


@dataclass
class TrainSide:
    layout: TrainLayout
    memory: TrainMemory
    parts: dict[str, float]  # phase -> worst stage's training-side GB
    seconds: float  # update + ref + old log-prob, dispatch included


@dataclass
class RolloutSide:
    layout: RolloutLayout  # gpu_memory_utilization filled in per pair
    memory: RolloutMemory
    cost: RolloutCost
    times: dict[float, float] = field(default_factory=dict)  # utilization -> rollout seconds


@dataclass(order=True)
class Candidate:
    bound_s: float
    index: int
    train: TrainSide = field(compare=False)
    rollout: RolloutSide = field(compare=False)
    utilization: float = field(compare=False)


class Planner:
    """Searches the layouts of one scenario's model on its cluster."""

    def __init__(self, scenario: Scenario, profile: Profile | None = None, base_dir: Path | None = None) -> None:
        self.sc = scenario
        self.kind: ClusterKind = cluster_kind(scenario.cluster.kind, base_dir)
        self.cfg: ModelConfig = load_config(scenario.model)
        self.inv = load_model(self.cfg)
        self.devices = scenario.cluster.cards * self.kind.devices_per_card
        self.profile = profile or resolve_profile(scenario.profile, self.kind.profile_kind, base_dir)
        self.cluster = Cluster(self.kind, scenario.cluster.cards)
        self.hbm_gb = self.kind.device_spec.hbm_gb.value
        self.rejected: Counter[str] = Counter()
        self.base_dir = base_dir

    # ---- the training side -------------------------------------------------------------------------
    def _train_side(self, lay: TrainLayout) -> TrainSide | None:
        for micro in LOG_PROB_MICRO_BATCHES:
            cand = lay.model_copy(update={"log_prob_micro_batch": micro})
            tm = TrainMemory(self.inv, cand, self.devices, self.sc, self.profile)
            per_stage = [train_parts(tm, s) for s in range(tm.n_stages)]
            parts = {phase: max(p[phase].total for p in per_stage) for phase in per_stage[0]}
            if parts["update"] > self.hbm_gb:
                self.rejected["training: update_actor exceeds HBM"] += 1
                return None
            if parts["log_prob"] <= self.hbm_gb:
                return TrainSide(cand, tm, parts, self._train_seconds(tm))
        self.rejected["training: log-prob pass exceeds HBM"] += 1
        return None

    def _train_seconds(self, tm: TrainMemory) -> float:
        tc = TrainCost(self.inv, self.sc, self.cluster, self.profile, tm)
        return sum(train_stage_seconds(self.sc, self.profile, tc).values())

    def train_structures(self) -> list[TrainLayout]:
        return list(enumerate_train(self.cfg, self.devices, self.kind))

    def train_sides(self, structures: list[TrainLayout], progress: Callable[[], None] | None = None
                    ) -> tuple[list[TrainSide], int]:
        sides = []
        for lay in structures:
            for variant in train_variants(lay):
                side = self._train_side(variant)
                if side is not None:
                    sides.append(side)
            if progress:
                progress()
        return _pareto(sides), len(structures)

    # ---- the rollout side --------------------------------------------------------------------------
    def rollout_sides(self) -> tuple[list[RolloutSide], int]:
        wl = self.sc.workload
        chunked = self.sc.has("chunked_prefill")
        knobs = {
            "graph_mode": self.sc.has("graph_mode"),
            "enable_chunked_prefill": chunked,
            "max_num_batched_tokens": 1024 if chunked else max(8192, wl.max_seq_len),
        }
        structures = list(enumerate_rollout(self.cfg, self.devices, self.kind, **knobs))
        sides = []
        for lay in structures:
            per_replica = wl.responses / lay.dp
            seen = set()
            for seqs in MAX_NUM_SEQS:
                seqs = min(seqs, max(1, int(per_replica)))
                if seqs in seen:
                    continue
                seen.add(seqs)
                cand = lay.model_copy(update={"max_num_seqs": seqs})
                rm = RolloutMemory(self.inv, cand, self.profile, self.hbm_gb)
                sides.append(RolloutSide(cand, rm, RolloutCost(self.inv, self.sc, self.cluster, self.profile, rm)))
        return sides, len(structures)

    def rollout_seconds(self, side: RolloutSide, util: float) -> float:
        if util not in side.times:
            side.times[util] = side.cost.analytical_seconds(side.memory.kv_tokens(util))
        return side.times[util]

    # ---- pairing -----------------------------------------------------------------------------------
    def pair(self, t: TrainSide, r: RolloutSide, index: int) -> Candidate | None:
        """Screen one pair: choose gpu_memory_utilization, check every phase, bound the step time."""
        room = (self.hbm_gb - t.parts["rollout"]) / self.hbm_gb
        util = min(UTILIZATION_MAX, int(room / UTILIZATION_STEP + 1e-9) * UTILIZATION_STEP)
        util = round(util, 2)
        if util <= 0:
            self.rejected["rollout: no memory left for vLLM"] += 1
            return None
        rm = r.memory
        if rm.kv_tokens(util) < self.sc.workload.max_seq_len:
            self.rejected["rollout: KV cache below one full sequence"] += 1
            return None
        lay = r.layout.model_copy(update={"gpu_memory_utilization": util})
        if check_pair(Layout(train=t.layout, rollout=lay), self.cfg, self.sc.has("directed_reshard")):
            self.rejected["pair: train EP does not divide rollout EP (directed reshard)"] += 1
            return None
        rm_u = RolloutMemory(self.inv, lay, self.profile, self.hbm_gb)
        add = rollout_parts(self.sc, rm_u, 0.0, sleep_frees_memory(self.sc))
        for phase in ("update", "log_prob", "transition"):
            if t.parts[phase] + add[phase].total > self.hbm_gb:
                self.rejected[f"pair: {phase} exceeds HBM"] += 1
                return None
        pf = self.profile
        fixed = sum(driver_seconds(self.sc, pf).values())
        bound = (t.seconds + self.rollout_seconds(r, util) + fixed
                 + offload_time(t.memory, rm_u, self.sc, self.cluster, pf)
                 + reshard_lower_bound(t.memory, rm_u, reshard_method(self.sc), self.cluster, pf))
        return Candidate(bound, index, t, RolloutSide(lay, rm_u, r.cost, r.times), util)


def _pareto(sides: list[TrainSide]) -> list[TrainSide]:
    """Drop training sides that are slower and leave less room in every phase than another of the same
    structure (they can never win a pair)."""
    keep = []
    for s in sides:
        dominated = any(
            o is not s and o.layout.tp == s.layout.tp and o.layout.pp == s.layout.pp and o.layout.ep == s.layout.ep
            and o.seconds <= s.seconds and all(o.parts[p] <= s.parts[p] for p in s.parts)
            and (o.seconds, *o.parts.values()) != (s.seconds, *s.parts.values())
            for o in sides)
        if not dominated:
            keep.append(s)
    return keep


@dataclass
class PlanOutcome:
    plan: Plan | None
    ranked: list[SimulationResult]
    best_unfit: str | None
    summary: SearchSummary


def search(planner: Planner, top: int, progress: Callable[[str, int], Callable[[], None]] | None = None,
           finalize: Callable[[Evaluation], SimulationResult] | None = None) -> PlanOutcome:
    """Screen every pair, then evaluate the best in full until none left can beat the k-th best."""
    start = time.perf_counter()
    structures = planner.train_structures()
    tick = progress("training layouts", len(structures)) if progress else None
    trains, n_train = planner.train_sides(structures, tick)
    rollouts, n_rollout = planner.rollout_sides()
    heap: list[Candidate] = []
    evaluated = 0
    tick = progress("layout pairs", len(trains) * len(rollouts)) if progress else None
    for t in trains:
        for r in rollouts:
            evaluated += 1
            cand = planner.pair(t, r, evaluated)
            if cand is not None:
                heap.append(cand)
            if tick:
                tick()
    heapq.heapify(heap)
    fitting = len(heap)
    exact: list[tuple[float, SimulationResult, Evaluation]] = []
    finalize = finalize or (lambda ev: ev.analytical(alternatives=False))
    best_unfit: str | None = None
    while heap and (len(exact) < top or heap[0].bound_s < exact[top - 1][0]):
        cand = heapq.heappop(heap)
        layout = Layout(train=cand.train.layout, rollout=cand.rollout.layout)
        ev = Evaluation(planner.sc, planner.profile, layout, planner.base_dir)
        result = finalize(ev)
        if not result.fits:
            planner.rejected["pair: exceeds HBM with the exact reshard buffers"] += 1
            best_unfit = best_unfit or f"{result.memory_peak_gb_max:.1f} GB in {result.peak_phase}"
            continue
        exact.append((result.step_s, result, ev))
        exact.sort(key=lambda e: e[0])
    summary = SearchSummary(train_layouts=n_train, rollout_layouts=n_rollout, pairs_evaluated=evaluated,
                            pairs_fitting=fitting, rejected=dict(planner.rejected), simulated=len(exact),
                            wall_s=time.perf_counter() - start)
    if not exact:
        return PlanOutcome(None, [], best_unfit or _closest(planner), summary)
    ranked = exact[:top]
    _, winner, ev = ranked[0]
    runner_ups = [RunnerUp(rank=i + 2, layout=e.layout, step_s=r.step_s, tps_per_card=r.tps_per_card,
                           memory_peak_gb_max=r.memory_peak_gb_max, reshard_bytes_total=r.reshard.bytes_total,
                           why_lost=_why_lost(r, winner))
                  for i, (_, r, e) in enumerate(ranked[1:])]
    layout = ev.layout
    scenario = planner.sc.model_copy(update={"layout": layout})
    predictions = winner.model_copy(update={"reshard": ev.reshard_result(alternatives=True)})
    plan = Plan(scenario=scenario, layout=layout,
                optimizations=[PlanOptimization.of(o, True) for o in planner.sc.optimizations],
                predictions=predictions, profile=planner.profile.id, runner_ups=runner_ups, search=summary)
    return PlanOutcome(plan, [r for _, r, _ in ranked], None, summary)


def fixed_plan(scenario: Scenario, profile: Profile | None = None, base_dir: Path | None = None,
               finalize: Callable[[Evaluation], SimulationResult] | None = None) -> Plan:
    """A plan for the scenario's own layout: validated and predicted, with nothing searched."""
    if scenario.layout is None:
        raise TwinError(f"scenario {scenario.name} has no layout to keep")
    ev = Evaluation(scenario, profile, base_dir=base_dir)
    result = (finalize or (lambda e: e.analytical(alternatives=False)))(ev)
    predictions = result.model_copy(update={"reshard": ev.reshard_result(alternatives=True)})
    return Plan(scenario=scenario, layout=scenario.layout,
                optimizations=[PlanOptimization.of(o, True) for o in scenario.optimizations],
                predictions=predictions, profile=ev.profile.id)


def _why_lost(r: SimulationResult, winner: SimulationResult) -> str:
    slower = (r.step_s - winner.step_s) / winner.step_s * 100
    worst = max(r.stages_s, key=lambda k: r.stages_s[k] - winner.stages_s.get(k, 0.0))
    delta = r.stages_s[worst] - winner.stages_s.get(worst, 0.0)
    return (f"step {slower:.1f} % slower ({r.step_s:.0f} s vs {winner.step_s:.0f} s); "
            f"most of it in {worst} (+{delta:.0f} s)")


def _closest(planner: Planner) -> str:
    """How close the smallest-footprint training layout came to fitting."""
    best = None
    for lay in planner.train_structures():
        for variant in train_variants(lay):
            tm = TrainMemory(planner.inv, variant.model_copy(update={"log_prob_micro_batch": 1}), planner.devices,
                             planner.sc, planner.profile)
            peak = max(train_parts(tm, s)["update"].total for s in range(tm.n_stages))
            if best is None or peak < best[0]:
                best = (peak, variant)
    if best is None:
        raise TwinError(f"no valid training layout of {planner.cfg.name} on {planner.devices} devices")
    return f"{best[0]:.1f} GB in update_actor with {best[1].short()} (HBM {planner.hbm_gb:g} GB)"
