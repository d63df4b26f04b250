"""`twin plan`: search every valid (training, rollout) layout pair and rank those that fit by step time.

The search splits each pair into its training side and its rollout side, which the memory and cost models
compute separately (a phase's peak is the training side's worst stage plus what the rollout side adds to
every device), so thousands of pairs are screened exactly except for the reshard, whose time is bounded
below without its transfer list. Each pair is screened at each of its gpu_memory_utilization steps (a
candidate apiece), and a layout is ranked by its best step. The best candidates by that bound are then
evaluated in full (exact reshard transfer lists; the simulation from the command line), best first, until no
unevaluated candidate can beat the k-th best layout. A candidate over the memory limit with its exact reshard
buffers is not simulated, and a utilization step bounded at or above its layout's best key is left pending (it
cannot improve its layout; --pareto may still evaluate it). Training variants are screened by their optimizer
step's memory before their activations, and the reshard's bound is computed once per parallel structure.

The screen's rollout is the closed form, not a strict bound of the simulated one: where a full evaluation comes
in below its screen bound, the summary records by how much (`screen_overshoot`; up to 0.2 % on the shipped
models, 2026-12-02), since a layout within that of the k-th may then have been left unevaluated, far inside the
prediction's band. Lowering every bound by it instead cost twice the evaluations on flat searches (tiny on the cpu
kind: 37 -> 82) and changed no ranking of the six searches measured.

Every candidate keeps a memory headroom (a fraction of usable device memory, by default the profile's memory
uncertainty)
in every phase, and the ranking uses a quantile of the step-time band (`risk`): p50 the prediction,
p90 its 90th percentile where the result carries a band (twin.explain.step_p90: the step's band, or the stages' where
wider, read as the mean absolute error of a normal error).
"""

from __future__ import annotations

import heapq
import itertools
import math
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from twin.catalog.config import ModelConfig
from twin.catalog.registry import load_config, load_model
from twin.cost_models.memory import RolloutMemory, TrainMemory, optimizer_step_part, rollout_parts, train_parts
from twin.cost_models.rollout import RolloutCost
from twin.cost_models.scheduling import driver_seconds
from twin.cost_models.stages import train_stage_seconds
from twin.cost_models.training import TrainCost
from twin.cost_models.transition import reshard_lower_bound, rollout_offload_moments, train_offload_moments
from twin.errors import TwinError
from twin.evaluate import Evaluation, reshard_method
from twin.explain import risk_key, runner_up
from twin.layout.enumerate import enumerate_rollout, enumerate_train
from twin.layout.models import Layout, Offload, Recompute, RolloutLayout, TrainLayout
from twin.layout.rules import check_pair
from twin.optimizations import RECIPE_OPTIMIZATIONS
from twin.plan import Plan, PlanOptimization, Risk, SearchSummary
from twin.profile import Profile, profile_for_kind
from twin.results import SimulationResult
from twin.scenario import LAUNCHED_VERL, ClusterRef, Scenario, Software, Workload
from twin.topology.clusters import ClusterKind, cluster_kind, sleep_frees_memory
from twin.topology.routing import Cluster
from twin.uncertainty import P95_ABS_OF_MEAN_ABS

# what the planner reports progress to: a stage's label and total -> a callable that advances it (by one, or by n)
ProgressFactory = Callable[[str, int], Callable[..., None]]
MAX_NUM_SEQS = (32, 64, 128, 256)
LOG_PROB_MICRO_BATCHES = (8, 4, 2, 1)
FULL_RECOMPUTE = Recompute(granularity="full", method="uniform", layers=1)
# gpu_memory_utilization steps: 0.05 of a 64 GB A3 die is 3.2 GB, below the default headroom (7.4 % = 4.7 GB, the
# memory model's own uncertainty), so a finer step would trade memory the model cannot resolve
UTILIZATION_STEP = 0.05
UTILIZATION_MAX = 0.9  # vLLM's default gpu_memory_utilization (EngineArgs), the most the recipes run
FRONT_EVALUATIONS = 16  # --pareto: screen-front candidates evaluated in full per card count, fastest first


def default_headroom(profile: Profile) -> tuple[float, str]:
    """The fraction of usable device memory every phase keeps free, and where it comes from: the profile's
    cross-validated memory error when it has one, else its sourced `memory_headroom_fraction`."""
    cv = profile.cross_validation
    if cv is not None and cv.memory_rel_error:
        return (min(0.5, cv.memory_rel_error * P95_ABS_OF_MEAN_ABS),
                f"{profile.id}: leave-one-case-out memory error {cv.memory_rel_error:.1%} "
                f"x {P95_ABS_OF_MEAN_ABS:.2f} (p95)")
    param = profile.params.get("memory_headroom_fraction")
    if param is None:
        raise TwinError(f"profile {profile.id} has neither a cross-validated memory error nor "
                        "memory_headroom_fraction; pass --headroom")
    return param.value, f"profile {profile.id}: memory_headroom_fraction, sourced there"

