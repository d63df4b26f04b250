"""Collective and point-to-point times on the topology's link tiers.

A collective over a group is decomposed hierarchically onto the tiers the group crosses (innermost
first), as HCCL and NCCL run them: an all-reduce is a reduce-scatter inside each inner domain, an
all-reduce of 1/n of the data across domains, and an all-gather back; all-gather and reduce-scatter move
(n-1)/n of the data on each tier; an all-to-all sends each peer its share directly (pairwise), so the
bytes for peers behind a slower tier cross that tier. Per tier, the algorithm HCCL would pick sets the
number of latency steps: one step on a full mesh (A2 HCCS, every peer directly linked), log2(n) steps
(halving-doubling) on switched fabrics and between servers. An all-to-all costs a fixed latency that
grows with the number of peers (as the measured EP dispatch/combine kernels do) plus the bytes of its
busiest tier. Link bandwidth is scaled by the profile's efficiency of that tier.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

from twin.profile import Profile
from twin.topology.routing import Cluster, TierUse

Collective = Literal["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast"]


def _steps(use: TierUse, cluster: Cluster) -> int:
    n = use.members_per_domain
    if n <= 1:
        return 0
    mesh = not cluster.kind.tier(use.tier).switched
    if mesh:
        return 1
    return max(1, math.ceil(math.log2(n)))


def _tier_time(use: TierUse, cluster: Cluster, profile: Profile, op: Collective, nbytes: float) -> float:
    n = use.members_per_domain
    if n <= 1 or nbytes <= 0:
        return 0.0
    bw = use.bandwidth_gbs * 1e9 * profile[f"tier_efficiency_{use.tier}"]
    lat = profile["collective_step_latency_us"] * 1e-6 + use.latency_us * 1e-6
    frac = {"all_reduce": 2 * (n - 1) / n, "all_gather": (n - 1) / n, "reduce_scatter": (n - 1) / n,
            "broadcast": 1.0}[op]
    steps = _steps(use, cluster) * (2 if op == "all_reduce" else 1)
    return frac * nbytes / bw + steps * lat


def collective_time(cluster: Cluster, profile: Profile, ranks: Sequence[int], op: Collective,
                    nbytes: float) -> float:
    """Seconds for `op` over `ranks` where each rank contributes `nbytes` (all-gather: its shard x n).

    `nbytes` is the full buffer for all_reduce/broadcast, the gathered output for all_gather, the input
    for reduce_scatter and each rank's total send volume for all_to_all.
    """
    uses = cluster.tiers(ranks)
    if not uses:
        return 0.0
    if op == "all_to_all":
        return _all_to_all_time(uses, cluster, profile, nbytes, len(set(ranks)))
    total = 0.0
    remaining = nbytes
    for use in uses:
        total += _tier_time(use, cluster, profile, op, remaining)
        if op != "broadcast":
            remaining /= use.members_per_domain  # the next tier works on one domain's share
    return total


def _all_to_all_time(uses: Sequence[TierUse], cluster: Cluster, profile: Profile, nbytes: float,
                     group: int) -> float:
    """All-to-all: every peer gets its share directly and the tiers carry their shares in parallel; the
    fixed cost grows with the number of peers (the measured dispatch/combine kernels' shape)."""
    slowest = 0.0
    for use in uses:
        share = nbytes * use.peers / max(group - 1, 1)
        bw = use.bandwidth_gbs * 1e9 * profile[f"tier_efficiency_{use.tier}"]
        slowest = max(slowest, share / bw)
    fixed = profile["a2a_base_latency_us"] + (group - 1) * profile["a2a_per_peer_latency_us"]
    return slowest + fixed * 1e-6


def p2p_time(cluster: Cluster, profile: Profile, src: int, dst: int, nbytes: float) -> float:
    """Seconds to send `nbytes` from `src` to `dst` over the slowest tier between them."""
    if src == dst or nbytes <= 0:
        return 0.0
    tier = cluster.pair_tier(src, dst)
    spec = cluster.kind.tier(tier)
    bw = spec.bandwidth_gbs.value * 1e9 * profile[f"tier_efficiency_{tier}"]
    return nbytes / bw + (profile["collective_step_latency_us"] + spec.latency_us.value) * 1e-6


def host_copy_time(cluster: Cluster, profile: Profile, nbytes: float) -> float:
    """Seconds to move `nbytes` between one device and its host (all devices copy in parallel)."""
    if nbytes <= 0:
        return 0.0
    link = cluster.__dict__.get("_host_link_0")
    if link is None:
        link = cluster.__dict__["_host_link_0"] = cluster.host_link(0)
    bw, lat = link
    return nbytes / (bw * 1e9 * profile["tier_efficiency_host"]) + lat * 1e-6
