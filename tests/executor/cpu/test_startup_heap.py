"""freeze_after_init_model: verl's worker still registered, the heap frozen once its init_model returns."""

from __future__ import annotations

import gc
from types import ModuleType

from executor.cpu.startup_heap import freeze_after_init_model


def test_init_model_freezes_the_heap_after_it_returns_and_keeps_its_registration() -> None:
    from verl.single_controller.base.decorator import MAGIC_ATTR, Dispatch, register

    frozen_during: list[int] = []

    class ActorRolloutRefWorker:
        @register(dispatch_mode=Dispatch.ONE_TO_ALL)
        def init_model(self) -> str:
            frozen_during.append(gc.get_freeze_count())
            return "built"

    module = ModuleType("engine_workers")
    module.ActorRolloutRefWorker = ActorRolloutRefWorker
    freeze_after_init_model(module)
    gc.unfreeze()
    try:
        assert ActorRolloutRefWorker().init_model() == "built"
        assert frozen_during == [0]  # the model is built before the heap is frozen
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
    assert getattr(ActorRolloutRefWorker.init_model, MAGIC_ATTR)["dispatch_mode"] is Dispatch.ONE_TO_ALL