# Full evaluations of one search at most: a guard, not the usual end at 128 cards (deepseek-r1 there: 36, 19 of
# them over the memory limit with their exact reshard buffers). At 8192 cards (16,384 devices) a full evaluation
# costs about 0.15 s and deepseek-r1's search on A3 and on A2 ends at the cap (benchmarks/plan_speed.py, 2026-12-02:
# the best unevaluated bound 2-5 % below the 5th best). Past the cap the search stops and says so.
MAX_FULL_EVALUATIONS = 128


def default_scenario(model: str, kind: str, cards: int) -> Scenario:
    """The recipes' workload (C1: GRPO, 512 prompts x 16, prompt 75, response 3039.8) and optimizations, run by the
    verl the executor launches (its trainer polls for finished generation)."""
    cfg = load_config(model)
    return Scenario(name=f"plan-{cfg.name}-{cluster_kind(kind).name}-{cards}", model=model,
                    cluster=ClusterRef(kind=kind, cards=cards), workload=Workload(), optimizations=RECIPE_OPTIMIZATIONS,
                    software=Software(verl=LAUNCHED_VERL, rollout_poll=True))


def train_variants(lay: TrainLayout, kind: ClusterKind) -> Iterator[TrainLayout]:
    """Memory knobs tried on every structural layout: recompute and host offload, and the optimizer its Megatron
    keeps on the host: MindSpeed's swap optimizer, or megatron-core's CPU optimizer where the kind's host memory
    bandwidth prices its step (each flavour refuses the other's: executor/verl_config/train.py). Where full recompute
    fits, the planner also tries its block form (Planner._block_side)."""
    full = FULL_RECOMPUTE
    if lay.engine == "fsdp":
        yield lay
        yield lay.model_copy(update={"offload": Offload(param=True, grad=True, optimizer="offload")})
        return
    yield lay
    yield lay.model_copy(update={"recompute": Recompute(granularity="selective")})
    yield lay.model_copy(update={"recompute": full})
    yield lay.model_copy(update={"recompute": full, "offload": Offload(param=True, grad=True, optimizer="offload")})
    if kind.megatron_flavour == "mindspeed":
        yield lay.model_copy(update={"recompute": full, "offload": Offload(param=True, grad=True, optimizer="swap")})
    elif kind.host_memory_bandwidth_gbs_per_node is not None:
        yield lay.model_copy(update={"recompute": full, "offload": Offload(param=True, grad=True, optimizer="cpu")})


@dataclass
class TrainSide:
    layout: TrainLayout
    memory: TrainMemory
    parts: dict[str, float]  # phase -> worst stage's training-side GB
    seconds: float  # update + ref + old log-prob, dispatch included
    offload_s: float  # the training side's share of the offload moments
    structure: tuple = ()  # train_structure of the layout: what its pairs' reshard and rules depend on


@dataclass
class RolloutSide:
    layout: RolloutLayout  # gpu_memory_utilization filled in per pair
    memory: RolloutMemory
    cost: RolloutCost
    offload_s: float = 0.0  # the rollout side's share of the offload moments (at its utilization)
    times: dict[float, float] = field(default_factory=dict)  # utilization -> rollout seconds
    steps: dict[float, tuple[RolloutSide, dict[str, float]]] = field(default_factory=dict)
    # utilization -> this side at that utilization and the GB it adds to every device in each phase


@dataclass(order=True)
class Candidate:
    bound_s: float
    index: int
    train: TrainSide = field(compare=False)
    rollout: RolloutSide = field(compare=False)
    utilization: float = field(compare=False)
    peak_gb: float = field(default=0.0, compare=False)  # the screen's worst phase (reshard buffers aside)


