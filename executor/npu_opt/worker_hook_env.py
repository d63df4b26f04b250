"""Names shared by the driver (which sets them) and the run's worker processes (which read them), and how a worker
appends a record to the directory one of them names."""

import json
import os
import socket
from typing import Any

HOOK_MODULE = "executor.npu_opt.worker_hook"
PATCHES_ENV = "EXECUTOR_NPU_PATCHES"
REPORT_DIR_ENV = "EXECUTOR_PATCH_REPORT_DIR"
SYNC_TIMINGS_ENV = "EXECUTOR_SYNC_TIMINGS_DIR"  # where the directed reshard backend times each weight sync
ROLLOUT_TIMINGS_ENV = "EXECUTOR_ROLLOUT_TIMINGS_DIR"  # where the agent-loop workers time each prompt group


def append_line(env_name: str, row: dict[str, Any]) -> None:
    """Append `row` as a JSON line to this process's file (<host>-<pid>.jsonl) in the directory the variable
    `env_name` names; nothing where it is unset. One write of one line: an interrupted run leaves whole lines."""
    directory = os.environ.get(env_name)
    if not directory:
        return
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, f"{socket.gethostname()}-{os.getpid()}.jsonl"), "a") as out:
        out.write(json.dumps(row) + "\n")
