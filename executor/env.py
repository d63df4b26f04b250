"""The environment of a run: the Ascend recipes' HCCL/vLLM/allocator variables and the worker hook."""

from __future__ import annotations

from pathlib import Path

from executor.npu_opt.worker_hook_env import (
    HOOK_MODULE,
    PATCHES_ENV,
    REPORT_DIR_ENV,
    ROLLOUT_TIMINGS_ENV,
    SYNC_TIMINGS_ENV,
)
from executor.options import RunPaths

# ../shared/reference/ascend-hardware.md "Environment seen in the A3 RL recipes" (graph-mode variables
# are set by executor/npu_opt/graph_mode.py)
ASCEND_ENV = {
    "HCCL_BUFFSIZE": "300",
    "HCCL_CONNECT_TIMEOUT": "600",
    "HCCL_EXEC_TIMEOUT": "600",
    "VLLM_USE_V1": "1",
    "PYTORCH_NPU_ALLOC_CONF": "expandable_segments:True",
    "CUDA_DEVICE_MAX_CONNECTIONS": "1",
}
A3_ENV = {"VLLM_ENABLE_MC2": "1"}
JEMALLOC = ("/usr/lib/aarch64-linux-gnu/libjemalloc.so.2", "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2",
            "/usr/lib64/libjemalloc.so.2", "/usr/local/lib/libjemalloc.so.2")


def jemalloc() -> str | None:
    """The first jemalloc shared library found on this host (the recipes preload it)."""
    return next((p for p in JEMALLOC if Path(p).is_file()), None)


def ascend_env(kind: str) -> dict[str, str]:
    env = dict(ASCEND_ENV)
    if kind == "a3":
        env.update(A3_ENV)
    lib = jemalloc()
    if lib is not None:
        env["LD_PRELOAD"] = lib
    return env


def hook_env(patches: list[str], paths: RunPaths, external: str | None = None) -> dict[str, str]:
    """Variables that load the worker hook in every verl process, tell it what to patch, and say where the run's
    workers write their reports, their weight syncs' timings and their rollouts' prompt timings."""
    modules = ",".join(m for m in (external, HOOK_MODULE) if m)
    return {"VERL_USE_EXTERNAL_MODULES": modules, PATCHES_ENV: ",".join(patches),
            REPORT_DIR_ENV: str(paths.patch_reports), SYNC_TIMINGS_ENV: str(paths.sync_timings),
            ROLLOUT_TIMINGS_ENV: str(paths.rollout_timings)}
