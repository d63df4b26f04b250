"""late_kv_cache_init: the KV cache is allocated after the reshard and after the training weights leave.

verl 0.9 does this natively in its colocated (`naive`) weight sync,
workers/engine_workers.py ActorRolloutRefWorker.update_weights: resume rollout weights, stream the
actor's weights into vLLM, offload the actor's parameters, barrier, and only then resume the KV cache.
It needs the rollout to release its memory between steps (`rollout.free_cache_engine=True`).
"""

from __future__ import annotations

from executor.npu_opt.base import ApplyContext, Availability, Optimization
from executor.npu_opt.host import HostEnv, method_source


class LateKvCacheInit(Optimization):
    id = "late_kv_cache_init"
    mechanism = "native"

    def detect(self, host: HostEnv) -> Availability:
        tree = host.verl_source("workers/engine_workers.py")
        body = method_source(tree, "ActorRolloutRefWorker", "update_weights") if tree else None
        if body is None:
            return self.availability(False, "ActorRolloutRefWorker.update_weights not found in the installed verl")
        kv = body.find("tags=['kv_cache']")
        offload = body.find("to('cpu'")
        if kv < 0 or offload < 0 or kv < offload:
            return self.availability(False, "installed verl does not resume the KV cache after offloading the actor")
        return self.availability(True, "verl resumes the KV cache after the weight sync and the actor's offload")

    def apply_config(self, ctx: ApplyContext) -> str:
        ctx.overrides.set("actor_rollout_ref.rollout.free_cache_engine", True)
        offloaded = ctx.plan.layout.train.offload.param
        return "rollout.free_cache_engine=True" + ("" if offloaded else " (actor params not offloaded in this plan)")


OPTIMIZATION = LateKvCacheInit()
