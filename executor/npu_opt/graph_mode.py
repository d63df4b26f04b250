"""graph_mode: graph-captured decode on vLLM-Ascend plus the recipes' HCCL / task-queue environment.

verl passes `rollout.enforce_eager` to vLLM; with it False vLLM-Ascend captures ACL graphs (TorchAir in
older releases). The environment is the A3 recipes' (../shared/reference/ascend-hardware.md).
"""

from __future__ import annotations

from executor.npu_opt.base import ApplyContext, Availability, Optimization
from executor.npu_opt.host import HostEnv, class_fields

GRAPH_ENV = {"HCCL_OP_EXPANSION_MODE": "AIV", "TASK_QUEUE_ENABLE": "2", "VLLM_ENABLE_GRAPH_MODE": "1"}


class GraphMode(Optimization):
    id = "graph_mode"
    mechanism = "config"

    def detect(self, host: HostEnv) -> Availability:
        cfg = host.verl_source("workers/config/rollout.py")
        if cfg is None or "enforce_eager" not in class_fields(cfg, "RolloutConfig"):
            return self.availability(False, "installed verl has no rollout.enforce_eager")
        where = "" if host.has("vllm-ascend") else "; graph capture is vLLM-Ascend's, not installed on this host"
        return self.availability(True, f"rollout.enforce_eager=False and the recipes' environment{where}")

    def apply_config(self, ctx: ApplyContext) -> str:
        ctx.overrides.set("actor_rollout_ref.rollout.enforce_eager", False)
        ctx.env.update(GRAPH_ENV)
        return "enforce_eager=False, " + ", ".join(f"{k}={v}" for k, v in GRAPH_ENV.items())


OPTIMIZATION = GraphMode()
