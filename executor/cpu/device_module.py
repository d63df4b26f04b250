"""A `torch.<device>`-like module for the CPU: torch.cpu plus the calls verl makes on accelerators.

verl calls `get_torch_device().empty_cache()`, `.mem_get_info()`, `.max_memory_allocated()` and more
on whatever module the platform returns. torch.cpu lacks most of them. Here cache and IPC calls are
no-ops (the host has no caching device allocator), and memory queries answer with host facts: the
process's resident set stands in for "allocated" and "reserved" memory, its peak (VmHWM) for the
maxima, and the host's available/total memory for `mem_get_info`.
"""

from __future__ import annotations

import platform
import types
from typing import Any

import psutil
import torch


def _peak_rss_bytes() -> int:
    """Peak resident set size of this process (Linux VmHWM; falls back to the current RSS)."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return psutil.Process().memory_info().rss


def _rss_bytes(device: Any = None) -> int:
    return psutil.Process().memory_info().rss


def _peak_bytes(device: Any = None) -> int:
    return _peak_rss_bytes()


def _mem_get_info(device: Any = None) -> tuple[int, int]:
    memory = psutil.virtual_memory()
    return memory.available, memory.total


def _no_op(*args: Any, **kwargs: Any) -> None:
    return None


_EXTRA: dict[str, Any] = {
    "empty_cache": _no_op,
    "ipc_collect": _no_op,
    "reset_peak_memory_stats": _no_op,
    "set_per_process_memory_fraction": _no_op,
    "memory_allocated": _rss_bytes,
    "memory_reserved": _rss_bytes,
    "max_memory_allocated": _peak_bytes,
    "max_memory_reserved": _peak_bytes,
    "mem_get_info": _mem_get_info,
    "get_rng_state": lambda device=None: torch.get_rng_state(),
    "set_rng_state": lambda state, device=None: torch.set_rng_state(state),
    "manual_seed": torch.manual_seed,
    "manual_seed_all": torch.manual_seed,
    "get_device_name": lambda device=None: platform.processor() or platform.machine(),
    "is_bf16_supported": lambda including_emulation=True: True,
}


class CpuDeviceModule(types.ModuleType):
    """Proxy of `torch.cpu` that also answers the accelerator calls listed in `_EXTRA`."""

    def __getattr__(self, name: str) -> Any:
        if name in _EXTRA:
            return _EXTRA[name]
        return getattr(torch.cpu, name)


cpu_device_module = CpuDeviceModule("executor.cpu.device_module.cpu")
