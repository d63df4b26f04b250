"""Names shared by the driver (which sets them) and the run's worker processes (which read them)."""

HOOK_MODULE = "executor.npu_opt.worker_hook"
PATCHES_ENV = "EXECUTOR_NPU_PATCHES"
REPORT_DIR_ENV = "EXECUTOR_PATCH_REPORT_DIR"
SYNC_TIMINGS_ENV = "EXECUTOR_SYNC_TIMINGS_DIR"  # where the directed reshard backend times each weight sync
ROLLOUT_TIMINGS_ENV = "EXECUTOR_ROLLOUT_TIMINGS_DIR"  # where the agent-loop workers time each prompt group
