"""directed_reshard: experts go by all-to-all-v only to the rollout rank that needs them.

The transfer is `executor/npu_opt/directed_reshard_transfer.py`; `executor/npu_opt/directed_reshard_backend.py`
hooks it into verl: importing it registers the checkpoint-engine backend named by its constant `BACKEND`
with `verl.checkpoint_engine.base.CheckpointEngineRegistry.register`. This module is the seam: it checks that
the installed verl has that registry and imports `rollout.checkpoint_engine.custom_backend_module` in every
worker (workers/engine_workers.py ActorRolloutRefWorker.init_model), then selects the backend, its
arguments (the plan's model, layouts and devices), the checkpoint manager that keeps the sync colocated
(`rollout.checkpoint_manager_class`, trainer/ppo/ray_trainer.py), and patches
ActorRolloutRefWorker.update_weights in the workers, and verl's vLLM worker extension's _update_weights so that
a TP-split block is written into the rank's module (executor/reshard/vllm_blocks.py; see the backend module for
what it can feed).
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
from functools import cache
from pathlib import Path

from executor.npu_opt.base import (
    ApplyContext,
    Availability,
    Optimization,
    PatchTarget,
    PatchTargetMissing,
    WorkerPatchResult,
)
from executor.npu_opt.host import HostEnv, class_fields, in_source, method_source

TRANSFER_MODULE = "executor.npu_opt.directed_reshard_transfer"
BACKEND_MODULE = "executor.npu_opt.directed_reshard_backend"
REGISTRY = PatchTarget(module="verl.checkpoint_engine.base", attribute="CheckpointEngineRegistry.register",
                       dist="verl")
# params: what the replacements (directed_reshard_backend.colocated_update_weights,
# reshard/vllm_blocks.block_aware_update_weights) take, as verl 0.9.1's originals do
UPDATE_WEIGHTS = PatchTarget(module="verl.workers.engine_workers", attribute="ActorRolloutRefWorker.update_weights",
                             dist="verl", params=("global_steps", "mode"))
ROLLOUT_LOAD = PatchTarget(module="verl.workers.rollout.vllm_rollout.utils",
                           attribute="vLLMColocateWorkerExtension._update_weights", dist="verl",
                           params=("weights", "peft_config", "base_sync_done"))
CKPT = "actor_rollout_ref.rollout.checkpoint_engine"


@cache  # for this process: detect and apply_config both ask
def transfer_backend() -> str | None:
    """The backend name the backend module registers (read from its source), or None when absent."""
    if importlib.util.find_spec(TRANSFER_MODULE) is None:
        return None
    spec = importlib.util.find_spec(BACKEND_MODULE)
    if spec is None or spec.origin is None:
        return None
    tree = ast.parse(Path(spec.origin).read_text())
    for node in tree.body:
        if (isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "BACKEND" for t in node.targets)
                and isinstance(node.value, ast.Constant)):
            return str(node.value.value)
    return None


class DirectedReshard(Optimization):
    id = "directed_reshard"
    mechanism = "patch"

    def detect(self, host: HostEnv) -> Availability:
        registry = host.check(REGISTRY)
        cfg = host.verl_source("workers/config/rollout.py")
        workers = host.verl_source("workers/engine_workers.py")
        init = (method_source(workers, "ActorRolloutRefWorker", "init_model") if workers else None) or ""
        update = (method_source(workers, "ActorRolloutRefWorker", "update_weights") if workers else None) or ""
        trainer = host.verl_source("trainer/ppo/ray_trainer.py")
        if not registry.found:
            return self.availability(False, registry.detail, [registry])
        if cfg is None or "custom_backend_module" not in class_fields(cfg, "CheckpointEngineConfig") \
                or "custom_backend_module" not in init:
            return self.availability(False, "installed verl does not import a custom checkpoint-engine module",
                                     [registry])
        if "naive" not in update or trainer is None or "checkpoint_manager_class" not in ast.unparse(trainer):
            return self.availability(False, f"installed verl lacks {UPDATE_WEIGHTS.label}'s naive sync or "
                                     "rollout.checkpoint_manager_class", [registry])
        backend = transfer_backend()
        if backend is None:
            return self.availability(False, f"unavailable: {TRANSFER_MODULE} or {BACKEND_MODULE} is missing",
                                     [registry])
        extension = host.verl_source("workers/rollout/vllm_rollout/utils.py")  # read, not imported: it needs vLLM
        owner, method = ROLLOUT_LOAD.attribute.split(".")
        if extension is None or not method_source(extension, owner, method):
            return self.availability(False, f"installed verl lacks {ROLLOUT_LOAD.label}", [registry])
        for target in (UPDATE_WEIGHTS, ROLLOUT_LOAD):  # the replacements take the originals' arguments
            try:
                in_source(target)
            except PatchTargetMissing as exc:
                return self.availability(False, str(exc), [registry])
        return self.availability(True, f"checkpoint-engine backend {backend!r} from {BACKEND_MODULE} (transfer: "
                                 f"{TRANSFER_MODULE}); untested on NPU", [registry])

    def apply_config(self, ctx: ApplyContext) -> str:
        backend = transfer_backend()
        plan = ctx.plan
        ctx.overrides.set(f"{CKPT}.backend", backend)
        ctx.overrides.set(f"{CKPT}.custom_backend_module", BACKEND_MODULE)
        ctx.overrides.set("actor_rollout_ref.rollout.checkpoint_manager_class",
                          f"{BACKEND_MODULE}.DirectedCheckpointManager", add=True)
        kwargs = f"{CKPT}.engine_kwargs.{backend}"
        ctx.overrides.set(f"{kwargs}.model", plan.scenario.model, add=True)
        ctx.overrides.set(f"{kwargs}.layout", plan.layout.model_dump_json(), add=True)
        ctx.overrides.set(f"{kwargs}.devices", plan.predictions.devices, add=True)
        ctx.request_patch(self.id)
        return f"checkpoint_engine.backend={backend} from {BACKEND_MODULE}"

    def apply_in_worker(self) -> WorkerPatchResult:
        from executor.npu_opt.patching import install

        owner, _ = REGISTRY.resolve()
        from executor.reshard.vllm_blocks import block_aware_update_weights

        module = importlib.import_module(BACKEND_MODULE)
        result = install(self.id, [(UPDATE_WEIGHTS, module.colocated_update_weights),
                                   (ROLLOUT_LOAD, block_aware_update_weights)])
        backends = sorted(owner._registry)
        return WorkerPatchResult(id=self.id, applied=[REGISTRY.label, *result.applied], pending=result.pending,
                                 detail=f"registered checkpoint-engine backends: {', '.join(backends)}")


OPTIMIZATION = DirectedReshard()
