"""The one place where an operation's size becomes a fraction of the hardware's peak.

Every compute and memory-bound cost asks `efficiency(kind, profile, curve, x)`. Curves: `gemm` (x = 2*m*n*k
FLOPs of one GEMM), `grouped_gemm` (x = tokens per expert), `attention` (x = sequence length), `memory`
(x = bytes of one memory-bound kernel). The device kind's efficiency curve gives the shape where the cluster
data has one; the profile's scale factor of that curve (a fit may move it inside its sourced bounds)
multiplies it. Without a curve the scale factor alone is the efficiency.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from numpy.typing import ArrayLike

from twin.profile import Profile
from twin.topology.clusters import ClusterKind

Curve = Literal["gemm", "grouped_gemm", "attention", "memory"]

# the profile parameter that scales each curve
SCALE: dict[Curve, str] = {
    "gemm": "train_matmul_efficiency",
    "grouped_gemm": "train_expert_efficiency",
    "attention": "attention_efficiency",
    "memory": "hbm_efficiency",
}


def _shape(kind: ClusterKind, curve: Curve, x: ArrayLike) -> ArrayLike:
    """The device's efficiency curve at size `x` (1.0 where the device data has no curve)."""
    spec = kind.device_spec
    lookup = getattr(spec, "efficiency", None)
    if lookup is None:
        return np.ones_like(np.asarray(x, dtype=float)) if np.ndim(x) else 1.0
    return lookup(curve, x)


def efficiency(kind: ClusterKind, profile: Profile, curve: Curve, x: ArrayLike) -> ArrayLike:
    """Fraction of peak an operation of size `x` reaches (scalar or numpy array)."""
    return _shape(kind, curve, x) * profile[SCALE[curve]]


def peak_flops(kind: ClusterKind) -> float:
    """BF16 dense peak of one device, FLOP/s."""
    spec = kind.device_spec
    if hasattr(spec, "peak_flops"):
        return float(spec.peak_flops("bf16"))
    return spec.peak_bf16_tflops.value * 1e12


def hbm_bytes_s(kind: ClusterKind) -> float:
    """HBM bandwidth of one device, bytes/s."""
    spec = kind.device_spec
    if hasattr(spec, "hbm_bandwidth_bytes_s"):
        return float(spec.hbm_bandwidth_bytes_s)
    return spec.hbm_bandwidth_gbs.value * 1e9


def memory_seconds(kind: ClusterKind, profile: Profile, nbytes: ArrayLike) -> ArrayLike:
    """A memory-bound kernel that reads and writes `nbytes` in total."""
    nbytes = np.asarray(nbytes, dtype=float)
    return nbytes / (hbm_bytes_s(kind) * efficiency(kind, profile, "memory", np.maximum(nbytes, 1.0)))
