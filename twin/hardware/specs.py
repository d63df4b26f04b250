"""Devices, link tiers and cluster kinds as validated data (the shipped YAML files and users' own)."""

from __future__ import annotations

import math
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator, model_validator

from twin.errors import TwinError
from twin.hardware.figures import Curve, Figure, Source, interp_clamped

HARDWARE_SCHEMA = 1
CurveName = Literal["gemm", "grouped_gemm", "attention", "memory"]
CURVE_NAMES: tuple[str, ...] = ("gemm", "grouped_gemm", "attention", "memory")
RolloutEngine = Literal["vllm", "vllm-ascend"]
MegatronFlavour = Literal["mindspeed", "megatron-core"]
TierName = Literal["sio", "hccs", "ub", "nvlink", "roce", "ib", "shm", "host"]
# ep_dispatch / ep_combine: MoE expert-parallel token dispatch and combine (fused all-to-all-v kernels)
CollectiveName = Literal["any", "all_reduce", "all_gather", "reduce_scatter", "all_to_all", "ep_dispatch",
                         "ep_combine", "p2p", "copy"]


class DeviceSpec(BaseModel):
    """One accelerator device (one HCCL/NCCL rank): peaks, HBM and efficiency curves by operation size.

    Curves: `gemm` (x = FLOPs of one GEMM call, 2*m*n*k), `grouped_gemm` (x = tokens per expert),
    `attention` (x = sequence length, causal flash attention forward), `memory` (x = bytes one
    memory-bound kernel moves; the fraction of HBM bandwidth it reaches).
    """

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True, allow_inf_nan=False)

    schema_version: int = Field(default=HARDWARE_SCHEMA, alias="schema")
    name: str = Field(min_length=1)
    vendor: str
    description: str = ""
    devices_per_card: int = Field(default=1, ge=1)
    peak_tflops: dict[str, Figure]  # dtype -> dense peak
    hbm_gb: Figure  # GB = 1e9 bytes (a 64 GiB HBM is 68.72)
    # what the framework's allocator can use (torch's "total capacity"): the HBM less what the driver and runtime
    # hold; where no source gives it, the HBM figure stands for it
    allocator_gb: Figure | None = None
    hbm_bandwidth_gbs: Figure  # GB/s
    # tokens of one block of the inference engine's paged KV cache on this device (vLLM holds each sequence in whole
    # blocks); unset: one token
    kv_block_tokens: Figure | None = None
    # the share of the shorter of a decode GEMM's weight read and its compute that runs after the longer instead of
    # under it (1: one after the other; unset: none, a roofline)
    gemm_load_serial: Figure | None = None
    curves: dict[CurveName, Curve]

    @model_validator(mode="after")
    def _complete(self) -> DeviceSpec:
        if self.schema_version != HARDWARE_SCHEMA:
            raise ValueError(f"hardware schema {self.schema_version} is not supported (reads {HARDWARE_SCHEMA})")
        if "bf16" not in self.peak_tflops:
            raise ValueError("peak_tflops needs a bf16 entry")
        if self.kv_block_tokens is not None and (self.kv_block_tokens.value < 1
                                                 or self.kv_block_tokens.value != int(self.kv_block_tokens.value)):
            raise ValueError(f"kv_block_tokens {self.kv_block_tokens.value:g} is not a whole number of tokens >= 1")
        if self.gemm_load_serial is not None and self.gemm_load_serial.value > 1:
            raise ValueError(f"gemm_load_serial {self.gemm_load_serial.value:g} is not a share of at most 1")
        if self.allocator_gb is not None and self.allocator_gb.value > self.hbm_gb.value:
            raise ValueError(f"allocator capacity {self.allocator_gb.value:g} GB exceeds the HBM "
                             f"({self.hbm_gb.value:g} GB)")
        missing = [c for c in CURVE_NAMES if c not in self.curves]
        if missing:
            raise ValueError(f"curves {', '.join(missing)} missing (needs {', '.join(CURVE_NAMES)})")
        return self

    @property
    def peak_bf16_tflops(self) -> Figure:
        return self.peak_tflops["bf16"]

    def peak_flops(self, dtype: str = "bf16") -> float:
        """Dense peak in FLOP/s for `dtype`."""
        try:
            return self.peak_tflops[dtype].value * 1e12
        except KeyError:
            raise TwinError(f"device {self.name} has no peak for dtype {dtype!r}; known: "
                            f"{', '.join(self.peak_tflops)}") from None

    @property
    def kv_block(self) -> int:
        """Tokens of one KV-cache block (1 where the file gives none)."""
        return int(self.kv_block_tokens.value) if self.kv_block_tokens is not None else 1

    @property
    def gemm_serial(self) -> float:
        """Share of the shorter of a decode GEMM's weight read and compute that runs after the longer (0 where the
        file gives none: a roofline)."""
        return self.gemm_load_serial.value if self.gemm_load_serial is not None else 0.0

    @property
    def capacity_gb(self) -> float:
        """The device memory a run can fill, in GB: the allocator's capacity where a source gives it, else the HBM."""
        return (self.allocator_gb or self.hbm_gb).value

    @property
    def hbm_bandwidth_bytes_s(self) -> float:
        return self.hbm_bandwidth_gbs.value * 1e9

    def efficiency(self, curve: str, x: float | np.ndarray) -> float | np.ndarray:
        """Fraction of peak (memory: of HBM bandwidth) one operation of size `x` reaches; vectorised."""
        try:
            c = self.curves[curve]  # type: ignore[index]
        except KeyError:
            raise TwinError(f"no efficiency curve {curve!r}; known: {', '.join(CURVE_NAMES)}") from None
        return c(x)


