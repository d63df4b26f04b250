"""A scenario whose rollout runs on devices of its own (`layout.placement: separate`): what the twin predicts of
it, its weight sync (twin.cost_models.weight_sync), by both methods, the scenario's own first."""

from __future__ import annotations

import copy
from functools import cached_property
from pathlib import Path

from twin.catalog.registry import load_model
from twin.cost_models.static import tensor_table
from twin.cost_models.weight_sync import SYNC_METHODS, SyncTime, sync_time
from twin.errors import TwinError
from twin.layout.models import Layout
from twin.layout.rules import validate_layout
from twin.profile import Profile, profile_for_kind
from twin.scenario import RECIPE_ENGINE, Scenario
from twin.topology.clusters import cluster_kind
from twin.topology.routing import Cluster, sized_cluster
from twin.uncertainty import relative_band

DEFAULT_SYNC = "checkpoint_engine"  # where the scenario's verl has one (Software.checkpoint_engine)


def is_separate(scenario: Scenario) -> bool:
    return scenario.layout is not None and scenario.layout.placement == "separate"


def refuse_separate(scenario: Scenario, what: str) -> None:
    """A clear refusal of `what` (a step prediction, a layout search) for a disaggregated scenario."""
    if is_separate(scenario):
        raise TwinError(f"scenario {scenario.name} runs its rollout on separate devices: the twin models the weight "
                        f"sync of a disaggregated run (`twin weight-sync`), not {what}")


class SyncEvaluation:
    """The weight sync of one disaggregated scenario under a profile."""

    def __init__(self, scenario: Scenario, profile: Profile | None = None, base_dir: Path | None = None) -> None:
        if not is_separate(scenario):
            raise TwinError(f"scenario {scenario.name} is colocated (layout.placement): its weight sync is the "
                            "reshard stage of `twin simulate`")
        self.sc = scenario
        self.base_dir = base_dir
        self.layout: Layout = scenario.layout  # type: ignore[assignment]
        self.kind = cluster_kind(scenario.cluster.kind, base_dir)
        self.inv = load_model(scenario.model)
        self.devices = scenario.cluster.cards * self.kind.devices_per_card
        validate_layout(self.layout, self.inv.config, self.devices, self.kind)
        self.profile = profile_for_kind(profile, scenario.profile, self.kind.profile_kind, base_dir)
        self.checkpoint_engine = scenario.software.checkpoint_engine
        self.method = scenario.software.weight_sync or (DEFAULT_SYNC if self.checkpoint_engine else "per_tensor")

    @cached_property
    def cluster(self) -> Cluster:
        return sized_cluster(self.kind, self.sc.cluster.cards)

    def time(self, method: str | None = None) -> SyncTime:
        return sync_time(tensor_table(self.inv), self.layout.train, self.layout.trainer_devices(self.devices),
                         self.layout.rollout, self.cluster, self.profile, method or self.method,
                         self.checkpoint_engine == RECIPE_ENGINE)

    def with_profile(self, profile: Profile) -> SyncEvaluation:
        """The same scenario under another profile (a fit's trial point), sharing what does not depend on it (the
        model, the validated layout, the cluster)."""
        other = copy.copy(self)
        other.__dict__.update(cluster=self.cluster,
                              profile=profile_for_kind(profile, self.sc.profile, self.kind.profile_kind, self.base_dir))
        return other

    def stage_times(self) -> dict[str, float]:
        """The one stage a disaggregated case measures: its weight sync by the scenario's method."""
        return {"weight_sync": self.time().seconds}

    @property
    def training_floors(self) -> dict[str, float]:
        """The floor of the stage it predicts (floor_s), as a step's evaluation gives its training stages'."""
        return {"weight_sync": self.floor_s()}

    @property
    def band_error(self) -> float | None:
        """The relative error of a weight sync predicted from this profile: its leave-one-case-out error on the
        weight syncs it was fitted on; None where it was fitted on none."""
        cv = self.profile.cross_validation
        return None if cv is None else cv.stages_rel_error.get("weight_sync")

    def band(self, seconds: float) -> tuple[float, float] | None:
        err = self.band_error
        return None if err is None else relative_band(seconds, err)

    def floor_s(self) -> float:
        """No sync of the whole model is faster than its bytes over the fastest link the sync's ranks have (each
        rollout rank receives every tensor whole)."""
        table = tensor_table(self.inv)
        nbytes = float((table.numel * table.dtype_bytes).sum())
        fastest = max(use.bandwidth_gbs for use in self.cluster.tiers(list(range(self.devices)))) * 1e9
        return nbytes / fastest

    def times(self) -> dict[str, SyncTime]:
        """Each method its verl has, the scenario's first."""
        methods = [m for m in SYNC_METHODS if m != "checkpoint_engine" or self.checkpoint_engine]
        return {m: self.time(m) for m in sorted(methods, key=lambda m: m != self.method)}