class Planner:
    """Searches the layouts of one scenario's model on its cluster."""

    def __init__(self, scenario: Scenario, profile: Profile | None = None, base_dir: Path | None = None,
                 headroom: float | None = None, risk: Risk = "p50") -> None:
        self.sc = scenario
        self.kind: ClusterKind = cluster_kind(scenario.cluster.kind, base_dir)
        self.cfg: ModelConfig = load_config(scenario.model)
        self.inv = load_model(self.cfg)
        self.devices = scenario.cluster.cards * self.kind.devices_per_card
        self.profile = profile_for_kind(profile, scenario.profile, self.kind.profile_kind, base_dir)
        self.cluster = Cluster(self.kind, scenario.cluster.cards)
        self.capacity_gb = self.kind.device_spec.capacity_gb
        self.rejected: Counter[str] = Counter()
        self.base_dir = base_dir
        self.headroom, self.headroom_source = ((headroom, "--headroom") if headroom is not None
                                               else default_headroom(self.profile))
        if not 0 <= self.headroom < 1:
            raise TwinError(f"headroom {self.headroom} is not a fraction of usable device memory in [0, 1)")
        self.limit_gb = self.capacity_gb * (1 - self.headroom)  # what every phase may use
        self.risk: Risk = risk
        self.shared: dict[tuple, dict] = {}  # parallel structure -> placement and reshard lists (knobs aside)
        self.reshard_bounds: dict[tuple, float] = {}  # parallel structure -> the screen's reshard bound
        self.directed_reshard = scenario.has("directed_reshard")
        self.utilization_steps: dict[tuple, list[float]] = {}  # (rollout side's memory, training GB) -> pair()
        self.pass_caches: dict[TrainLayout, tuple[dict, dict]] = {}  # layout, knobs aside -> TrainCost's caches

    # ---- the training side -------------------------------------------------------------------------
    def train_parts(self, lay: TrainLayout) -> tuple[TrainMemory, dict[str, float]]:
        """The training side's memory model and its worst stage's GB in each phase."""
        tm = TrainMemory(self.inv, lay, self.devices, self.sc, self.profile)
        per_stage = [train_parts(tm, s) for s in range(tm.n_stages)]
        return tm, {phase: max(p[phase].total for p in per_stage) for phase in per_stage[0]}

    def _train_side(self, lay: TrainLayout) -> TrainSide | None:
        fitting = self._fitting_memory(lay)
        return None if fitting is None else self._side(*fitting)

    def _side(self, tm: TrainMemory, parts: dict[str, float]) -> TrainSide:
        return TrainSide(tm.lay, tm, parts, self._train_seconds(tm),
                         sum(train_offload_moments(tm, self.sc, self.cluster, self.profile).values()),
                         train_structure(tm.lay, self.cfg.num_layers))

    def _fitting_memory(self, lay: TrainLayout, count: bool = True
                        ) -> tuple[TrainMemory, dict[str, float]] | None:
        """The memory model and per-phase GB of `lay` at the largest log-prob micro-batch that fits, or None (a
        rejection, counted where `count`)."""
        rejected: Counter[str] = Counter()
        tm = TrainMemory(self.inv, lay, self.devices, self.sc, self.profile)
        fitting = None
        if any(optimizer_step_part(tm, s).total > self.limit_gb for s in range(tm.n_stages)):
            # its step alone, screened first
            rejected["training: update_actor exceeds usable memory less headroom"] += 1
        else:
            for micro in LOG_PROB_MICRO_BATCHES:
                tm, parts = self.train_parts(lay.model_copy(update={"log_prob_micro_batch": micro}))
                if parts["update"] > self.limit_gb:
                    rejected["training: update_actor exceeds usable memory less headroom"] += 1
                    break
                if parts["log_prob"] <= self.limit_gb:
                    fitting = tm, parts
                    break
            else:
                rejected["training: log-prob pass exceeds usable memory less headroom"] += 1
        if count:
            self.rejected.update(rejected)
        return fitting

    def _block_side(self, full: TrainLayout) -> TrainSide | None:
        """The fastest block recompute of a layout that fits with full recompute. Megatron's `block` method
        recomputes the first k layers of each model chunk and keeps the others' activations (TransformerBlock's
        _checkpointed_forward), so the update's activation memory falls and its time grows with k: the smallest k
        below a chunk's layers (where block is full recompute) whose layout fits, found by bisection (probes that do
        not fit are not counted as rejections)."""
        chunk = max(full.stage_layers(self.cfg.num_layers)) // (full.vpp or 1)
        lo, hi, best = 1, chunk - 1, None
        while lo <= hi:
            k = (lo + hi) // 2
            block = full.model_copy(update={"recompute": Recompute(granularity="full", method="block", layers=k)})
            fitting = self._fitting_memory(block, count=False)
            if fitting is None:
                lo = k + 1
            else:
                best, hi = fitting, k - 1
        return None if best is None else self._side(*best)

    def _train_seconds(self, tm: TrainMemory) -> float:
        # the memory knobs' and micro-batch sizes' variants of one layout share its passes (TrainCost)
        structure = tm.lay.model_copy(update={"offload": Offload(), "recompute": Recompute(), "micro_batch": 1,
                                              "log_prob_micro_batch": 1})
        caches = self.pass_caches.setdefault(structure, ({}, {}))
        tc = TrainCost(self.inv, self.sc, self.cluster, self.profile, tm, caches)
        return sum(train_stage_seconds(self.sc, self.profile, tc).values())

    def train_structures(self) -> list[TrainLayout]:
        return list(enumerate_train(self.cfg, self.devices, self.kind))

    def train_sides(self, structures: list[TrainLayout], progress: Callable[[], None] | None = None
                    ) -> tuple[list[TrainSide], int]:
        sides = []
        for lay in structures:
            for variant in train_variants(lay, self.kind):
                side = self._train_side(variant)
                if side is None:
                    continue
                sides.append(side)
                if variant.recompute == FULL_RECOMPUTE:
                    block = self._block_side(side.layout)
                    if block is not None:
                        sides.append(block)
            if progress:
                progress()
        return _pareto(sides), len(structures)

    # ---- the rollout side --------------------------------------------------------------------------
    def rollout_sides(self) -> tuple[list[RolloutSide], int]:
        wl = self.sc.workload
        # a plan for verl (what `executor run` launches) keeps to the replicas its vLLM server can launch
        structures = list(enumerate_rollout(self.cfg, self.devices, self.kind,
                                            verl_server=self.sc.software.framework == "verl", **self.rollout_knobs()))
        sides = []
        for lay in structures:
            per_replica = wl.responses / lay.dp
            seen = set()
            for seqs in MAX_NUM_SEQS:
                seqs = min(seqs, max(1, int(per_replica)))
                if seqs in seen:
                    continue
                seen.add(seqs)
                sides.append(self.rollout_side(lay.model_copy(update={"max_num_seqs": seqs})))
        return sides, len(structures)

    def rollout_knobs(self) -> dict[str, object]:
        """The rollout settings the scenario's optimizations fix (not searched)."""
        chunked = self.sc.has("chunked_prefill")
        return {"graph_mode": self.sc.has("graph_mode"), "enable_chunked_prefill": chunked,
                "max_num_batched_tokens": 1024 if chunked else max(8192, self.sc.workload.max_seq_len)}

    def rollout_side(self, lay: RolloutLayout) -> RolloutSide:
        rm = RolloutMemory(self.inv, lay, self.profile, self.capacity_gb)
        return RolloutSide(lay, rm, RolloutCost(self.inv, self.sc, self.cluster, self.profile, rm))

    def rollout_step(self, side: RolloutSide, util: float) -> tuple[RolloutSide, dict[str, float]]:
        """`side` at `util` and the GB it adds to every device in each phase: the same for every training side."""
        if util not in side.steps:
            lay = side.layout.model_copy(update={"gpu_memory_utilization": util})
            rm = RolloutMemory(self.inv, lay, self.profile, self.capacity_gb)
            offload = sum(rollout_offload_moments(rm, self.sc, self.cluster, self.profile).values())
            parts = rollout_parts(self.sc, rm, 0.0, sleep_frees_memory(self.sc))
            side.steps[util] = (RolloutSide(lay, rm, side.cost, offload, side.times),
                                {phase: b.total for phase, b in parts.items()})
        return side.steps[util]

    @cached_property
    def driver_s(self) -> float:
        """Reward and advantage seconds: the same for every pair."""
        return sum(driver_seconds(self.sc, self.profile).values())

    def rollout_seconds(self, side: RolloutSide, util: float) -> float:
        if util not in side.times:
            side.times[util] = side.cost.analytical_seconds(side.memory.kv_tokens(util))
        return side.times[util]

    # ---- pairing -----------------------------------------------------------------------------------
    def reshard_bound(self, t: TrainSide, r: RolloutSide) -> float:
        """The reshard's lower bound, once per parallel structure (the same at every utilization step and for
        every memory knob)."""
        key = (*t.structure, *rollout_structure(r.layout))  # parallel_structure, the training part kept on the side
        if key not in self.reshard_bounds:
            self.reshard_bounds[key] = reshard_lower_bound(t.memory, r.memory, reshard_method(self.sc), self.cluster,
                                                           self.profile, self.sc)
        return self.reshard_bounds[key]

    def utilization(self, train_rollout_gb: float) -> float:
        """The largest gpu_memory_utilization (in steps, at most the cap) that keeps the headroom in the rollout
        phase: vLLM takes utilization x the usable memory beside what training leaves on the device."""
        room = (self.limit_gb - train_rollout_gb) / self.capacity_gb
        return round(int(min(UTILIZATION_MAX, room) / UTILIZATION_STEP + 1e-9) * UTILIZATION_STEP, 2)

    def utilizations(self, train_rollout_gb: float, rollout: RolloutMemory) -> list[float]:
        """The gpu_memory_utilization steps a pair is screened at, largest first: from `utilization` down to the
        smallest whose KV cache still holds max_num_seqs sequences of the mean length (prompt + response means).
        Lower, vLLM preempts the typical sequence, which is what a smaller max_num_seqs (searched too) does by
        design. Every step is kept while it holds one full sequence; each is a candidate of its own, so more
        headroom is traded against the step time by the ranking, not pinned at the top."""
        wl = self.sc.workload
        typical = rollout.lay.max_num_seqs * (wl.prompt_len.mean + wl.response_len.mean)
        steps = []
        for k in range(int(self.utilization(train_rollout_gb) / UTILIZATION_STEP + 1e-9), 0, -1):
            util = round(k * UTILIZATION_STEP, 2)
            tokens = rollout.kv_tokens(util)
            if tokens < wl.max_seq_len or (steps and tokens < typical):
                break
            steps.append(util)
        return steps

    def pair(self, t: TrainSide, r: RolloutSide, index: Iterator[int]) -> list[Candidate]:
        """Screen one pair at each of its utilization steps: check every phase, bound the step time. Memory grows
        with the utilization, so the steps are checked smallest first and the first that exceeds ends them."""
        if check_pair(t.layout, r.layout, self.cfg, self.directed_reshard):
            self.rejected["pair: train EP does not divide rollout EP (directed reshard)"] += 1
            return []
        key = (id(r.memory), t.parts["rollout"])  # many training sides leave the rollout the same room
        if key not in self.utilization_steps:
            self.utilization_steps[key] = self.utilizations(t.parts["rollout"], r.memory)
        utils = self.utilization_steps[key]
        if not utils:
            self.rejected["rollout: no memory left for vLLM" if self.utilization(t.parts["rollout"]) <= 0 else
                          "rollout: KV cache below one full sequence"] += 1
            return []
        reshard = self.reshard_bound(t, r)
        out = []
        for util in reversed(utils):
            side, add = self.rollout_step(r, util)
            over = next((ph for ph in ("update", "log_prob", "transition")
                         if t.parts[ph] + add[ph] > self.limit_gb), None)
            if over:
                if not out:
                    self.rejected[f"pair: {over} exceeds usable memory less headroom"] += 1
                break
            peak = max(t.parts[phase] + add[phase] for phase in add)
            bound = (t.seconds + self.rollout_seconds(r, util) + self.driver_s + t.offload_s + side.offload_s
                     + reshard)
            out.append(Candidate(bound, next(index), t, side, util, peak))
        return out


