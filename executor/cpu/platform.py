"""verl platform for CPU-only hosts: device cpu, gloo collectives, logical Ray "GPU"s as trainer ranks.

Imported inside verl processes only (by `executor.cpu.verl_plugin`). verl counts and places trainer
ranks with the Ray resource the platform names and knows only "GPU" and "NPU"
(single_controller/ray/base.py), so this platform reports "GPU" and a run declares as many logical
GPUs as CPU trainer ranks (`ray_kwargs.ray_init.num_gpus`).
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from types import ModuleType
from typing import Any

import torch
from verl.plugin.platform import PlatformBase, PlatformRegistry

from executor.cpu.device_module import cpu_device_module
from executor.cpu.names import PLATFORM_NAME


class PlatformCPU(PlatformBase):
    """CPU trainer ranks talking over gloo; accelerator-only calls are no-ops."""

    @property
    def device_name(self) -> str:
        return "cpu"

    @property
    def vendor_name(self) -> str:
        return "cpu"

    @property
    def device_module(self) -> ModuleType:
        return cpu_device_module

    def is_available(self) -> bool:
        return True

    def is_platform_available(self, use_smi_check: bool = False) -> bool:
        # Chosen only explicitly (VERL_PLATFORM=cpu): a host with an accelerator keeps its own.
        return os.environ.get("VERL_PLATFORM", "").strip().lower() == PLATFORM_NAME

    def current_device(self) -> str:  # type: ignore[override]
        # verl moves batches with `.to(get_device_id())`: "cpu" keeps them on the host.
        return "cpu"

    def device_count(self) -> int:
        return 1

    def set_device(self, device_index: int) -> None:
        return None

    def synchronize(self, device_index: int | None = None) -> None:
        return None

    def manual_seed(self, seed: int) -> None:
        torch.manual_seed(seed)

    def manual_seed_all(self, seed: int) -> None:
        torch.manual_seed(seed)

    def set_allocator_settings(self, settings: str) -> None:
        return None

    def empty_cache(self) -> None:
        return None

    def get_device_capability(self, device_index: int = 0) -> tuple[int | None, int | None]:
        return None, None

    def communication_backend_name(self) -> str:
        return "gloo"

    def visible_devices_envvar(self) -> str:
        return "CUDA_VISIBLE_DEVICES"

    @contextmanager
    def nvtx_range(self, msg: str):
        yield

    def profiler_start(self) -> None:
        return None

    def profiler_stop(self) -> None:
        return None

    def ray_resource_name(self) -> str:
        return "GPU"

    def ray_resource_options(self, num_gpus: float) -> dict[str, Any]:
        return {"num_gpus": num_gpus}

    def ray_noset_envvars(self) -> list[str]:
        return ["RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES"]

    def is_ipc_supported(self) -> bool:
        return False

    def cudart(self) -> Any:
        return None


def register() -> None:
    """Register the CPU platform with verl's PlatformRegistry (idempotent)."""
    if PlatformRegistry.get(PLATFORM_NAME) is not PlatformCPU:
        PlatformRegistry.register(PLATFORM_NAME)(PlatformCPU)
