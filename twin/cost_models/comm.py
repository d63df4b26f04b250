"""Collective and point-to-point times on the topology's link tiers.

A collective over a group is decomposed hierarchically onto the tiers the group crosses (innermost
first), as HCCL and NCCL run them: an all-reduce is a reduce-scatter inside each inner domain, an
all-reduce of 1/n of the data across domains, and an all-gather back; all-gather and reduce-scatter move
(n-1)/n of the data on each tier; an all-to-all sends each peer its share directly (pairwise), so the
bytes for peers behind a slower tier cross that tier. Per tier, the algorithm HCCL would pick sets the
number of latency steps: one step on a full mesh (A2 HCCS, every peer directly linked), log2(n) steps
(halving-doubling) on switched fabrics and between servers. An all-to-all costs a fixed latency that
grows with the number of peers (as the measured EP dispatch/combine kernels do) plus the bytes of its
busiest tier.

A tier's bandwidth is scaled by its collective efficiency curve from the hardware data
(`LinkTier.efficiency(message_bytes, peers, collective)`: measured by message size and peers where a
source published them, e.g. A3 UB's EP dispatch/combine by EP size) times one profile scale per tier
(`<tier>_efficiency_scale`, the framework's distance from the isolated measurement). A curve measured on
the whole call (the EP dispatch/combine kernels) already holds the call's fixed cost; elsewhere the fixed
cost is the per-step latency (`collective_step_latency_us` + the tier's `latency_s`) or, for an
all-to-all, the profile's base + per-peer latency.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

from twin.profile import Profile
from twin.topology.routing import Cluster, TierUse

Collective = Literal["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "ep_dispatch", "ep_combine",
                     "broadcast"]
ALL_TO_ALL: frozenset[str] = frozenset({"all_to_all", "ep_dispatch", "ep_combine"})


def tier_bandwidth(cluster: Cluster, profile: Profile, tier: str, message_bytes: float, peers: float = 1,
                   collective: str = "any") -> float:
    """Bytes/s one device reaches on `tier` for one message of `message_bytes` to `peers` other ranks:
    nominal bandwidth x the tier's efficiency curve x the profile's scale of that tier."""
    eff = _curve(cluster, tier, max(float(message_bytes), 1.0), max(float(peers), 1.0), collective)
    return cluster.kind.tier(tier).bandwidth_bytes_s * eff * profile[f"{tier}_efficiency_scale"]


def _curve(cluster: Cluster, tier: str, message_bytes: float, peers: float, collective: str) -> float:
    """The tier's collective efficiency, memoised on the cluster (a fit asks the same sizes thousands of times
    under other profiles; the curves belong to the cluster's kind, so the memo lives and dies with it)."""
    key = (tier, message_bytes, peers, collective)
    memo = cluster.efficiency_memo
    eff = memo.get(key)
    if eff is None:
        eff = memo[key] = float(cluster.kind.tier(tier).efficiency(message_bytes, peers=peers, collective=collective))
    return eff


def _measured(cluster: Cluster, tier: str, collective: str) -> bool:
    """Whether `tier` has efficiency curves of `collective` itself (timed on whole calls)."""
    key = ("measured", tier, collective)
    memo = cluster.efficiency_memo
    if key not in memo:
        memo[key] = any(c.collective == collective for c in cluster.kind.tier(tier).collective_efficiency)
    return memo[key]


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
    eff = _curve(cluster, use.tier, max(float(nbytes), 1.0), float(n - 1), op)
    bw = use.bandwidth_gbs * 1e9 * eff * profile[f"{use.tier}_efficiency_scale"]
    lat = profile["collective_step_latency_us"] * 1e-6 + use.latency_us * 1e-6
    frac = {"all_reduce": 2 * (n - 1) / n, "all_gather": (n - 1) / n, "reduce_scatter": (n - 1) / n,
            "broadcast": 1.0}[op]
    steps = _steps(use, cluster) * (2 if op == "all_reduce" else 1)
    return frac * nbytes / bw + steps * lat


