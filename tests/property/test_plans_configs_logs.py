"""Generated plans (edited by hand), model configs and verl logs, valid and broken."""

from __future__ import annotations

import copy
import json
import math
from functools import cache
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

REPO = Path(__file__).resolve().parents[2]
SMALL = st.one_of(st.integers(-3, 300), st.sampled_from([2**63, 10**12, 0.5, float("nan"), "x", None, True, []]))


@cache
def _plan() -> dict:
    from twin.planner import fixed_plan
    from twin.scenario import load_scenario

    return json.loads(fixed_plan(load_scenario(REPO / "scenarios" / "c4-dsr1-reshard-8dies.yaml"))
                      .model_dump_json(by_alias=True))


PLAN_PATHS = ["layout.rollout.dp", "layout.rollout.tp", "layout.rollout.ep", "layout.train.tp", "layout.train.pp",
              "layout.train.ep", "scenario.model", "scenario.cluster.kind", "scenario.cluster.cards",
              "scenario.name", "predictions.devices", "predictions.cards", "optimizations.0.enabled",
              "optimizations.1.id", "schema", "scenario.workload.global_batch"]


def _put(raw, dotted: str, value) -> None:
    *parents, leaf = dotted.split(".")
    for key in parents:
        raw = raw[int(key)] if isinstance(raw, list) else raw.setdefault(key, {})
    if isinstance(raw, list):
        raw[int(leaf)] = value
    else:
        raw[leaf] = value


@pytest.fixture(scope="module")
def no_hydra_check(work):
    """The dry run without its check of the overrides against verl's Hydra config (seconds per call; that
    check has its own tests in tests/executor/test_validate.py). The first build imports the executor's
    optimizations once, outside the cases' time bound."""
    import executor.validate
    from executor.npu_opt.host import HostEnv
    from executor.options import LaunchOptions
    from executor.targets import target_for
    from twin.plan import Plan

    real = executor.validate.validate
    executor.validate.validate = lambda overrides: None
    target_for("a3").build(Plan.model_validate(_plan()), LaunchOptions(workdir=work / "warm"), HostEnv())
    yield
    executor.validate.validate = real


@settings(max_examples=40)
@given(st.lists(st.tuples(st.sampled_from(PLAN_PATHS), st.one_of(SMALL, st.sampled_from(
    ["deepseek-r1", "tiny", "a2", "a3", "../x", "graph_mode"]))), min_size=1, max_size=2), st.booleans())
def test_edited_plan(cli, work, no_hydra_check, edits, both_copies) -> None:
    raw = copy.deepcopy(_plan())
    for path, value in edits:
        _put(raw, path, value)
        if both_copies and path.startswith("layout."):
            _put(raw["scenario"], path, value)
    f = work / "edited-plan.json"
    f.write_text(json.dumps(raw))
    outcome = cli("executor", "run", f, "--dry-run", inputs=[f])
    if outcome.code == 0:  # accepted only when every part agrees with the original plan's
        assert "Command:" in outcome.stdout


CONFIG_KEYS = ["num_attention_heads", "num_key_value_heads", "hidden_size", "num_hidden_layers", "vocab_size",
               "intermediate_size", "head_dim", "max_position_embeddings", "model_type", "torch_dtype"]


@cache
def _config() -> dict:
    return json.loads((REPO / "twin" / "catalog" / "configs" / "tiny.json").read_text())


@settings(max_examples=40)
@given(st.lists(st.tuples(st.sampled_from(CONFIG_KEYS), st.one_of(SMALL, st.integers(-(2**80), 2**80),
                                                                      st.sampled_from(["qwen2", "llama", "4"]))),
                min_size=1, max_size=3), st.integers(1, 8))
def test_generated_config(cli, work, edits, cards) -> None:
    raw = dict(_config())
    for key, value in edits:
        raw[key] = value
    f = work / "config.json"
    f.write_text(json.dumps(raw))
    outcome = cli("twin", "layouts", "--model", f, "--cards", str(cards), "--cluster", "cpu", "--json", inputs=[f])
    if outcome.code == 0:
        assert json.loads(outcome.stdout)["devices"] == cards


METRICS = ["timing_s/gen", "timing_s/step", "timing_s/update_actor", "perf/throughput", "response_length/mean",
           "perf/mfu/actor", "actor/grad_norm"]
VALUE = st.one_of(st.floats(-1e3, 1e6), st.sampled_from([float("nan"), float("inf"), -1.0, 0.0, "1.5", None]))
STEP = st.one_of(st.integers(-3, 20), st.sampled_from([1.5, "2", None]))


@settings(max_examples=40)
@given(st.lists(st.tuples(STEP, st.dictionaries(st.sampled_from(METRICS), VALUE, max_size=4)), max_size=6),
       st.booleans())
def test_generated_log(cli, work, lines, append) -> None:
    log = work / "metrics.jsonl"
    log.write_text("".join(json.dumps({"step": s, "data": d}, allow_nan=True) + "\n" for s, d in lines))
    out = work / "measured.jsonl"
    if not append:
        out.unlink(missing_ok=True)
    outcome = cli("calibration", "ingest", log, "-o", out, *(["--append"] if append else []), inputs=[log])
    if outcome.code == 0:
        for line in out.read_text().splitlines():
            record = json.loads(line)
            assert record["step"] >= 0
            if record["unit"] in ("s", "ms", "tokens", "tokens/s/device"):
                assert math.isfinite(record["value"]) and record["value"] >= 0, record
