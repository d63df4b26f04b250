"""The compute floors of the training passes, derived by hand from the model's config and the device's datasheet."""

from __future__ import annotations

from pathlib import Path

import pytest

from calibration.targets import case_targets, floor_of
from twin.cost_models.floors import training_floors_s
from twin.disaggregated import is_separate
from twin.evaluate import Evaluation
from twin.scenario import load_scenario

SCENARIOS = Path(__file__).resolve().parents[3] / "scenarios"
C8_16 = SCENARIOS / "c8-dapo-qwen25-math-7b-h20-16-fsdp.yaml"


def test_qwen25_7b_floor_on_16_h20_by_hand():
    # Qwen2.5-7B: hidden 3584, intermediate 18944, 28 layers, 28 query heads of 128 (4 KV heads), vocabulary 152064,
    # head untied. Weights used per token: per layer q and o 3584^2 each, k and v 3584 x 512 each, gate, up and down
    # 3584 x 18944 each; the head 152064 x 3584 (the embedding is looked up)
    layer = 2 * 3584 * 3584 + 2 * 3584 * 512 + 3 * 3584 * 18944
    gemm_per_token = 2 * (28 * layer + 152064 * 3584)
    pair = 2 * 28 * (128 + 128)  # scores and values per query-key pair in one layer
    sc = load_scenario(C8_16)
    wl = sc.workload
    sequences, mean = 512 * 12, 150 + 1300
    assert (wl.global_batch * wl.n, wl.prompt_len.mean + wl.response_len.mean) == (sequences, mean)
    forward = sequences * mean * gemm_per_token + 28 * pair * sequences * mean * mean / 2
    forward_s = forward / (148e12 * 16)  # H20 dense BF16 peak (datasheet), 16 GPUs
    floors = training_floors_s(Evaluation(sc))
    assert floors["old_log_prob"] == pytest.approx(forward_s, rel=1e-12)
    assert floors["ref"] == floors["old_log_prob"]
    assert floors["update"] == pytest.approx(3 * forward_s, rel=1e-12)  # forward and a backward of two GEMMs each
    assert floors["old_log_prob"] == pytest.approx(54.29, abs=0.01)


def test_the_update_floor_counts_every_ppo_epoch():
    sc = load_scenario(C8_16)
    twice = sc.model_copy(update={"workload": sc.workload.model_copy(update={"ppo_epochs": 2})})
    one, two = training_floors_s(Evaluation(sc)), training_floors_s(Evaluation(twice))
    assert two["update"] == pytest.approx(2 * one["update"]) and two["old_log_prob"] == one["old_log_prob"]


def test_the_response_mean_assumed_before_was_below_the_published_log_prob_pass():
    """At 2500 tokens (the assumption until 2026-12-02) 6144 sequences take 100.9 s of forward FLOPs at the 16 GPUs'
    peak, and the published old_log_prob is 88 s: that workload cannot have run."""
    sc = load_scenario(C8_16)
    wl = sc.workload
    old = sc.model_copy(update={"workload": wl.model_copy(update={
        "response_len": wl.response_len.model_copy(update={"mean": 2500})})})
    floor = training_floors_s(Evaluation(old))["old_log_prob"]
    assert floor == pytest.approx(100.88, abs=0.01) and floor > sc.measured.stages_s["old_log_prob"] == 88.0


def test_no_shipped_case_is_measured_below_its_floor():
    """Every published training stage of every scenario is slower than its workload's FLOPs at the devices' peak."""
    cases = [load_scenario(p) for p in sorted(SCENARIOS.glob("*.yaml"))]
    cases = [c for c in cases if c.measured is not None and not is_separate(c)]
    checked = 0
    for t in case_targets(cases):
        sc = next(c for c in cases if c.name == t.case)
        floor = floor_of(t, Evaluation(sc))
        if floor is not None:
            checked += 1
            assert t.goal > floor, f"{t.label}: {t.goal} s measured, floor {floor:.4g} s"
    assert checked >= 10