def train_structure(t: TrainLayout, num_layers: int) -> tuple:
    """The training layout's part of `parallel_structure`."""
    return t.engine, t.tp, t.pp, t.ep, t.cp, t.etp, t.moe_tp_extend_ep, t.vpp, t.stage_layers(num_layers)


def rollout_structure(r: RolloutLayout) -> tuple:
    """The rollout layout's part of `parallel_structure`."""
    return r.tp, r.dp, r.ep


def parallel_structure(t: TrainLayout, r: RolloutLayout, num_layers: int) -> tuple:
    """What a pair's placement and its reshard (transfer lists, rounds, export) depend on: not recompute,
    offload, micro-batches or vLLM's knobs."""
    return *train_structure(t, num_layers), *rollout_structure(r)


def _pareto(sides: list[TrainSide]) -> list[TrainSide]:
    """Drop training sides that take longer (passes and offload) and leave less room in every phase than another of
    the same parallel structure, which pairs with every rollout as they do, reshard and rules alike (they can never
    win a pair)."""
    groups: dict[tuple, list[TrainSide]] = {}
    for s in sides:
        groups.setdefault(s.structure, []).append(s)
    keep = []
    for group in groups.values():
        figures = [(s.seconds + s.offload_s, *s.parts.values()) for s in group]
        for s, mine in zip(group, figures, strict=True):
            if not any(theirs != mine and all(a <= b for a, b in zip(theirs, mine, strict=True))
                       for theirs in figures):
                keep.append(s)
    return keep