class TierCurve(Curve):
    """A collective's efficiency on a tier by message size, for one number of peers."""

    collective: CollectiveName = "any"
    peers: int = Field(default=1, ge=1)  # other ranks the collective reaches, itself excluded


class _Families:
    """Per collective: the peers (as log) and the curves, sorted by peers; equal to any other (derived)."""

    __slots__ = ("by_op",)

    def __init__(self, curves: tuple[TierCurve, ...]) -> None:
        by_op: dict[str, list[TierCurve]] = {}
        for c in curves:
            by_op.setdefault(c.collective, []).append(c)
        self.by_op = {op: (np.log([c.peers for c in cs]).tolist(), cs)
                      for op, cs in ((op, sorted(cs, key=lambda c: c.peers)) for op, cs in by_op.items())}

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Families)

    __hash__ = None  # type: ignore[assignment]


class LinkTier(BaseModel):
    """One class of link: per-direction bandwidth per link, latency, and collective efficiency curves.

    An efficiency is achieved bytes / (time x `bandwidth_gbs`); where the source timed whole calls, the
    call's fixed cost is inside it. Between the peers of two curves it is interpolated linearly in
    log(peers), clamped beyond them.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    name: TierName
    bandwidth_gbs: Figure  # per direction, per link
    latency_us: Figure
    switched: bool  # True: each device has one port into a switch; False: direct device-to-device links
    collective_efficiency: tuple[TierCurve, ...] = Field(min_length=1)
    _families: _Families = PrivateAttr()

    @model_validator(mode="after")
    def _curves(self) -> LinkTier:
        keys = [(c.collective, c.peers) for c in self.collective_efficiency]
        dup = {k for k in keys if keys.count(k) > 1}
        if dup:
            raise ValueError(f"more than one curve for (collective, peers) {sorted(dup)}")
        if not any(c.collective == "any" for c in self.collective_efficiency):
            raise ValueError("needs at least one curve with collective 'any'")
        return self

    def model_post_init(self, context: object, /) -> None:
        self._families = _Families(self.collective_efficiency)

    @property
    def bandwidth_bytes_s(self) -> float:
        return self.bandwidth_gbs.value * 1e9

    @property
    def latency_s(self) -> float:
        return self.latency_us.value * 1e-6

    def efficiency(self, message_bytes: float | np.ndarray, peers: float | np.ndarray = 1,
                   collective: str = "any") -> float | np.ndarray:
        """Fraction of this tier's per-direction bandwidth a collective over `peers` other ranks reaches at
        `message_bytes`; a collective without its own curves uses the tier's 'any' curves. Vectorised
        (message_bytes and peers broadcast)."""
        fam = self._families.by_op
        log_peers, curves = fam.get(collective) or fam["any"]
        if len(curves) == 1:
            return curves[0](message_bytes)
        if isinstance(message_bytes, (int, float)) and isinstance(peers, (int, float)):
            # linear in log(peers) between the curves' values at this message size, clamped beyond them
            return interp_clamped(log_peers, [c(message_bytes) for c in curves], math.log(max(peers, 1.0)))
        x = np.asarray(message_bytes, dtype=float)
        lp = np.log(np.maximum(np.asarray(peers, dtype=float), 1.0))
        x, lp = np.broadcast_arrays(x, lp)
        ys = np.stack([np.asarray(c(x), dtype=float) for c in curves])  # (curves, *shape)
        at = np.asarray(log_peers)
        lp = np.clip(lp, at[0], at[-1])
        i = np.clip(np.searchsorted(at, lp, side="right") - 1, 0, len(curves) - 2)
        t = (lp - at[i]) / (at[i + 1] - at[i])
        lo = np.take_along_axis(ys, i[None], axis=0)[0]
        hi = np.take_along_axis(ys, (i + 1)[None], axis=0)[0]
        out = lo + t * (hi - lo)
        return float(out) if out.ndim == 0 else out


class ClusterKind(BaseModel):
    """A kind of cluster: its device, packaging, link tiers and hosts."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True, allow_inf_nan=False)

    schema_version: int = Field(default=HARDWARE_SCHEMA, alias="schema")
    name: str = Field(min_length=1)
    description: str
    device: DeviceSpec  # a file may name a shipped device instead
    devices_per_card: int = Field(ge=1)
    cards_per_node: int = Field(ge=1)
    cards_per_pod: int | None = Field(default=None, ge=1)  # A3 SuperPoD: 384 chips on one UB fabric
    packaging_source: Source  # where devices per card, cards per node and per pod come from
    chip_tier: TierName | None = None  # between the dies of one card
    node_tier: TierName  # between devices of one node
    pod_tier: TierName | None = None  # between nodes of one pod
    scaleout_tier: TierName  # between nodes (or pods)
    tiers: tuple[LinkTier, ...]
    host_memory_gb_per_node: Figure
    # sustained (STREAM-like) bandwidth of one node's host memory, all sockets: what a host-side optimizer step
    # streams through (Megatron's CPU optimizer); None where no source gives it
    host_memory_bandwidth_gbs_per_node: Figure | None = None
    # cann-recipes-train: on multi-node NPU, vLLM sleep mode does not release device memory
    vllm_sleep_frees_memory: bool = True
    # the embedded calibration profile it uses, named by its shipped kind (a user's A2-like cluster: a2);
    # default: its own name. `--profile` / the scenario's `profile` still override it.
    profile: str | None = None
    _key: str = PrivateAttr()

    @property
    def rollout_engine(self) -> RolloutEngine:
        """The rollout engine verl runs on this kind's devices: vLLM-Ascend on Huawei NPUs, vLLM elsewhere."""
        return "vllm-ascend" if self.device.vendor == "huawei" else "vllm"

    @property
    def megatron_flavour(self) -> MegatronFlavour:
        """The Megatron verl trains with on this kind's devices: MindSpeed on Huawei NPUs (its tp-extend-ep, swap
        optimizer and moe_zero_memory), megatron-core elsewhere."""
        return "mindspeed" if self.device.vendor == "huawei" else "megatron-core"

    @field_validator("device", mode="before")
    @classmethod
    def _named_device(cls, v: object) -> object:
        if isinstance(v, str):
            from twin.hardware.catalog import DEVICES

            if v not in DEVICES:
                raise ValueError(f"unknown device {v!r}; shipped: {', '.join(DEVICES)} (or give the device inline)")
            return DEVICES[v]
        return v

    @model_validator(mode="after")
    def _consistent(self) -> ClusterKind:
        if self.schema_version != HARDWARE_SCHEMA:
            raise ValueError(f"hardware schema {self.schema_version} is not supported (reads {HARDWARE_SCHEMA})")
        if self.devices_per_card != self.device.devices_per_card:
            raise ValueError(f"devices_per_card {self.devices_per_card} differs from device {self.device.name}'s "
                             f"{self.device.devices_per_card}")
        names = [t.name for t in self.tiers]
        if len(set(names)) != len(names):
            raise ValueError(f"tier names repeat: {names}")
        for role in ("chip_tier", "node_tier", "pod_tier", "scaleout_tier"):
            tier = getattr(self, role)
            if tier is not None and tier not in names:
                raise ValueError(f"{role} {tier!r} is not among the tiers {names}")
        if "host" not in names:
            raise ValueError("needs a 'host' tier (the device-host link)")
        if self.chip_tier is not None and self.devices_per_card == 1:
            raise ValueError("chip_tier needs devices_per_card > 1")
        if self.profile is not None:
            from twin.profile import EMBEDDED

            if self.profile not in EMBEDDED:
                raise ValueError(f"profile {self.profile!r} is not an embedded profile; known: {', '.join(EMBEDDED)}")
        return self

    def model_post_init(self, context: object, /) -> None:
        self._key = self.model_dump_json()

    def __hash__(self) -> int:
        return hash(self._key)

    @property
    def devices_per_node(self) -> int:
        return self.devices_per_card * self.cards_per_node

    @property
    def device_spec(self) -> DeviceSpec:
        return self.device

    @property
    def profile_kind(self) -> str:
        """The cluster kind whose embedded calibration profile this kind uses."""
        return self.profile or self.name

    def tier(self, name: str) -> LinkTier:
        for t in self.tiers:
            if t.name == name:
                return t
        raise KeyError(name)
