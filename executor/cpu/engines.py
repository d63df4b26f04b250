"""Registration of verl's FSDP/FSDP2 and Megatron training engines for device cpu.

verl registers them for cuda and npu only (workers/engine/fsdp/transformer_impl.py,
workers/engine/megatron/transformer_impl.py); the classes run on CPU tensors with gloo collectives once the
CPU platform is active (Megatron with the named patches of executor/cpu/megatron_compat.py).
"""

from __future__ import annotations

from types import ModuleType

ENGINE_MODULE = "verl.workers.engine.fsdp.transformer_impl"
"""The verl module that defines the FSDP engines; registration runs when it is imported."""
MEGATRON_ENGINE_MODULE = "verl.workers.engine.megatron.transformer_impl"
"""The verl module that defines the Megatron engines."""


def register_fsdp_engines(transformer_impl: ModuleType) -> None:
    """Register the language-model and value-model FSDP engines for device cpu, backends fsdp/fsdp2."""
    _register(transformer_impl.FSDPEngineWithLMHead, transformer_impl.FSDPEngineWithValueHead, ["fsdp", "fsdp2"])


def register_megatron_engines(transformer_impl: ModuleType) -> None:
    """Register the language-model and value-model Megatron engines for device cpu, backend megatron."""
    _register(transformer_impl.MegatronEngineWithLMHead, transformer_impl.MegatronEngineWithValueHead, ["megatron"])


def _register(lm_head: type, value_head: type, backends: list[str]) -> None:
    from verl.workers.engine.base import EngineRegistry

    EngineRegistry.register(model_type="language_model", backend=backends, device="cpu")(lm_head)
    EngineRegistry.register(model_type="value_model", backend=backends, device="cpu")(value_head)
