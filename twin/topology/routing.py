"""Which link tiers a collective over a group of devices crosses, and what each device gets on them.

A collective over a group is hierarchical, as HCCL and NCCL run it: the members that share a card talk
over the chip tier, those that share a node (or an A3 SuperPoD) over the node/pod tier, and the rest
over the scale-out tier. A device's bandwidth on a tier is read from the graph: the sum of its direct
links to group peers on a mesh tier (A2 HCCS, A3 SIO), or its single port on a switched tier.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from functools import cached_property

import networkx as nx
import numpy as np
from pydantic import BaseModel, ConfigDict

from twin.errors import TwinError
from twin.topology.clusters import ClusterKind, build_graph, cluster_kind, device_node


class TierUse(BaseModel):
    """One tier a collective crosses: how many members share each domain, and per-device figures."""

    model_config = ConfigDict(frozen=True)

    tier: str
    domain: str  # card | node | pod | cluster
    members_per_domain: int  # domains (or devices) one collective step spans on this tier, itself included
    peers: int  # group devices first reached on this tier from one member (not reachable on inner tiers)
    domains: int  # how many such domains the group spans on this tier
    bandwidth_gbs: float  # per device, per direction, on this tier
    latency_us: float


class Cluster:
    """A sized cluster: its kind, its graph and the tier queries on it."""

    def __init__(self, kind: str | ClusterKind, cards: int) -> None:
        self.kind = cluster_kind(kind)
        self.cards = cards
        self.graph: nx.Graph = build_graph(self.kind, cards)
        self._cache: dict[tuple[int, ...], tuple[TierUse, ...]] = {}
        self.efficiency_memo: dict[tuple, float | bool] = {}  # the cost models' curve look-ups (twin.cost_models.comm)

    @property
    def devices(self) -> int:
        return self.cards * self.kind.devices_per_card

    @property
    def nodes(self) -> int:
        return -(-self.devices // self.kind.devices_per_node)

    @cached_property
    def _locality(self) -> list[tuple[int, int, int]]:
        """(card, node, pod) of every device rank."""
        out = []
        for r in range(self.devices):
            a = self.graph.nodes[device_node(r)]
            out.append((a["card"], a["node"], a["pod"]))
        return out

    @cached_property
    def locality_array(self) -> np.ndarray:
        """(card, node, pod) of every device rank, one row each (vectorised look-ups)."""
        return np.array(self._locality, dtype=np.int64).reshape(-1, 3)

    def locality(self, rank: int) -> tuple[int, int, int]:
        self._check(rank)
        return self._locality[rank]

    def _check(self, rank: int) -> None:
        if not 0 <= rank < self.devices:
            raise TwinError(f"device rank {rank} is outside the cluster's {self.devices} devices")

    def _port_bandwidth(self, rank: int, tier: str, peers: Iterable[int]) -> tuple[float, float]:
        """Bandwidth and latency device `rank` has towards `peers` on `tier` (from the graph's edges)."""
        spec = self.kind.tier(tier)
        node = device_node(rank)
        if spec.switched:
            for _, _, data in self.graph.edges(node, data=True):
                if data["tier"] == tier:
                    return data["bandwidth_gbs"], data["latency_us"]
            raise TwinError(f"device {rank} has no {tier} port")
        total = 0.0
        for peer in peers:
            data = self.graph.get_edge_data(node, device_node(peer))
            if data is not None and data["tier"] == tier:
                total += data["bandwidth_gbs"]
        return total, spec.latency_us.value

    @cached_property
    def world_tiers(self) -> tuple[TierUse, ...]:
        """The tiers a collective over every device crosses."""
        return self.tiers(range(self.devices))

    def tiers(self, ranks: Sequence[int]) -> tuple[TierUse, ...]:
        """The tiers a collective over `ranks` crosses, from the fastest (innermost) to the slowest."""
        key = tuple(sorted(set(ranks)))
        if key in self._cache:
            return self._cache[key]
        for r in key:
            self._check(r)
        loc = [self._locality[r] for r in key]
        kind = self.kind
        levels: list[tuple[str, str | None, int]] = [
            ("card", kind.chip_tier, 0),
            ("node", kind.node_tier, 1),
            ("pod", kind.pod_tier, 2),
        ]
        uses: list[TierUse] = []
        first = key[0]
        inner_size = 1
        for domain, tier, idx in levels:
            if tier is None:
                continue
            groups = Counter(lo[idx] for lo in loc)
            # Members of the first device's domain at this level; a level that adds no peer is skipped
            inner = [r for r, lo in zip(key, loc, strict=True) if lo[idx] == loc[0][idx]]
            size = len(inner)
            if size <= inner_size:
                continue
            peers = size - inner_size
            inner_size = size
            bw, lat = self._port_bandwidth(first, tier, [r for r in inner if r != first])
            if uses and uses[-1].tier == tier:
                peers += uses.pop().peers  # the same fabric serves both levels: keep the wider domain
            uses.append(TierUse(tier=tier, domain=domain, members_per_domain=size, domains=len(groups),
                                peers=peers, bandwidth_gbs=bw, latency_us=lat))
        top_idx = 2 if kind.pod_tier else 1
        top_domains = Counter(lo[top_idx] for lo in loc)
        if len(top_domains) > 1:
            bw, lat = self._port_bandwidth(first, kind.scaleout_tier, [])
            uses.append(TierUse(tier=kind.scaleout_tier, domain="cluster", members_per_domain=len(top_domains),
                                domains=1, peers=len(key) - inner_size, bandwidth_gbs=bw, latency_us=lat))
        result = tuple(uses)
        self._cache[key] = result
        return result

    def bottleneck(self, ranks: Sequence[int]) -> TierUse | None:
        """The slowest tier a collective over `ranks` crosses (None for a single device)."""
        uses = self.tiers(ranks)
        return min(uses, key=lambda u: u.bandwidth_gbs) if uses else None

    def pair_tier(self, a: int, b: int) -> str:
        """The tier a transfer between devices `a` and `b` crosses (its slowest hop)."""
        la, lb = self._locality[a], self._locality[b]
        kind = self.kind
        if la[0] == lb[0] and kind.chip_tier:
            return kind.chip_tier
        if la[1] == lb[1]:
            return kind.node_tier
        if la[2] == lb[2] and kind.pod_tier:
            return kind.pod_tier
        return kind.scaleout_tier

    def host_link(self, rank: int) -> tuple[float, float]:
        """Bandwidth and latency of device `rank`'s link to its host."""
        self._check(rank)
        return self._port_bandwidth(rank, "host", [])


_SIZED: dict[tuple[int, int], Cluster] = {}


def sized_cluster(kind: ClusterKind, cards: int) -> Cluster:
    """The cluster of `kind` with `cards` cards, built once per kind object and size: its graph, locality and
    memoised tier and curve look-ups depend on nothing else, so every evaluation on it shares them."""
    hit = _SIZED.get((id(kind), cards))
    if hit is None or hit.kind is not kind:
        hit = _SIZED[(id(kind), cards)] = Cluster(kind, cards)
    return hit
