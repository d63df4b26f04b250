"""The one place where an operation's size becomes a fraction of the hardware's peak.

Every compute and memory-bound cost asks `efficiency(kind, profile, curve, x)`. Curves (the device data in
twin.hardware): `gemm` (x = 2*m*n*k FLOPs of one GEMM), `grouped_gemm` (x = tokens per expert), `attention`
(x = sequence length), `memory` (x = bytes of one memory-bound kernel). The profile's scale factor of each
curve (1 = the isolated-kernel curve; a fit may move it inside its sourced bounds) multiplies it.
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
    "gemm": "gemm_efficiency_scale",
    "grouped_gemm": "grouped_gemm_efficiency_scale",
    "attention": "attention_efficiency_scale",
    "memory": "memory_efficiency_scale",
}


def efficiency(kind: ClusterKind, profile: Profile, curve: Curve, x: ArrayLike) -> ArrayLike:
    """Fraction of peak an operation of size `x` reaches (scalar or numpy array)."""
    return kind.device_spec.efficiency(curve, x) * profile[SCALE[curve]]


def peak_flops(kind: ClusterKind) -> float:
    """BF16 dense peak of one device, FLOP/s."""
    return float(kind.device_spec.peak_flops("bf16"))


def hbm_bytes_s(kind: ClusterKind) -> float:
    """HBM bandwidth of one device, bytes/s."""
    return float(kind.device_spec.hbm_bandwidth_bytes_s)


def memory_seconds(kind: ClusterKind, profile: Profile, nbytes: ArrayLike, kernels: float = 1.0) -> ArrayLike:
    """`kernels` memory-bound kernels that move `nbytes` in total, evenly (each at its own size's efficiency)."""
    nbytes = np.asarray(nbytes, dtype=float)
    per_kernel = np.maximum(nbytes / kernels, 1.0)
    return nbytes / (hbm_bytes_s(kind) * efficiency(kind, profile, "memory", per_kernel))
