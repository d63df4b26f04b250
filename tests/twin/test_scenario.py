"""Scenario rules that tie fields together (twin/scenario.py)."""

from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from twin.errors import TwinError
from twin.evaluate import Evaluation
from twin.scenario import Scenario, load_scenario

ROOT = Path(__file__).resolve().parents[2]
C9 = ROOT / "scenarios" / "c9-qwen3-30b-a3b-h20-16-16-per-tensor.yaml"


def test_a_separate_placement_measures_its_weight_sync_only():
    raw = yaml.safe_load(C9.read_text())
    assert Scenario.model_validate(raw).layout.placement == "separate"
    for extra, named in (({"step_s": 100.0}, "step_s"), ({"stages_s": {"weight_sync": 15.76, "rollout": 9.0}},
                                                           "stages_s.rollout")):
        bad = {**raw, "measured": {**raw["measured"], **extra}}
        with pytest.raises(ValidationError, match=f"not {named}"):
            Scenario.model_validate(bad)
    colocated = {**raw, "layout": {**raw["layout"], "placement": "colocated"}}
    with pytest.raises(ValidationError, match="'weight_sync' is not a stage the twin predicts"):  # its sync: reshard
        Scenario.model_validate(colocated)
    unmeasured = {k: v for k, v in colocated.items() if k != "measured"}
    assert Scenario.model_validate(unmeasured).layout.placement == "colocated"  # validated as a layout later


def test_a_mindspeed_rl_run_names_no_verl_version():
    raw = yaml.safe_load(C9.read_text())
    ok = Scenario.model_validate({**raw, "software": {"framework": "mindspeed_rl"}})
    assert ok.software.parallel_pull and not Scenario.model_validate(raw).software.parallel_pull
    with pytest.raises(ValidationError, match=r"framework mindspeed_rl runs without verl: drop verl 0\.9\.1"):
        Scenario.model_validate({**raw, "software": {"framework": "mindspeed_rl", "verl": "0.9.1"}})
    with pytest.raises(ValidationError, match="framework"):
        Scenario.model_validate({**raw, "software": {"framework": "openrlhf"}})


@pytest.mark.parametrize(("verl", "puts_once"), [("0.5.0", False), ("0.6.0", True), ("0.9.1", True), (None, False)])
def test_verl_puts_a_calls_inputs_once_from_0_6(verl, puts_once):
    from twin.scenario import Software

    assert Software(verl=verl).puts_inputs_once is puts_once


@pytest.mark.parametrize(("rounds", "message"), [(float("inf"), "Input should be a finite number"),
                                                 (1e300, "Input should be less than or equal to 100")])
def test_dapo_rounds_are_finite_and_bounded(tmp_path, rounds, message):
    raw = yaml.safe_load((ROOT / "scenarios" / "cpu-tiny-grpo.yaml").read_text())
    raw["workload"]["gen_rounds"] = rounds
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(TwinError, match=f"field 'workload.gen_rounds': {message}"):
        load_scenario(path)


def test_a_measured_stage_must_be_one_the_twin_predicts(tmp_path):
    raw = yaml.safe_load((ROOT / "scenarios" / "cpu-tiny-grpo.yaml").read_text())
    raw["measured"] = {"stages_s": {"rollout": 1.0, "generation": 2.0}}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(TwinError, match=r"measured\.stages_s: 'generation' is not a stage the twin predicts"):
        load_scenario(path)


def test_balance_batch_is_verls_option_only():
    raw = yaml.safe_load(C9.read_text())
    train = {**raw["layout"]["train"], "balance_batch": False}
    stated = {**raw, "layout": {**raw["layout"], "train": train}}
    assert Scenario.model_validate(stated).layout.train.balance_batch is False
    with pytest.raises(ValidationError, match="balance_batch is verl's trainer option; framework mindspeed_rl"):
        Scenario.model_validate({**stated, "software": {"framework": "mindspeed_rl"}})


DERIVED = [p for p in sorted((ROOT / "scenarios").glob("*.yaml"))
           if (m := load_scenario(p).measured) is not None and m.lengths == "derived" and m.step_s and m.tps_per_device]


@pytest.mark.parametrize("path", DERIVED, ids=lambda p: p.stem)
def test_derived_lengths_are_the_runs_own_tokens_per_sequence(path):
    """A case whose lengths are `derived` states mean prompt + response = tokens/s per device x step x devices /
    sequences (verl's throughput counts both, over the step's responses), within the 0.1 token it is written to
    (some cases cut the last digit, some round it)."""
    sc = load_scenario(path)
    wl, m = sc.workload, sc.measured
    assert m.tps_tokens == "mean"
    per_sequence = m.tps_per_device * m.step_s * Evaluation(sc).devices / wl.responses
    assert wl.prompt_len.mean + wl.response_len.mean == pytest.approx(per_sequence, abs=0.1)
