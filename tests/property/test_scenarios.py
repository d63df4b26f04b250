"""Generated scenarios, valid and broken, through `twin simulate` and `twin plan --keep-layout`."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import yaml
from hypothesis import event, given, settings
from hypothesis import strategies as st

REPO = Path(__file__).resolve().parents[2]
BASE = yaml.safe_load((REPO / "scenarios" / "cpu-tiny-grpo.yaml").read_text())

PATHS = [
    "cluster.cards", "cluster.kind", "workload.global_batch", "workload.n", "workload.mini_batch",
    "workload.ppo_epochs", "workload.prompt_len.mean", "workload.prompt_len.max", "workload.response_len.mean",
    "workload.response_len.max", "workload.response_len.dist", "workload.response_len.sigma", "seed", "name",
    "model", "optimizations", "layout.train.micro_batch", "layout.train.log_prob_micro_batch", "layout.rollout.dp",
    "layout.rollout.tp", "layout.rollout.max_num_seqs", "layout.rollout.gpu_memory_utilization", "schema",
    "measured.step_s",
]
PLAUSIBLE = st.one_of(st.integers(1, 64), st.integers(1, 8), st.floats(1.0, 64.0))
BROKEN = st.one_of(
    st.sampled_from([0, -1, 1, 2, 3, 16, 2**31, 2**63, 10**9, 0.5, -0.5, 1e300, "", "../x", "a/b", "lognormal",
                     "fixed", "empirical", "cpu", "a3", ["graph_mode", "graph_mode"], [], None, True]),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=6),
)
VALUES = st.one_of(PLAUSIBLE, PLAUSIBLE, BROKEN)


def _put(raw: dict, dotted: str, value) -> None:
    *parents, leaf = dotted.split(".")
    for key in parents:
        raw = raw.setdefault(key, {}) if isinstance(raw.get(key, {}), dict) else {}
    raw[leaf] = value


scenarios = st.lists(st.tuples(st.sampled_from(PATHS), VALUES), min_size=1, max_size=2).map(
    lambda edits: [edits, copy.deepcopy(BASE)])


@settings(max_examples=60)
@given(scenarios, st.sampled_from(["simulate", "analytical", "plan"]))
def test_generated_scenario(cli, work, case, command) -> None:
    edits, raw = case
    for path, value in edits:
        _put(raw, path, value)
    src = work / f"sc-{abs(hash(json.dumps(edits, default=str)))}.yaml"
    src.write_text(yaml.safe_dump(raw))
    if command == "plan":
        out = src.with_suffix(".plan.json")
        outcome = cli("twin", "plan", "--scenario", src, "--keep-layout", "-o", out, "--json", inputs=[src])
    else:
        extra = ["--analytical"] if command == "analytical" else []
        outcome = cli("twin", "simulate", src, "--json", *extra, inputs=[src])
    event("accepted" if outcome.code == 0 else f"refused: {outcome.stderr.split(':')[-1].strip()[:40]}")
    if outcome.code == 0:
        result = json.loads(outcome.stdout)
        pred = result.get("predictions", result)
        assert math.isfinite(pred["step_s"]) and pred["step_s"] > 0
        assert all(math.isfinite(v) and v >= 0 for v in pred["stages_s"].values())
