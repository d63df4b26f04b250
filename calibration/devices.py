"""The device a job measures: selection, availability, synchronisation and dtypes.

torch (and torch_npu on npu) is imported only inside these functions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from calibration.errors import CalibrationError
from calibration.facts import cpu_model
from calibration.measurements import DeviceFacts

DEVICE_KINDS = ("npu", "cuda", "cpu")
BACKENDS = {"npu": "hccl", "cuda": "nccl", "cpu": "gloo"}
DTYPE_NAMES = ("bf16", "fp16", "fp32")


@dataclass(frozen=True)
class Device:
    """One device of a kind; picklable so that spawned workers can receive it."""

    kind: str
    index: int = 0

    @property
    def torch_device(self) -> str:
        return "cpu" if self.kind == "cpu" else f"{self.kind}:{self.index}"

    @property
    def backend(self) -> str:
        return BACKENDS[self.kind]

    def module(self) -> Any:
        """torch.cuda, torch.npu or torch.cpu."""
        import torch

        if self.kind == "npu":
            import torch_npu  # noqa: F401 - registers torch.npu
        return getattr(torch, self.kind)

    def activate(self) -> None:
        """Make this device current in this process (no-op on cpu)."""
        if self.kind != "cpu":
            self.module().set_device(self.index)

    def synchronize(self) -> None:
        """Wait until all work queued on the device has finished."""
        if self.kind != "cpu":
            self.module().synchronize(self.index)

    def release_cache(self) -> None:
        """Return cached allocator blocks to the device, for other processes (no-op on cpu)."""
        if self.kind != "cpu":
            self.module().empty_cache()

    def with_index(self, index: int) -> Device:
        return Device(self.kind, index)


def check_kind(kind: str) -> str:
    if kind not in DEVICE_KINDS:
        raise CalibrationError(f"unknown device {kind!r}; choose one of {', '.join(DEVICE_KINDS)}")
    return kind


def open_device(kind: str) -> Device:
    """Check that the device kind is usable here and return device 0 of it."""
    device = Device(check_kind(kind))
    if kind == "cpu":
        return device
    try:
        module = device.module()
    except ImportError as exc:
        raise CalibrationError(f"device {kind} needs {exc.name}, which is not installed") from None
    if not module.is_available() or module.device_count() < 1:
        raise CalibrationError(f"device {kind} requested but no {kind} device is available on this host")
    device.activate()
    return device


def device_count(device: Device) -> int:
    if device.kind == "cpu":
        return 1
    return int(device.module().device_count())


def device_facts(device: Device) -> DeviceFacts:
    """Kind, name and count of the devices of this kind on this host (cpu: and torch's threads)."""
    if device.kind == "cpu":
        import torch

        return DeviceFacts(kind="cpu", name=cpu_model(), count=1, threads=torch.get_num_threads())
    name = str(device.module().get_device_name(device.index))
    return DeviceFacts(kind=device.kind, name=name, count=device_count(device))  # type: ignore[arg-type]


def torch_dtype(name: str) -> Any:
    import torch

    return {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[name]


def supported_dtypes(device: Device, wanted: tuple[str, ...] = DTYPE_NAMES) -> list[str]:
    """The dtypes among `wanted` for which a small matmul runs on the device."""
    import torch

    found = []
    for name in wanted:
        try:
            a = torch.ones(8, 8, dtype=torch_dtype(name), device=device.torch_device)
            (a @ a).sum().item()
        except (RuntimeError, TypeError):
            continue
        found.append(name)
    return found
