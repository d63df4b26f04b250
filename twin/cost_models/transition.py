"""Time of the transitions between training and rollout: the weight reshard and the host offloads."""

from __future__ import annotations

from twin.cost_models.comm import host_copy_time
from twin.cost_models.memory import GB, MemoryModel
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


def offload_time(memory: MemoryModel, scenario: Scenario, cluster: Cluster, profile: Profile) -> float:
    """Host<->device traffic and cache releases around the phases ('offload and other' in the recipes)."""
    lay = memory.pl.train
    off = lay.offload
    worst = max(memory.stages, key=lambda s: s.weight_bytes)
    grads, opt = memory.grad_and_optimizer_bytes(worst)
    moved = 0.0
    if off.param:
        moved += 2 * worst.weight_bytes  # actor out after update, in before the reshard
        if scenario.workload.use_kl_loss:
            moved += 2 * worst.weight_bytes  # ref in and out around its pass
    if off.grad:
        moved += 2 * grads
    if off.optimizer == "offload":
        moved += 2 * opt
    if scenario.has("no_sleep_mode"):
        moved += 2 * memory.rollout_weight_bytes  # rollout weights out after generation, back for the reshard
    released = memory.kv_cache_bytes + memory.rollout_weight_bytes
    return (host_copy_time(cluster, profile, moved) + released / GB * profile["empty_cache_s_per_gb"]
            + profile["transition_fixed_s"])
