"""Everything the twin knows about one scenario with a fixed layout, and its analytical prediction.

`Evaluation` builds the placement, topology, memory, reshard and cost models once; `analytical` turns
them into the DESIGN 4.3 prediction with closed-form stage times (the discrete-event simulator in
twin.sim refines the rollout and the schedule from the same cost models).
"""

from __future__ import annotations

from functools import cached_property
from pathlib import Path

from twin import __version__
from twin.catalog.inventory import Inventory
from twin.catalog.registry import load_model
from twin.cost_models.floors import training_floors_s
from twin.cost_models.memory import GB, MemoryReport, RolloutMemory, TrainMemory, phase_memory
from twin.cost_models.placement import Placement
from twin.cost_models.reshard import RESHARD_METHODS, ReshardMethod, ReshardStats, reshard_stats
from twin.cost_models.rollout import RolloutCost
from twin.cost_models.scheduling import Call, collect_seconds, dispatch_seconds, driver_seconds
from twin.cost_models.stages import train_stage_seconds
from twin.cost_models.timers import as_timed
from twin.cost_models.training import TrainCost
from twin.cost_models.transition import offload_moments, reshard_parts, reshard_time
from twin.disaggregated import refuse_separate
from twin.errors import TwinError
from twin.layout.engine import as_engine_builds
from twin.layout.models import Layout
from twin.layout.rules import validate_layout
from twin.profile import Profile, profile_for_kind
from twin.results import STAGES, ReshardFigures, ReshardResult, SimulationResult
from twin.scenario import Scenario
from twin.topology.clusters import cluster_kind, sleep_frees_memory
from twin.topology.routing import Cluster, sized_cluster
from twin.uncertainty import uncertainty_for


def reshard_method(scenario: Scenario) -> ReshardMethod:
    """The recipes' directed path when switched on, else what the framework does: current verl's checkpoint
    engine, or MindSpeed-RL's ShardingManager, which gathers every stage's tensors over PP, TP and the experts'
    ranks into the engine's parameter buckets (docs/features/resharding.md, MindSpeed-RL eb89512)."""
    if scenario.has("directed_reshard"):
        return "directed"
    return "all_gather" if scenario.software.framework == "mindspeed_rl" else "verl_bucketed"


