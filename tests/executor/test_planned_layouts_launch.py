"""What the planner chooses, the executor launches: the best plan of a search builds verl's launch (the layout
rules of verl's launcher and of the kind's Megatron flavour are the planner's too)."""

from __future__ import annotations

from pathlib import Path

import pytest

from executor.npu_opt.host import HostEnv
from executor.options import LaunchOptions
from executor.targets import target_for
from twin.planner import Planner, default_scenario, search


@pytest.mark.parametrize(("model", "kind", "cards"), [
    ("moonlight-16b-a3b", "a2", 8),  # chose a half-node DP rollout replica, which verl's vLLM server refuses
    ("qwen3-30b-a3b", "h20", 16),  # chose MindSpeed's swap optimizer on a megatron-core kind
    ("deepseek-v3", "h20", 96),  # chose MindSpeed's tp-extend-ep there
    ("qwen3-30b-a3b", "a3", 8),
])
def test_the_best_plan_builds_its_launch(model: str, kind: str, cards: int, tmp_path: Path) -> None:
    plan = search(Planner(default_scenario(model, kind, cards)), top=1).plan
    assert plan is not None
    spec = target_for(kind).build(plan, LaunchOptions(workdir=tmp_path), HostEnv())
    assert spec.overrides
