"""The launch script `twin plan` writes beside its plan, by the installed executor (the twin never imports it).

`executor command-file PLAN -o PLAN.command.sh --when-told` starts before the search: it imports the executor
and reads verl's source while the twin searches (on another core where there is one), then writes once told the
plan is saved. When no plan is written (no layout fits, an error, an interrupt) its input ends and it exits
without writing.
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console

TIMEOUT_S = 300  # the executor's checks take seconds; a hung one is stopped


def executor_command() -> list[str] | None:
    """How to start the executor installed with this twin: its console script on PATH, else its module under this
    interpreter when it sits beside the twin's package (an environment used without activating it has no
    `executor` on PATH); found, not imported. None when neither is there."""
    exe = shutil.which("executor")
    if exe is not None:
        return [exe]
    spec = importlib.util.find_spec("executor")
    home = Path(__file__).parent.parent  # the directory the twin's package sits in
    beside = spec is not None and spec.origin is not None and Path(spec.origin).parent.parent == home
    return [sys.executable, "-m", "executor"] if beside else None


def command_file_path(plan_path: Path) -> Path:
    """Where the launch script of the plan at `plan_path` goes: beside it, PLAN.command.sh."""
    return plan_path.with_suffix(".command.sh")


class CommandFile:
    """A started `executor command-file --when-told` for the plan about to be saved at `plan_path`."""

    def __init__(self, plan_path: Path) -> None:
        self.plan_path = plan_path
        self.target = command_file_path(plan_path)
        self.told = False
        exe = executor_command()
        self.proc = None if exe is None else subprocess.Popen(
            [*exe, "command-file", str(plan_path), "-o", str(self.target), "--when-told"], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def tell(self) -> None:
        """Say the plan is saved: the executor writes beside it while the twin prints its tables."""
        if self.proc is not None and self.proc.stdin is not None and not self.told:
            self.told = True
            try:
                self.proc.stdin.write("write\n")
                self.proc.stdin.flush()  # communicate() in `report` closes it
            except BrokenPipeError:  # it already stopped: `report` says why
                pass

    def report(self, notes: Console) -> None:
        """Wait for the executor (telling it first if not yet); say in one line on `notes` what it wrote, or why
        nothing."""
        if self.proc is None:
            notes.print("executor is not installed: no command file written")
            return
        self.tell()
        try:
            out, err = self.proc.communicate(timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.communicate()
            out, err = "", f"the executor did not finish in {TIMEOUT_S} s"
        if self.proc.returncode:
            lines = (err or out).strip().splitlines()
            notes.print(f"no command file: {lines[-1] if lines else f'executor exited {self.proc.returncode}'}",
                        markup=False)
            return
        notes.print(f"wrote {self.target} (what `executor run {self.plan_path}` launches)")

    def close(self) -> None:
        """Stop the executor if it was not told to write (it writes nothing before it is)."""
        if self.proc is not None and not self.told and self.proc.returncode is None:
            self.proc.terminate()
            self.proc.communicate()


@contextmanager
def command_file_for(plan_path: Path) -> Iterator[CommandFile]:
    """A `CommandFile` started now and closed on leaving (written only where `write` was called)."""
    started = CommandFile(plan_path)
    try:
        yield started
    finally:
        started.close()
