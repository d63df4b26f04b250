"""Freeze a trainer rank's start-up heap once verl's worker has built its model.

Python's collector walks every object it tracks in a full (generation 2) collection, and verl's trainer ranks hold
a large start-up heap (torch, transformers, verl, Ray and the model's modules): on the CPU loop a rank tracked
0.73-0.89 million objects once its model was built, and a full collection of them paused it 0.40-0.51 s, inside the
update in two of three steps (benchmarks/cpu_loop_stage_cpu.py marks every pause of 5 ms or more with the objects
tracked, 2026-12-05). `gc.freeze()` moves every object alive into a permanent generation the collector skips, as
vLLM's engine core does once it has started (vllm/v1/engine/core.py); the objects a step allocates are still
collected. Wrapping verl's `ActorRolloutRefWorker.init_model` keeps its registration (`functools.wraps` copies the
dispatch attributes verl's `register` set on it).
"""

from __future__ import annotations

import functools
import gc
from types import ModuleType
from typing import Any

ENGINE_WORKERS_MODULE = "verl.workers.engine_workers"
"""The verl module that defines the trainer's worker, `ActorRolloutRefWorker`; the patch runs when it is imported."""


def freeze_after_init_model(engine_workers: ModuleType) -> None:
    """Patch `engine_workers.ActorRolloutRefWorker.init_model` to collect and freeze the heap after it returns."""
    worker = engine_workers.ActorRolloutRefWorker
    init_model = worker.init_model

    @functools.wraps(init_model)
    def init_model_then_freeze(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = init_model(self, *args, **kwargs)
        gc.collect()
        gc.freeze()
        return result

    worker.init_model = init_model_then_freeze
