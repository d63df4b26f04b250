"""chunked_prefill: prefill in chunks of max_num_batched_tokens (1024 in the recipes) mixed with decode.

verl's rollout config carries both engine arguments and passes them to vLLM
(workers/rollout/vllm_rollout/vllm_async_server.py, vLLMHttpServer.launch_server).
"""

from __future__ import annotations

from executor.npu_opt.base import ApplyContext, Availability, Optimization
from executor.npu_opt.host import HostEnv, class_fields, method_source


class ChunkedPrefill(Optimization):
    id = "chunked_prefill"
    mechanism = "config"

    def detect(self, host: HostEnv) -> Availability:
        cfg = host.verl_source("workers/config/rollout.py")
        server = host.verl_source("workers/rollout/vllm_rollout/vllm_async_server.py")
        fields = class_fields(cfg, "RolloutConfig") if cfg else set()
        launch = (method_source(server, "vLLMHttpServer", "launch_server") if server else None) or ""
        if not {"enable_chunked_prefill", "max_num_batched_tokens"} <= fields or "enable_chunked_prefill" not in launch:
            return self.availability(False, "installed verl does not pass enable_chunked_prefill to vLLM")
        where = "" if host.has("vllm") else "; vllm not installed on this host"
        return self.availability(True, f"verl rollout config passes both engine arguments to vLLM{where}")

    def apply_config(self, ctx: ApplyContext) -> str:
        tokens = ctx.plan.layout.rollout.max_num_batched_tokens
        ctx.overrides.set("actor_rollout_ref.rollout.enable_chunked_prefill", True)
        ctx.overrides.set("actor_rollout_ref.rollout.max_num_batched_tokens", tokens)
        return f"enable_chunked_prefill=True, max_num_batched_tokens={tokens}"


OPTIMIZATION = ChunkedPrefill()
