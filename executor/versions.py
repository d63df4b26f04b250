"""Installed versions of the packages a run depends on, and the supported verl range."""

from __future__ import annotations

from importlib import metadata

from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

from executor.errors import ExecutorError

SUPPORTED_VERL = SpecifierSet(">=0.9.0,<0.10")

# Distribution names reported in run records and preflight (import name differs for some).
TRACKED = ("verl", "ray", "torch", "hydra-core", "transformers", "TransferQueue", "vllm", "vllm-ascend",
           "torch-npu", "mindspeed", "megatron-core", "math-verify", "ascend-rl-twin")


def installed_version(dist: str) -> str | None:
    """The installed version of distribution `dist`, or None when it is absent."""
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def installed_versions() -> dict[str, str]:
    """Versions of the tracked distributions that are installed."""
    found = {name: installed_version(name) for name in TRACKED}
    return {name: v for name, v in found.items() if v is not None}


def check_verl_version() -> str:
    """Return the installed verl version; refuse a missing or unsupported one with one line."""
    found = installed_version("verl")
    if found is None:
        raise ExecutorError(f"verl is not installed; the executor needs verl {SUPPORTED_VERL}")
    try:
        ok = Version(found) in SUPPORTED_VERL
    except InvalidVersion:
        ok = False
    if not ok:
        raise ExecutorError(f"verl {found} is not supported; the executor targets verl {SUPPORTED_VERL} "
                            "(its config keys and worker code were checked against 0.9.1)")
    return found
