"""Cluster topology: cluster graphs with link tiers and collective routing (the kinds are data, twin.hardware)."""

from twin.topology.clusters import CLUSTER_KINDS, ClusterKind, LinkTier, build_graph, cluster_kind
from twin.topology.devices import DEVICES, DeviceSpec, Figure
from twin.topology.routing import Cluster, TierUse

__all__ = [
    "CLUSTER_KINDS",
    "DEVICES",
    "Cluster",
    "ClusterKind",
    "DeviceSpec",
    "Figure",
    "LinkTier",
    "TierUse",
    "build_graph",
    "cluster_kind",
]