@dataclass
class Evaluated:
    """A candidate evaluated in full that keeps the headroom, with its ranking key."""

    key: float
    result: SimulationResult
    evaluation: Evaluation
    candidate: Candidate | None = None  # the screened candidate it was (None for a layout given by the user)

    @property
    def layout(self) -> Layout:
        return self.evaluation.layout


def same_pair(a: Candidate, b: Candidate) -> bool:
    """Whether two screened candidates are utilization steps of one pair (they share its training side and its
    rollout cost model)."""
    return a.train is b.train and a.rollout.cost is b.rollout.cost


def layout_group(layout: Layout) -> str:
    """A layout without its gpu_memory_utilization: the utilization steps of one layout are one group, ranked by
    their best step."""
    return layout.model_copy(update={"rollout": layout.rollout.model_copy(
        update={"gpu_memory_utilization": 0.0})}).model_dump_json()


@dataclass
class PlanOutcome:
    plan: Plan | None
    ranked: list[SimulationResult]
    best_unfit: str | None
    summary: SearchSummary
    evaluated: list[Evaluated] = field(default_factory=list)  # every fitting full evaluation, best first
    pending: list[Candidate] = field(default_factory=list)  # screened candidates never evaluated in full (a heap)
    best: dict[str, Evaluated] = field(default_factory=dict)  # layout group -> its best utilization step

    def distinct(self) -> list[Evaluated]:
        """The best utilization step of each layout evaluated in full, best first: what the plan ranks."""
        return sorted(self.best.values(), key=lambda e: e.key)


