"""verl plugin for CPU hosts; verl imports it in each of its processes (VERL_USE_EXTERNAL_MODULES).

Registers the CPU platform, fixes the duplicated gloo backend string, and - once verl imports the
modules that hold the registries - registers the FSDP engines for device cpu and the transformers
rollout backend. Select the platform with VERL_PLATFORM=cpu.
"""

from __future__ import annotations

from types import ModuleType

from executor.cpu import distributed, platform
from executor.cpu.engines import ENGINE_MODULE, register_fsdp_engines
from executor.cpu.names import ROLLOUT_NAME
from executor.npu_opt.post_import import when_imported

ADAPTER_CLASS = "executor.cpu.rollout.TransformersRolloutAdapter"


def _load_replica_class() -> type:
    from executor.cpu.rollout import TransformersReplica

    return TransformersReplica


def _register_replica(replica_module: ModuleType) -> None:
    replica_module.RolloutReplicaRegistry.register(ROLLOUT_NAME, _load_replica_class)


def _register_adapter(base_module: ModuleType) -> None:
    base_module._ROLLOUT_REGISTRY[(ROLLOUT_NAME, "async")] = ADAPTER_CLASS


platform.register()
distributed.install()
when_imported(ENGINE_MODULE, register_fsdp_engines)
when_imported("verl.workers.rollout.replica", _register_replica)
when_imported("verl.workers.rollout.base", _register_adapter)
