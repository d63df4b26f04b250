"""Names shared by the driver (which sets them) and the worker hook (which reads them)."""

HOOK_MODULE = "executor.npu_opt.worker_hook"
PATCHES_ENV = "EXECUTOR_NPU_PATCHES"
REPORT_DIR_ENV = "EXECUTOR_PATCH_REPORT_DIR"
