"""verl plugin for CPU hosts; verl imports it in each of its processes (VERL_USE_EXTERNAL_MODULES).

Registers the CPU platform, fixes the duplicated gloo backend string, and - once verl imports the
module that holds the engine registry - registers the FSDP and Megatron engines for device cpu; its trainer ranks
freeze their start-up heap once the model is built, TransferQueue's storage units once the driver has created
them, and the driver before the trainer's first step (executor/cpu/startup_heap.py). Select the platform with
VERL_PLATFORM=cpu.
"""

from __future__ import annotations

from executor.cpu import distributed, platform
from executor.cpu.engines import ENGINE_MODULE, MEGATRON_ENGINE_MODULE, register_fsdp_engines, register_megatron_engines
from executor.cpu.startup_heap import (
    ENGINE_WORKERS_MODULE,
    TRAINER_MODULE,
    TRANSFER_QUEUE_MODULE,
    freeze_after_init_model,
    freeze_before_fit,
    freeze_storage_after_init,
)
from executor.npu_opt.post_import import when_imported

platform.register()
distributed.install()
when_imported(ENGINE_MODULE, register_fsdp_engines)
when_imported(MEGATRON_ENGINE_MODULE, register_megatron_engines)
when_imported(ENGINE_WORKERS_MODULE, freeze_after_init_model)
when_imported(TRANSFER_QUEUE_MODULE, freeze_storage_after_init)
when_imported(TRAINER_MODULE, freeze_before_fit)