class Evaluation:
    """One scenario with its layout on its cluster, with every cost model built lazily."""

    def __init__(self, scenario: Scenario, profile: Profile | None = None, layout: Layout | None = None,
                 base_dir: Path | None = None) -> None:
        refuse_separate(scenario, "its step")
        self.sc = scenario
        layout = layout or scenario.layout
        if layout is None:
            raise TwinError(f"scenario {scenario.name} has no layout; use `twin plan --scenario` to search one")
        self.base_dir = base_dir
        self.kind = cluster_kind(scenario.cluster.kind, base_dir)
        self.inv: Inventory = load_model(scenario.model)
        self.layout = layout = as_engine_builds(layout, self.inv.config, self.kind.rollout_engine)
        self.devices = scenario.cluster.cards * self.kind.devices_per_card
        validate_layout(layout, self.inv.config, self.devices, self.kind, scenario.has("directed_reshard"))
        self.profile = profile_for_kind(profile, scenario.profile, self.kind.profile_kind, base_dir)
        self.method = reshard_method(scenario)

    @cached_property
    def cluster(self) -> Cluster:
        return sized_cluster(self.kind, self.sc.cluster.cards)

    @cached_property
    def placement(self) -> Placement:
        return Placement(self.inv, self.layout.train, self.layout.rollout, self.devices)

    def with_profile(self, profile: Profile) -> Evaluation:
        """The same scenario and layout under another profile, sharing what does not depend on it
        (topology, placement, reshard transfer lists)."""
        return self._sibling(self.sc, profile)

    def with_lengths(self, scenario: Scenario) -> Evaluation:
        """`scenario`, this one with other token lengths, under the same layout and profile, sharing what lengths do
        not change (topology, placement, reshard transfer lists)."""
        return self._sibling(scenario, self.profile)

    def _sibling(self, scenario: Scenario, profile: Profile) -> Evaluation:
        other = Evaluation(scenario, profile, self.layout, self.base_dir)
        other.__dict__.update(cluster=self.cluster, placement=self.placement,
                              _reshard=self.__dict__.setdefault("_reshard", {}))
        return other

    def reshard(self, method: ReshardMethod | None = None) -> ReshardStats:
        method = method or self.method
        cache = self.__dict__.setdefault("_reshard", {})
        if method not in cache:
            cache[method] = reshard_stats(self.placement, self.cluster, method)
        return cache[method]

    @cached_property
    def train_memory(self) -> TrainMemory:
        return TrainMemory(self.inv, self.layout.train, self.devices, self.sc, self.profile)

    @cached_property
    def rollout_memory(self) -> RolloutMemory:
        return RolloutMemory(self.inv, self.layout.rollout, self.profile, self.kind.device_spec.capacity_gb)

    @cached_property
    def memory_report(self) -> MemoryReport:
        host = self.sc.cluster.host_memory_gb_per_node or self.kind.host_memory_gb_per_node.value
        return phase_memory(self.train_memory, self.rollout_memory, self.reshard().extra_bytes_max,
                            sleep_frees_memory(self.sc), self.kind.devices_per_node, host)

    @cached_property
    def training_floors(self) -> dict[str, float]:
        """Seconds below which old_log_prob, ref and update cannot run (twin/cost_models/floors.py), once."""
        return training_floors_s(self)

    @cached_property
    def train_cost(self) -> TrainCost:
        return TrainCost(self.inv, self.sc, self.cluster, self.profile, self.train_memory)

    @cached_property
    def rollout_cost(self) -> RolloutCost:
        return RolloutCost(self.inv, self.sc, self.cluster, self.profile, self.rollout_memory)

    def dispatch_s(self, call: Call) -> float:
        return dispatch_seconds(self.sc, self.profile, self.layout.train, self.devices, call)

    def collect_s(self, call: Call) -> float:
        return collect_seconds(self.sc, self.profile, call)

    def stage_times(self) -> dict[str, float]:
        pf = self.profile
        driver = driver_seconds(self.sc, pf)
        train = train_stage_seconds(self.sc, pf, self.train_cost)
        moments = offload_moments(self.train_memory, self.rollout_memory, self.sc, self.cluster, pf)
        stages = {
            "rollout": self.rollout_cost.analytical_seconds(self.memory_report.kv_tokens),
            "reward": driver["reward"],
            **train,
            "advantage": driver["advantage"],
            "reshard": reshard_time(self.reshard(), self.cluster, pf, self.rollout_memory,
                                    self.train_memory, self.sc),
            "offload": sum(moments.values()),
        }
        ordered = {name: stages[name] for name in STAGES if name in stages}  # in the order a step runs them
        return as_timed(ordered, moments, self.sc.software)

    def reshard_parts(self) -> dict[str, float]:
        """The chosen reshard's time by part, seconds (twin.cost_models.transition.reshard_parts)."""
        return reshard_parts(self.reshard(), self.cluster, self.profile, self.rollout_memory, self.train_memory,
                             self.sc)

    def reshard_result(self, alternatives: bool = True) -> ReshardResult:
        def figures(st: ReshardStats) -> dict:
            return {"bytes_total": st.bytes_total, "bytes_per_device_max": st.bytes_per_device_max,
                    "extra_memory_gb_per_device_max": st.extra_bytes_max / GB,
                    "bytes_per_tier": {k: int(v) for k, v in st.bytes_per_tier.items()}}

        chosen = self.reshard()
        alts = {}
        if alternatives:
            alts = {m: ReshardFigures(**figures(self.reshard(m))) for m in RESHARD_METHODS if m != self.method}
        return ReshardResult(method=self.method, alternatives=alts, **figures(chosen))

    def result(self, stages: dict[str, float], model_kind: str, notes: list[str] | None = None,
               alternatives: bool = True, represented: dict[str, list[int]] | None = None) -> SimulationResult:
        """The DESIGN 4.3 object for these stage times."""
        mem = self.memory_report
        step = sum(stages.values())
        tokens = self.sc.workload.tokens_per_step
        cards = self.sc.cluster.cards
        res = SimulationResult(
            scenario=self.sc.name,
            model_kind=model_kind,
            cards=cards,
            devices=self.devices,
            step_s=step,
            tps_per_card=tokens / step / cards,
            tps_per_device=tokens / step / self.devices,
            stages_s=stages,
            memory_peak_gb=mem.peak_gb,
            memory_peak_gb_max=mem.peak_gb_max,
            peak_phase=mem.peak_phase,
            hbm_gb=self.kind.device_spec.hbm_gb.value,
            capacity_gb=mem.capacity_gb,
            fits=mem.fits,
            memory_gb=mem.phases,
            host_memory_gb_per_node=mem.host_gb_per_node,
            host_memory_capacity_gb_per_node=mem.host_capacity_gb_per_node,
            host_fits=mem.host_fits,
            kv_cache_bytes_per_token_per_device=mem.kv_bytes_per_token,
            kv_cache_tokens_per_device=mem.kv_tokens,
            reshard=self.reshard_result(alternatives),
            profile=self.profile.id,
            twin_version=__version__,
            notes=[*mem.notes, *(notes or [])],
            represented_ranks=represented or {},
        )
        return res.model_copy(update={"uncertainty": uncertainty_for(res, self.sc, self.profile)})

    def analytical(self, alternatives: bool = True) -> SimulationResult:
        return self.result(self.stage_times(), "analytical", alternatives=alternatives)