def collective_time(cluster: Cluster, profile: Profile, ranks: Sequence[int], op: Collective,
                    nbytes: float) -> float:
    """Seconds for `op` over `ranks` where each rank contributes `nbytes` (all-gather: its shard x n).

    `nbytes` is the full buffer for all_reduce/broadcast, the gathered output for all_gather, the input
    for reduce_scatter and each rank's total send volume for the all-to-alls (all_to_all, ep_dispatch,
    ep_combine).
    """
    return _over(cluster.tiers(ranks), cluster, profile, op, nbytes, len(set(ranks)))


def world_round_s(cluster: Cluster, profile: Profile, op: Collective) -> float:
    """The fixed cost of one near-empty `op` over every device of the cluster (a transfer round of the weight
    reshard, which runs on the default process group)."""
    return _over(cluster.world_tiers, cluster, profile, op, 1.0, cluster.devices)


def _over(uses: Sequence[TierUse], cluster: Cluster, profile: Profile, op: Collective, nbytes: float,
          group: int) -> float:
    """`op` over a group of `group` ranks that crosses the tiers `uses` (see collective_time)."""
    if not uses:
        return 0.0
    if op in ALL_TO_ALL:
        return _all_to_all_time(uses, cluster, profile, op, nbytes, group)
    total = 0.0
    remaining = nbytes
    for use in uses:
        total += _tier_time(use, cluster, profile, op, remaining)
        # the next tier works on one domain's share: of a reduction or gather, the domain's part of the data; of a
        # broadcast, the message split over the domain's members, each sending its part over its own link out (NCCL
        # runs as many rings as the node has NICs and splits the operation over them through NVLink, each ring
        # crossing nodes on a NIC of its own: NVIDIA/nccl issues #601 and #43); inside the domain every member
        # still receives the whole message (the tier's own time above)
        remaining /= use.members_per_domain
    return total


def _all_to_all_time(uses: Sequence[TierUse], cluster: Cluster, profile: Profile, op: str, nbytes: float,
                     group: int) -> float:
    """All-to-all: every peer gets its share directly and the tiers carry their shares in parallel.

    On a tier with curves of `op` itself (timed on whole calls: bytes the rank sends over the call's
    time, all `group - 1` peers), the call lasts `nbytes` over that efficiency, its fixed cost included,
    and never less than that fixed cost (below the smallest measured message the curve is clamped).
    Elsewhere the tier carries its peers' share at its generic efficiency, plus a fixed cost that grows
    with the number of peers (the measured dispatch/combine kernels' shape)."""
    peers = max(group - 1, 1)
    fixed = (profile["a2a_base_latency_us"] + (group - 1) * profile["a2a_per_peer_latency_us"]) * 1e-6
    slowest = 0.0
    for use in uses:
        if _measured(cluster, use.tier, op):
            t = max(nbytes / tier_bandwidth(cluster, profile, use.tier, nbytes, peers, op), fixed)
        else:
            share = nbytes * use.peers / peers
            t = share / tier_bandwidth(cluster, profile, use.tier, share, use.peers, op) + fixed
        slowest = max(slowest, t)
    return slowest


def p2p_time(cluster: Cluster, profile: Profile, src: int, dst: int, nbytes: float) -> float:
    """Seconds to send `nbytes` from `src` to `dst` over the slowest tier between them."""
    if src == dst or nbytes <= 0:
        return 0.0
    tier = cluster.pair_tier(src, dst)
    bw = tier_bandwidth(cluster, profile, tier, nbytes, 1, "p2p")
    return nbytes / bw + profile["collective_step_latency_us"] * 1e-6 + cluster.kind.tier(tier).latency_s


def host_copy_time(cluster: Cluster, profile: Profile, nbytes: float) -> float:
    """Seconds to move `nbytes` between one device and its host (all devices copy in parallel)."""
    if nbytes <= 0:
        return 0.0
    link = cluster.__dict__.get("_host_link_0")
    if link is None:
        link = cluster.__dict__["_host_link_0"] = cluster.host_link(0)
    bw, lat = link
    eff = _curve(cluster, "host", max(float(nbytes), 1.0), 1.0, "copy")
    return nbytes / (bw * 1e9 * eff * profile["host_efficiency_scale"]) + lat * 1e-6
