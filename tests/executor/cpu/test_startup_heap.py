"""startup_heap: verl's worker still registered, the heap frozen once its init_model returns; TransferQueue's storage
units frozen once the driver's init has created them; the driver's heap frozen before the trainer's fit."""

from __future__ import annotations

import gc
from types import ModuleType

from executor.cpu.startup_heap import TRAINER_MODULE, freeze_after_init_model, freeze_before_fit


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


def test_fit_freezes_the_drivers_heap_before_its_first_step() -> None:
    frozen_during: list[int] = []

    class PPOTrainer:
        def fit(self, agent_loop_manager: str) -> str:
            frozen_during.append(gc.get_freeze_count())
            return f"trained with {agent_loop_manager}"

    module = ModuleType("trainer_base")
    module.PPOTrainer = PPOTrainer
    freeze_before_fit(module)
    gc.unfreeze()
    try:
        assert PPOTrainer().fit("the agent loop") == "trained with the agent loop"
        assert frozen_during[0] > 0  # the steps run with the start-up heap frozen
    finally:
        gc.unfreeze()
    assert PPOTrainer.fit.__name__ == "fit"


def test_the_patched_trainer_is_the_one_the_driver_runs() -> None:
    """verl's V1 driver runs `fit` of the trainer class its registry names; every registered one inherits the patched
    method from `PPOTrainer` in the module the plugin watches."""
    import importlib

    trainer_base = importlib.import_module(TRAINER_MODULE)
    assert trainer_base.TRAINER_REGISTRY
    for trainer in trainer_base.TRAINER_REGISTRY.values():
        assert issubclass(trainer, trainer_base.PPOTrainer) and trainer.fit is trainer_base.PPOTrainer.fit


STORAGE_PROBE = r"""
import gc, json
import ray
import transfer_queue
from transfer_queue import interface
from executor.cpu.startup_heap import STORAGE_BACKEND, freeze_storage_after_init, freeze_storage_units

ray.init(num_cpus=4, include_dashboard=False, logging_level="ERROR")
try:
    freeze_storage_after_init(transfer_queue)
    transfer_queue.init({"backend": {STORAGE_BACKEND: {"num_data_storage_units": 2}}})
    units = interface._TQ_STORAGE[STORAGE_BACKEND]
    heaps = ray.get([u.__ray_call__.remote(lambda _: (gc.get_freeze_count(), len(gc.get_objects())))
                     for u in units.values()])
    print("PROBE " + json.dumps({"wrapped": transfer_queue.init.__code__.co_name, "heaps": heaps,
                                 "asked_again": freeze_storage_units()}))
    transfer_queue.close()
finally:
    ray.shutdown()
"""


def test_transfer_queue_storage_units_freeze_their_heap_once_created(run_probe) -> None:
    """A real TransferQueue on a local Ray: each storage unit the patched init created has frozen its start-up heap
    (torch, ZMQ, Ray: hundreds of thousands of objects) and its collector tracks only what came after."""
    out = run_probe(STORAGE_PROBE)
    assert out["wrapped"] == "init_then_freeze_storage"
    assert len(out["heaps"]) == 2 and out["asked_again"] == 2
    for frozen, tracked in out["heaps"]:
        assert frozen > 100_000 and tracked < frozen / 100, (frozen, tracked)