def evaluate(planner: Planner, layout: Layout, finalize: Callable[[Evaluation], SimulationResult]
             ) -> tuple[SimulationResult | None, Evaluation, str | None]:
    """The full evaluation of one layout, and why it does not fit (None when it keeps the headroom). The exact
    memory (the reshard's transfer lists included) is checked first: a layout over the limit is not simulated
    (no result)."""
    ev = Evaluation(planner.sc, planner.profile, layout, planner.base_dir)
    # the placement and the reshard transfer lists depend on the parallel structure only: layouts that share it
    # share them, as Evaluation.with_profile does
    key = parallel_structure(layout.train, layout.rollout, planner.cfg.num_layers)
    if key in planner.shared:
        ev.__dict__.update(planner.shared[key])
    else:
        planner.shared[key] = {"cluster": ev.cluster, "placement": ev.placement,
                               "_reshard": ev.__dict__.setdefault("_reshard", {})}
    mem = ev.memory_report
    if mem.peak_gb_max > planner.limit_gb:
        beyond = "" if mem.fits else ", more than the device holds"
        return None, ev, (f"{mem.peak_phase} needs {mem.peak_gb_max:.1f} GB, over the {planner.limit_gb:.1f} GB "
                          f"limit ({planner.capacity_gb:g} GB usable less {planner.headroom:.1%} headroom){beyond}")
    return finalize(ev), ev, None


def cannot_improve(outcome: PlanOutcome, cand: Candidate) -> bool:
    """Whether a screened candidate cannot lower its layout's key: another utilization step of its layout is
    ranked at or below the candidate's bound, and the candidate's own key is at least that bound."""
    done = outcome.best.get(layout_group(Layout(train=cand.train.layout, rollout=cand.rollout.layout)))
    return done is not None and cand.bound_s >= done.key


def evaluate_candidate(planner: Planner, outcome: PlanOutcome, cand: Candidate,
                       finalize: Callable[[Evaluation], SimulationResult]) -> Evaluated | None:
    """Evaluate one screened candidate in full and record it (None when it does not fit)."""
    layout = Layout(train=cand.train.layout, rollout=cand.rollout.layout)
    result, ev, unfit = evaluate(planner, layout, finalize)
    outcome.summary.simulated += 1
    if unfit:
        planner.rejected["pair: exceeds usable memory less headroom with the exact reshard buffers"] += 1
        outcome.best_unfit = outcome.best_unfit or unfit
        return None
    done = Evaluated(risk_key(result, planner.risk), result, ev, cand)
    outcome.summary.screen_overshoot = max(outcome.summary.screen_overshoot,
                                           (cand.bound_s - result.step_s) / result.step_s)
    outcome.evaluated.append(done)
    outcome.evaluated.sort(key=lambda e: e.key)
    group = layout_group(layout)
    if group not in outcome.best or done.key < outcome.best[group].key:
        outcome.best[group] = done
    return done


