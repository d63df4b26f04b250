"""Hardware as data: devices, link tiers and cluster kinds read from YAML files, every figure and every
efficiency-curve point with its source."""

from twin.hardware.catalog import (
    CLUSTER_KINDS,
    DEVICES,
    cluster_kind,
    device_spec,
    is_cluster_file,
    load_cluster_file,
    resolve_cluster_ref,
)
from twin.hardware.figures import Curve, CurvePoint, Figure
from twin.hardware.specs import CURVE_NAMES, ClusterKind, DeviceSpec, LinkTier, TierCurve, TierName

__all__ = [
    "CLUSTER_KINDS",
    "CURVE_NAMES",
    "DEVICES",
    "ClusterKind",
    "Curve",
    "CurvePoint",
    "DeviceSpec",
    "Figure",
    "LinkTier",
    "TierCurve",
    "TierName",
    "cluster_kind",
    "device_spec",
    "is_cluster_file",
    "load_cluster_file",
    "resolve_cluster_ref",
]
