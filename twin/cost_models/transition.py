"""Time of the transitions between training and rollout: the weight reshard and the host offloads."""

from __future__ import annotations

from twin.cost_models.comm import host_copy_time
from twin.cost_models.memory import GB, RolloutMemory, TrainMemory
from twin.cost_models.reshard import ReshardStats
from twin.profile import Profile
from twin.scenario import Scenario
from twin.topology.routing import Cluster


def reshard_time(stats: ReshardStats, cluster: Cluster, profile: Profile) -> float:
    """The busiest device's received bytes over its tiers (shares as in the whole transfer) plus the
    fixed cost of each transfer round (one chunk per device per all-to-all-v round; one gathered tensor
    per all-gather)."""
    total = max(1, sum(stats.bytes_per_tier.values()))
    busiest = stats.bytes_per_device_max
    seconds = 0.0
    for tier, nbytes in stats.bytes_per_tier.items():
        bw = cluster.kind.tier(tier).bandwidth_gbs.value * 1e9 * profile[f"tier_efficiency_{tier}"]
        seconds += busiest * nbytes / total / bw
    rounds = stats.rounds_max
    return seconds + rounds * profile["reshard_round_latency_us"] * 1e-6


def offload_time(tm: TrainMemory, rm: RolloutMemory, scenario: Scenario, cluster: Cluster,
                 profile: Profile) -> float:
    """Host<->device traffic and cache releases around the phases ('offload and other' in the recipes)."""
    off = tm.lay.offload
    stage = max(range(tm.n_stages), key=tm.weight_bytes)
    weights = tm.weight_bytes(stage)
    moved = 0.0
    if off.param:
        moved += 2 * weights  # actor out after the update, in before the reshard
        if scenario.workload.use_kl_loss:
            moved += 2 * weights  # ref in and out around its pass
    if off.grad:
        moved += 2 * tm.grads_bytes(stage)
    if off.optimizer == "offload":
        moved += 2 * tm.optimizer_bytes(stage)
    if scenario.has("no_sleep_mode"):
        moved += 2 * rm.weight_bytes  # rollout weights out after generation, back for the reshard
    released = rm.kv_cache_bytes(rm.lay.gpu_memory_utilization) + rm.weight_bytes
    return (host_copy_time(cluster, profile, moved) + released / GB * profile["empty_cache_s_per_gb"]
            + profile["transition_fixed_s"])
