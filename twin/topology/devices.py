"""Device catalog: the accelerators the twin can model, each figure with its source.

A device is one HCCL/NCCL rank: one 910B, one A3 die (half a 910C card), or one GPU.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class Figure(BaseModel):
    """A number with where it came from."""

    model_config = ConfigDict(frozen=True)

    value: float
    source: str


class DeviceSpec(BaseModel):
    """One accelerator device (one rank)."""

    model_config = ConfigDict(frozen=True)

    name: str
    vendor: str
    peak_bf16_tflops: Figure
    hbm_gb: Figure  # GB = 1e9 bytes
    hbm_bandwidth_gbs: Figure  # GB/s
    devices_per_card: int = Field(default=1, ge=1)  # A3: a 910C card holds two dies

    @property
    def hbm_bytes(self) -> int:
        return int(self.hbm_gb.value * 1e9)


_HW = "../shared/reference/ascend-hardware.md"

DEVICES: dict[str, DeviceSpec] = {
    d.name: d
    for d in (
        DeviceSpec(
            name="910b",
            vendor="huawei",
            peak_bf16_tflops=Figure(value=353.8, source=f"910B2, light-llm-simulator hardware config ({_HW})"),
            hbm_gb=Figure(value=64, source=f"sglang Ascend reference; MindSpeed-RL docs ({_HW})"),
            hbm_bandwidth_gbs=Figure(value=1600, source=f"light-llm-simulator ({_HW})"),
        ),
        DeviceSpec(
            name="a3-die",
            vendor="huawei",
            peak_bf16_tflops=Figure(
                value=376.0, source=f"CloudMatrix384 paper, 752 TFLOPS per 910C chip / 2 dies ({_HW})"
            ),
            hbm_gb=Figure(value=64, source=f"128 GB per 910C chip / 2 dies, MindSpeed-RL docs ({_HW})"),
            hbm_bandwidth_gbs=Figure(value=1600, source=f"3.2 TB/s per chip / 2, CloudMatrix384 ({_HW})"),
            devices_per_card=2,
        ),
        DeviceSpec(
            name="cpu-rank",
            vendor="host",
            peak_bf16_tflops=Figure(value=1.0, source="nominal unit: the cpu profile's efficiencies are the "
                                    "TFLOP/s the calibration gemm job measures on the host"),
            hbm_gb=Figure(value=8.0, source="nominal share of a 24 GiB CI host for each trainer rank beside "
                          "the driver and Ray"),
            hbm_bandwidth_gbs=Figure(value=10.0, source="nominal unit: host memcpy, scaled by the profile's "
                                     "hbm_efficiency from the calibration copy job"),
        ),
        DeviceSpec(
            name="a100",
            vendor="nvidia",
            peak_bf16_tflops=Figure(value=312, source="NVIDIA A100 datasheet, SXM dense BF16"),
            hbm_gb=Figure(value=80, source="NVIDIA A100 80GB datasheet"),
            hbm_bandwidth_gbs=Figure(value=2039, source="NVIDIA A100 80GB SXM datasheet"),
        ),
        DeviceSpec(
            name="h100",
            vendor="nvidia",
            peak_bf16_tflops=Figure(value=989, source="NVIDIA H100 SXM datasheet, dense BF16"),
            hbm_gb=Figure(value=80, source="NVIDIA H100 SXM datasheet"),
            hbm_bandwidth_gbs=Figure(value=3350, source="NVIDIA H100 SXM datasheet"),
        ),
        DeviceSpec(
            name="h200",
            vendor="nvidia",
            peak_bf16_tflops=Figure(value=989, source="NVIDIA H200 SXM datasheet, dense BF16"),
            hbm_gb=Figure(value=141, source="NVIDIA H200 SXM datasheet"),
            hbm_bandwidth_gbs=Figure(value=4800, source="NVIDIA H200 SXM datasheet"),
        ),
        DeviceSpec(
            name="h20",
            vendor="nvidia",
            peak_bf16_tflops=Figure(value=148, source="NVIDIA H20 product brief, dense BF16"),
            hbm_gb=Figure(value=96, source="NVIDIA H20 product brief"),
            hbm_bandwidth_gbs=Figure(value=4000, source="NVIDIA H20 product brief"),
        ),
    )
}
