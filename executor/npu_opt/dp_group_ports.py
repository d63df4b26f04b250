"""dp_group_ports: every vLLM data-parallel group gets its own master address and port.

verl 0.9 does this natively: each rollout replica's vLLMHttpServer takes free ports on its own node
(`get_free_port` in __init__) and sets `parallel_config.data_parallel_master_port` and the DP address
before creating its engine (workers/rollout/vllm_rollout/vllm_async_server.py, run_server), which is
what the recipes did by hand with VLLM_DP_MASTER_IP/PORT.
"""

from __future__ import annotations

from executor.npu_opt.base import ApplyContext, Availability, Optimization
from executor.npu_opt.host import HostEnv, method_source

_SERVER = "workers/rollout/vllm_rollout/vllm_async_server.py"


class DpGroupPorts(Optimization):
    id = "dp_group_ports"
    mechanism = "native"

    def detect(self, host: HostEnv) -> Availability:
        tree = host.verl_source(_SERVER)
        init = method_source(tree, "vLLMHttpServer", "__init__") if tree else None
        run = method_source(tree, "vLLMHttpServer", "run_server") if tree else None
        if not init or not run or "_dp_master_port" not in init or "data_parallel_master_port" not in run:
            return self.availability(False, "installed verl does not set a DP master port per vLLM replica")
        where = "" if host.has("vllm") else "; vllm not installed on this host"
        return self.availability(True, f"verl sets data_parallel_master_port per replica{where}")

    def apply_config(self, ctx: ApplyContext) -> str:
        return "nothing to set: per-replica DP master ports are verl's default"


OPTIMIZATION = DpGroupPorts()