def search(planner: Planner, top: int, progress: ProgressFactory | None = None,
           finalize: Callable[[Evaluation], SimulationResult] | None = None,
           deadline: float | None = None) -> PlanOutcome:
    """Screen every pair at each of its utilization steps, then evaluate the best in full until none left can
    beat the k-th best layout (a layout ranked by its best utilization step).

    Past `deadline` (a time.perf_counter() value) screening stops once some pair fits and evaluation in full
    stops once one candidate is ranked; past MAX_FULL_EVALUATIONS it stops too. The summary says why."""
    start = time.perf_counter()
    stopped: str | None = None
    structures = planner.train_structures()
    tick = progress("training layouts", len(structures)) if progress else None
    trains, n_train = planner.train_sides(structures, tick)
    rollouts, n_rollout = planner.rollout_sides()
    heap: list[Candidate] = []
    screened, fitting, index = 0, 0, itertools.count()
    tick = progress("layout pairs", len(trains) * len(rollouts)) if progress else None
    for t in trains:
        if deadline is not None and heap and time.perf_counter() > deadline:  # something fits: stop screening
            stopped = f"time limit reached after screening {screened:,} of {len(trains) * len(rollouts):,} pairs"
            break
        for r in rollouts:
            screened += 1
            cands = planner.pair(t, r, index)
            fitting += bool(cands)
            heap.extend(cands)
        if tick:
            tick(len(rollouts))  # once a training side: a bar advanced per pair costs a tenth of a second
    heapq.heapify(heap)
    summary = SearchSummary(train_layouts=n_train, rollout_layouts=n_rollout, pairs_evaluated=screened,
                            pairs_fitting=fitting, candidates=len(heap), rejected={}, wall_s=0.0)
    outcome = PlanOutcome(None, [], None, summary, pending=heap)
    finalize = finalize or (lambda ev: ev.analytical(alternatives=False))
    ex: list[Evaluated] = []
    skipped: list[Candidate] = []  # steps that cannot improve their layout: left pending (--pareto, --explain)
    tick = progress(f"evaluating in full (at most {MAX_FULL_EVALUATIONS})", MAX_FULL_EVALUATIONS) if progress else None
    # the bound is below the step time (but for screen_overshoot, recorded), which is below its p90: nothing left
    # can beat the k-th key (a step of a layout already ranked can only lower that layout's key, never below the
    # bound)
    while heap and (len(ex) < top or heap[0].bound_s < ex[top - 1].key):
        if deadline is not None and ex and time.perf_counter() > deadline:
            stopped = stopped or (f"time limit reached with {len(heap) + len(skipped):,} screened candidates not "
                                  "evaluated in full")
            break
        if summary.simulated >= MAX_FULL_EVALUATIONS and ex:
            stopped = stopped or (f"{summary.simulated} candidates evaluated in full (the most the planner evaluates); "
                                  f"{len(heap) + len(skipped):,} screened candidates were not, the best of them "
                                  f"bounded below at {heap[0].bound_s:.1f} s against "
                                  f"{ex[min(top, len(ex)) - 1].key:.1f} s for the {top}th best")
            break
        cand = heapq.heappop(heap)
        if cannot_improve(outcome, cand):
            skipped.append(cand)
            continue
        if evaluate_candidate(planner, outcome, cand, finalize):
            ex = outcome.distinct()
        if tick:
            tick()
    for cand in skipped:
        heapq.heappush(heap, cand)
    summary.stopped = stopped
    if not ex:
        outcome.best_unfit = outcome.best_unfit or _closest(planner)
    else:
        outcome.plan = _plan(planner, ex[:top], summary)
        outcome.ranked = [e.result for e in ex[:top]]
    summary.rejected = dict(planner.rejected)
    summary.wall_s = time.perf_counter() - start
    return outcome


def screen_front(searches: list[tuple[Planner, PlanOutcome]]) -> list[list[Candidate]]:
    """For each search, its pending candidates on the joint screen-level Pareto front of all searches: step-time
    bound, peak memory as a fraction of usable device memory and, when the card count varies, the bound's card-hours.
    Within one card count the card-hours follow the bound, so each search's two-axis front is swept in one pass
    (sorted by bound, kept while its peak is the lowest yet); only those fronts are compared across card counts."""
    fronts = []
    for planner, outcome in searches:
        mine, lowest = [], math.inf
        for c in sorted(outcome.pending):
            peak = c.peak_gb / planner.capacity_gb
            if peak < lowest:
                mine.append((c.bound_s, peak, c.bound_s * planner.sc.cluster.cards, c))
                lowest = peak
        fronts.append(mine)
    if len(fronts) < 2:
        return [[c for *_, c in f] for f in fronts]
    every = [p[:3] for f in fronts for p in f]

    def dominated(a: tuple[float, ...]) -> bool:
        return any(all(x <= y for x, y in zip(b, a, strict=True)) and b != a for b in every)

    return [[c for *axes, c in f if not dominated(tuple(axes))] for f in fronts]


