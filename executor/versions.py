"""Installed versions of the packages a run depends on, and the supported verl range."""

from __future__ import annotations

from importlib import metadata
from typing import TYPE_CHECKING

from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

from executor.errors import ExecutorError

if TYPE_CHECKING:
    from twin.scenario import Software

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


def software_differences(software: Software, verl: str) -> list[str]:
    """What a plan's predictions assumed of the software that a launch on the installed verl `verl` does not run:
    another verl release (its sync, dispatch and poll behaviours, twin.scenario.Software) or a recipe's patch that
    keeps the actor's weights on the device for the weight sync (this verl offloads them after the update)."""
    found = []
    if software.verl is not None and software.verl.split(".")[:2] != verl.split(".")[:2]:
        found.append(f"verl {software.verl}, this launch runs {verl}")
    if software.weights_kept_for_sync:
        found.append("weights_kept_for_sync (a recipe's patch), this verl offloads the actor's weights after the "
                     "update")
    return found
