"""Cluster kinds and the networkx graphs built from them.

The kinds are data (twin.hardware): each names its device, how devices group into cards (chips), nodes and
pods, and its link tiers. `build_graph` returns a networkx graph whose nodes are devices, hosts
and switches and whose edges carry `tier`, `bandwidth_gbs` (per direction) and `latency_us`. Link figures
name their source; the calibration profile scales them, it never replaces the topology.
"""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING

import networkx as nx

from twin.errors import TwinError
from twin.hardware import CLUSTER_KINDS, ClusterKind, LinkTier, TierName, cluster_kind

if TYPE_CHECKING:
    from twin.scenario import Scenario

__all__ = ["CLUSTER_KINDS", "ClusterKind", "LinkTier", "TierName", "build_graph", "cluster_kind", "device_node",
           "sleep_frees_memory"]


def device_node(rank: int) -> tuple[str, int]:
    return ("device", rank)


def build_graph(kind: str | ClusterKind, cards: int) -> nx.Graph:
    """The cluster graph for `cards` cards of `kind` (a name, a cluster file or a kind; cached, read-only)."""
    return _build_graph(cluster_kind(kind), cards)


@lru_cache(maxsize=16)
def _build_graph(kind: ClusterKind, cards: int) -> nx.Graph:
    if cards < 1:
        raise TwinError(f"--cards must be at least 1, got {cards}")
    g = nx.Graph(kind=kind.name, cards=cards)
    per_card, per_node = kind.devices_per_card, kind.devices_per_node
    devices = cards * per_card
    nodes = -(-devices // per_node)
    pod_cards = kind.cards_per_pod or cards
    t = {tier.name: tier for tier in kind.tiers}

    def link(a: object, b: object, tier: str, count: int = 1) -> None:
        g.add_edge(a, b, tier=tier, bandwidth_gbs=t[tier].bandwidth_gbs.value * count,
                   latency_us=t[tier].latency_us.value)

    spine = ("switch", kind.scaleout_tier, "spine")
    g.add_node(spine, role="switch", tier=kind.scaleout_tier)
    for n in range(nodes):
        host = ("host", n)
        g.add_node(host, role="host", node=n)
        leaf = ("switch", kind.scaleout_tier, "leaf", n)
        g.add_node(leaf, role="switch", tier=kind.scaleout_tier)
        local = range(n * per_node, min(devices, (n + 1) * per_node))
        link(leaf, spine, kind.scaleout_tier, count=len(local))
        if t[kind.node_tier].switched:
            node_switch = ("switch", kind.node_tier, n)
            g.add_node(node_switch, role="switch", tier=kind.node_tier)
        for r in local:
            card = r // per_card
            pod = card // pod_cards
            g.add_node(device_node(r), role="device", rank=r, card=card, node=n, pod=pod)
            link(device_node(r), host, "host")
            link(device_node(r), leaf, kind.scaleout_tier)
            if t[kind.node_tier].switched:
                link(device_node(r), node_switch, kind.node_tier)
            else:
                for peer in range(local.start, r):
                    link(device_node(peer), device_node(r), kind.node_tier)
            if kind.chip_tier and r % per_card:
                link(device_node(r - 1), device_node(r), kind.chip_tier)
        if kind.pod_tier and t[kind.pod_tier].switched:
            pod = (n * per_node // per_card) // pod_cards
            pod_switch = ("switch", kind.pod_tier, "pod", pod)
            g.add_node(pod_switch, role="switch", tier=kind.pod_tier)
            link(node_switch, pod_switch, kind.pod_tier, count=len(local))
    return g


def sleep_frees_memory(scenario: Scenario) -> bool:
    """Whether vLLM's sleep mode releases device memory: the scenario's software, else the cluster kind's."""
    frees = scenario.software.sleep_frees_memory
    return cluster_kind(scenario.cluster.kind).vllm_sleep_frees_memory if frees is None else frees
