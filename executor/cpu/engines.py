"""Registration of verl's FSDP/FSDP2 training engines for device cpu.

verl registers them for cuda and npu only (workers/engine/fsdp/transformer_impl.py); the classes run
unchanged on CPU tensors with gloo collectives once the CPU platform is active.
"""

from __future__ import annotations

from types import ModuleType

ENGINE_MODULE = "verl.workers.engine.fsdp.transformer_impl"
"""The verl module that defines the FSDP engines; registration runs when it is imported."""


def register_fsdp_engines(transformer_impl: ModuleType) -> None:
    """Register the language-model and value-model FSDP engines for device cpu, backends fsdp/fsdp2."""
    from verl.workers.engine.base import EngineRegistry

    EngineRegistry.register(model_type="language_model", backend=["fsdp", "fsdp2"], device="cpu")(
        transformer_impl.FSDPEngineWithLMHead
    )
    EngineRegistry.register(model_type="value_model", backend=["fsdp", "fsdp2"], device="cpu")(
        transformer_impl.FSDPEngineWithValueHead
    )
