"""no_sleep_mode: vLLM sleep/wake_up replaced by explicit weight offload/onload and KV-cache free/init.

Config: `rollout.enable_sleep_mode=False` keeps vLLM-Ascend's CaMem pool (which on multi-node NPU did not
release memory, and would own weights that must be offloaded by hand) out of the way, while
`free_cache_engine=True` keeps verl calling sleep/wake_up at every transition. Patch: the vLLM-Ascend
worker's `sleep` moves the model's parameters to host memory and drops the KV cache; `wake_up(tags)` moves
the weights back ("weights") or allocates the KV cache again from its saved config ("kv_cache"), and
recaptures the decode graphs when graph mode is on (their buffers moved). verl reaches every DP engine
core through `engine.sleep/wake_up`, so the patch sits on the worker, not on verl's server.
"""

from __future__ import annotations

from collections.abc import Callable

from executor.npu_opt.base import (
    ApplyContext,
    Availability,
    Optimization,
    PatchTarget,
    PatchTargetMissing,
    WorkerPatchResult,
)
from executor.npu_opt.host import HostEnv
from executor.npu_opt.patching import install

SLEEP = PatchTarget(module="vllm_ascend.worker.worker", attribute="NPUWorker.sleep", dist="vllm-ascend")
WAKE_UP = PatchTarget(module="vllm_ascend.worker.worker", attribute="NPUWorker.wake_up", dist="vllm-ascend")
RUNNER_ATTRS = ("model", "kv_caches", "kv_cache_config", "initialize_kv_cache", "capture_model")


def _runner(worker):
    runner = getattr(worker, "model_runner", None)
    missing = [a for a in RUNNER_ATTRS if not hasattr(runner, a)]
    if runner is None or missing:
        raise PatchTargetMissing(f"no_sleep_mode: NPUWorker.model_runner lacks {missing or ['model_runner']} in "
                                 "the installed vLLM-Ascend")
    return runner


def _move_weights(model, device) -> None:
    for tensor in (*model.parameters(), *model.buffers()):
        tensor.data = tensor.data.to(device, non_blocking=True)


def _drop_kv_cache(worker, runner) -> None:
    import torch

    for layer in worker.vllm_config.compilation_config.static_forward_context.values():
        if hasattr(layer, "kv_cache"):
            layer.kv_cache = [torch.empty(0) for _ in layer.kv_cache]
    runner.kv_caches.clear()


def _sleep(_original: Callable) -> Callable:
    def sleep(self, level: int = 1) -> None:
        import torch

        runner = _runner(self)
        _move_weights(runner.model, "cpu")
        _drop_kv_cache(self, runner)
        torch.npu.synchronize()
        torch.npu.empty_cache()

    return sleep


def _wake_up(_original: Callable) -> Callable:
    def wake_up(self, tags: list[str] | None = None) -> None:
        runner = _runner(self)
        tags = tags or ["weights", "kv_cache"]
        if "weights" in tags:
            _move_weights(runner.model, self.device)
        if "kv_cache" in tags:
            runner.initialize_kv_cache(runner.kv_cache_config)
            if not self.vllm_config.model_config.enforce_eager:
                runner.capture_model()

    return wake_up


class NoSleepMode(Optimization):
    id = "no_sleep_mode"
    mechanism = "patch"
    worker_dists = ("vllm", "vllm-ascend")

    def detect(self, host: HostEnv) -> Availability:
        return self.detect_patch(host, [SLEEP, WAKE_UP])

    def apply_config(self, ctx: ApplyContext) -> str:
        ctx.overrides.set("actor_rollout_ref.rollout.enable_sleep_mode", False, add=True)
        ctx.overrides.set("actor_rollout_ref.rollout.free_cache_engine", True)
        ctx.request_patch(self.id)
        return f"enable_sleep_mode=False; worker hook patches {SLEEP.label}, {WAKE_UP.label}"

    def apply_in_worker(self) -> WorkerPatchResult:
        return install(self.id, [(SLEEP, _sleep), (WAKE_UP, _wake_up)])


OPTIMIZATION = NoSleepMode()