def evaluate_front(searches: list[tuple[Planner, PlanOutcome]], finalize: Callable[[Evaluation], SimulationResult],
                   progress: ProgressFactory | None = None, cap: int = FRONT_EVALUATIONS,
                   deadline: float | None = None) -> None:
    """--pareto: evaluate in full the plan's own other utilization steps of each search, then the pending candidates
    on the joint screen front (`screen_front`), fastest first, at most `cap` per card count; where that or `deadline`
    cuts a front, its search summary says so."""
    fronts = [sorted(f) for f in screen_front(searches)]
    # the plan's own utilization steps first (what more headroom costs the chosen layout), beside the cap
    plans = [o.distinct()[0].candidate for _, o in searches]
    own = [[c for c in o.pending if plan is not None and same_pair(c, plan)]
           for (_, o), plan in zip(searches, plans, strict=True)]
    tick = progress("Pareto front", sum(min(cap, len(f)) + len(s) for f, s in zip(fronts, own, strict=True))
                    ) if progress else None
    for (planner, outcome), steps in zip(searches, own, strict=True):
        for cand in steps:
            outcome.pending.remove(cand)
            evaluate_candidate(planner, outcome, cand, finalize)
            if tick:
                tick()
    fronts = [[c for c in f if not any(c is s for s in steps)] for f, steps in zip(fronts, own, strict=True)]
    for (planner, outcome), cands in zip(searches, fronts, strict=True):
        for i, cand in enumerate(cands[:cap]):
            if deadline is not None and time.perf_counter() > deadline:
                outcome.summary.front_stopped = (f"time limit reached after {i} of the {len(cands)} screened "
                                                 "candidates on the Pareto front were evaluated in full")
                break
            outcome.pending.remove(cand)
            evaluate_candidate(planner, outcome, cand, finalize)
            if tick:
                tick()
        else:
            if len(cands) > cap:
                outcome.summary.front_stopped = (
                    f"{cap} of the {len(cands)} screened candidates on the Pareto front evaluated in full (the most "
                    f"per card count), fastest first; the rest are bounded below at {cands[cap].bound_s:.0f} s or more")
        heapq.heapify(outcome.pending)


def _plan(planner: Planner, ranked: list[Evaluated], summary: SearchSummary) -> Plan:
    winner, ev = ranked[0].result, ranked[0].evaluation
    runner_ups = [runner_up(i + 2, e.layout, e.result, winner, planner.sc.cluster.cards, planner.risk)
                  for i, e in enumerate(ranked[1:])]
    layout = ev.layout
    scenario = planner.sc.model_copy(update={"layout": layout})
    predictions = winner.model_copy(update={"reshard": ev.reshard_result(alternatives=True)})
    return Plan(scenario=scenario, layout=layout,
                optimizations=[PlanOptimization.of(o, True, layout, ev.inv.config) for o in planner.sc.optimizations],
                predictions=predictions, profile=planner.profile.id, runner_ups=runner_ups, search=summary,
                headroom_fraction=planner.headroom, headroom_source=planner.headroom_source, risk=planner.risk)


def fixed_plan(scenario: Scenario, profile: Profile | None = None, base_dir: Path | None = None,
               finalize: Callable[[Evaluation], SimulationResult] | None = None) -> Plan:
    """A plan for the scenario's own layout: validated and predicted, with nothing searched."""
    if scenario.layout is None:
        raise TwinError(f"scenario {scenario.name} has no layout to keep")
    ev = Evaluation(scenario, profile, base_dir=base_dir)
    result = (finalize or (lambda e: e.analytical(alternatives=False)))(ev)
    predictions = result.model_copy(update={"reshard": ev.reshard_result(alternatives=True)})
    return Plan(scenario=scenario, layout=scenario.layout,
                optimizations=[PlanOptimization.of(o, True, scenario.layout, ev.inv.config)
                               for o in scenario.optimizations],
                predictions=predictions, profile=ev.profile.id)


def _closest(planner: Planner) -> str:
    """How close the smallest-footprint training layout came to fitting."""
    best = None
    for lay in planner.train_structures():
        for variant in train_variants(lay, planner.kind):
            tm = TrainMemory(planner.inv, variant.model_copy(update={"log_prob_micro_batch": 1}), planner.devices,
                             planner.sc, planner.profile)
            peak = max(train_parts(tm, s)["update"].total for s in range(tm.n_stages))
            if best is None or peak < best[0]:
                best = (peak, variant)
    if best is None:
        raise TwinError(f"no valid training layout of {planner.cfg.name} on {planner.devices} devices")
    return f"{best[0]:.1f} GB in update_actor with {best[1].short()} ({planner.capacity_gb:g} GB usable)"
