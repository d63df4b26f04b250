"""math_reward: the recipes' MATH reward as verl's custom reward function (executor/reward.py)."""

from __future__ import annotations

import ast
from pathlib import Path

from executor.npu_opt.base import ApplyContext, Availability, Optimization
from executor.npu_opt.host import HostEnv

REWARD_FILE = Path(__file__).resolve().parent.parent / "reward.py"
REWARD_FUNCTION = "compute_score"


def _defines(path: Path, name: str) -> bool:
    tree = ast.parse(path.read_text(), filename=str(path))
    return any(isinstance(n, ast.FunctionDef) and n.name == name for n in tree.body)


class MathReward(Optimization):
    id = "math_reward"
    mechanism = "config"

    def detect(self, host: HostEnv) -> Availability:
        if not REWARD_FILE.is_file():
            return self.availability(False, f"unavailable: {REWARD_FILE} not present")
        if not _defines(REWARD_FILE, REWARD_FUNCTION):
            return self.availability(False, f"unavailable: {REWARD_FILE} defines no {REWARD_FUNCTION}()")
        if not host.has("math-verify"):
            return self.availability(False, "unavailable: math-verify not installed")
        return self.availability(True, f"reward.custom_reward_function -> {REWARD_FILE.name}::{REWARD_FUNCTION}")

    def apply_config(self, ctx: ApplyContext) -> str:
        ctx.overrides.set("reward.custom_reward_function.path", str(REWARD_FILE))
        ctx.overrides.set("reward.custom_reward_function.name", REWARD_FUNCTION)
        return f"custom_reward_function={REWARD_FILE}::{REWARD_FUNCTION}"


OPTIMIZATION = MathReward()
