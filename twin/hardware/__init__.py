"""Hardware as data: devices, link tiers and cluster kinds read from YAML files, every figure and every
efficiency-curve point with its source and confidence (H/M/L).

Shipped files live in twin/hardware/data/devices and twin/hardware/data/clusters; a user adds a cluster by
writing one (`twin clusters --json` prints the shipped kinds in exactly that format) and passing its path
wherever a kind name is accepted: `--cluster FILE.yaml`, or `cluster.kind` in a scenario (relative to the
scenario). A figure is `{value, source, confidence}`; a curve is a list of points `{x, value, source,
confidence}` read as linear in log(x) between points and flat beyond them.

Device curves (`DeviceSpec.efficiency(curve, x)`, fraction of peak): `gemm` by FLOPs of one call,
`grouped_gemm` by tokens per expert, `attention` by sequence length (causal flash attention forward),
`memory` by bytes moved (fraction of HBM bandwidth). Tier curves (`LinkTier.efficiency(bytes, peers,
collective)`, fraction of the tier's per-direction bandwidth) by message size, per number of peers and
optionally per collective (`ep_dispatch`, `ep_combine`, `all_gather`, ...; `any` is the fallback).
"""

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
