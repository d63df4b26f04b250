"""Freeze the start-up heap of the CPU run's long-lived processes once they are built.

Python's collector walks every object it tracks in a full (generation 2) collection, and the run's processes hold
large start-up heaps (torch, transformers, verl, Ray, ZMQ). `gc.freeze()` moves every object alive into a permanent
generation the collector skips, as vLLM's engine core does once it has started (vllm/v1/engine/core.py); the objects
a step allocates are still collected. Measured with benchmarks/cpu_loop_stage_cpu.py, which marks every pause of 5 ms
or more with the objects tracked (2026-12-05):

- verl's trainer ranks tracked 0.73-0.89 million objects once their model was built, and a full collection of them
  paused a rank 0.40-0.51 s, inside the update in two steps of three. Wrapping `ActorRolloutRefWorker.init_model`
  keeps its registration (`functools.wraps` copies the dispatch attributes verl's `register` set on it).
- TransferQueue's storage unit (`SimpleStorageUnit`, a Ray actor that imports neither verl nor this plugin) tracked
  0.39 million objects, and its full collections paused it 0.16-0.19 s; every old_log_prob or advantage stage 2-3x
  its usual length in five local runs (0.26-0.38 s against 0.07 / 0.16 s) held one such pause, since both stages
  read the batch from it. The driver, which creates the units in `transfer_queue.init`, asks each to freeze its heap
  through Ray's `__ray_call__` once they are up.
- verl's driver (`TaskRunnerV1`, which runs the trainer's `fit` and computes the GRPO advantages itself) tracked
  0.88-0.92 million objects once its workers and agent loop were up, and a full collection paused it 0.33-0.76 s
  (2026-12-07, one run with the marks): inside the update's wait in that run, inside the fourth step's advantage stage
  in five loop tests of six (0.62-1.00 s against 0.24-0.45 s in the other steps). The trainer's `fit` collects and
  freezes the driver's heap before its first step.
"""

from __future__ import annotations

import functools
import gc
from types import ModuleType
from typing import Any

ENGINE_WORKERS_MODULE = "verl.workers.engine_workers"
"""The verl module that defines the trainer's worker, `ActorRolloutRefWorker`; the patch runs when it is imported."""
TRAINER_MODULE = "verl.trainer.ppo.v1.trainer_base"
"""The verl module that defines the V1 trainer, `PPOTrainer`, whose `fit` the driver runs; the patch runs on import."""
TRANSFER_QUEUE_MODULE = "transfer_queue"
"""The package whose `init` creates TransferQueue's controller and storage units (verl's V1 trainer calls it)."""
STORAGE_BACKEND = "SimpleStorage"
"""TransferQueue's in-memory backend, whose units are Ray actors (`transfer_queue.interface._TQ_STORAGE[...]`)."""


def collect_and_freeze(_actor: object = None) -> None:
    """Collect what is garbage now and freeze the rest; `_actor` lets Ray's `__ray_call__` run it in an actor."""
    gc.collect()
    gc.freeze()


def _freeze_around(owner: Any, name: str, *, first: bool) -> None:
    """Replace `owner.name` by a wrapper (its name and attributes kept, as `functools.wraps` copies them) that
    collects and freezes the heap before the call (`first`) or after it returns."""
    call = getattr(owner, name)

    @functools.wraps(call)
    def frozen_around(*args: Any, **kwargs: Any) -> Any:
        if first:
            collect_and_freeze()
        result = call(*args, **kwargs)
        if not first:
            collect_and_freeze()
        return result

    setattr(owner, name, frozen_around)


def freeze_after_init_model(engine_workers: ModuleType) -> None:
    """Patch `engine_workers.ActorRolloutRefWorker.init_model` to collect and freeze the heap after it returns."""
    _freeze_around(engine_workers.ActorRolloutRefWorker, "init_model", first=False)


def freeze_before_fit(trainer_base: ModuleType) -> None:
    """Patch `trainer_base.PPOTrainer.fit` to collect and freeze the driver's heap before the first step (every
    worker, the agent loop and TransferQueue are up by then)."""
    _freeze_around(trainer_base.PPOTrainer, "fit", first=True)


def freeze_storage_after_init(transfer_queue: ModuleType) -> None:
    """Patch `transfer_queue.init` so that, once it returns, every in-memory storage unit it created has collected
    and frozen its heap (a caller that attaches to an existing TransferQueue created none and asks none)."""
    init = transfer_queue.init

    @functools.wraps(init)
    def init_then_freeze_storage(*args: Any, **kwargs: Any) -> Any:
        conf = init(*args, **kwargs)
        freeze_storage_units()
        return conf

    transfer_queue.init = init_then_freeze_storage


def freeze_storage_units() -> int:
    """Have every in-memory TransferQueue storage unit this process created collect and freeze its heap; returns how
    many did (none where this process attached to another's TransferQueue)."""
    import ray
    from transfer_queue import interface

    units = (interface._TQ_STORAGE or {}).get(STORAGE_BACKEND) or {}
    ray.get([unit.__ray_call__.remote(collect_and_freeze) for unit in units.values()])
    return len(units)
