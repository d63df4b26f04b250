"""What a launch consists of: verl's command line, the environment and the optimization reports."""

from __future__ import annotations

import sys

from pydantic import BaseModel

from executor.npu_opt.base import OptReport

VERL_ENTRY = ("-m", "verl.trainer.main_ppo")


class LaunchSpec(BaseModel):
    """A fully built launch: nothing in it depends on the host it is started from."""

    overrides: list[str]
    env: dict[str, str]
    optimizations: list[OptReport] = []
    engines: dict[str, str] = {}  # "train" / "rollout" -> the engine (and version) that runs it

    @property
    def command(self) -> list[str]:
        return [sys.executable, *VERL_ENTRY, *self.overrides]
