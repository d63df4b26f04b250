"""Host copies and cache releases around the training passes (hand-derived from the memory model)."""

from pathlib import Path

import pytest

from twin.cost_models.comm import host_copy_time
from twin.cost_models.transition import offload_moments
from twin.evaluate import Evaluation
from twin.profile import reference_profile
from twin.scenario import load_scenario

SCENARIOS = Path(__file__).resolve().parents[3] / "scenarios"


def test_ref_pass_and_update_end_by_releasing_what_they_offloaded_and_their_activation_cache():
    """C1 (param and grad offload, swap optimizer): the ref pass offloads its bf16 weights and empty_cache returns
    them with its cached activations; update_actor offloads the fp32 grads and returns them with its activations,
    at the measured 26 GB per 4 s (0.154 s/GB)."""
    ev = Evaluation(load_scenario(SCENARIOS / "c1-dsr1-a3-128.yaml"), reference_profile("a3"))
    tm, pf = ev.train_memory, ev.profile
    assert pf["empty_cache_s_per_gb"] == 0.154
    stage = max(range(tm.n_stages), key=tm.weight_bytes)
    moments = offload_moments(tm, ev.rollout_memory, ev.sc, ev.cluster, pf)
    ref, grads = tm.weight_bytes(stage), tm.grads_bytes(stage)
    ref_release = (ref + tm.log_prob_activation_bytes(stage)) / 1e9 * 0.154
    assert moments["ref_offload"] == pytest.approx(host_copy_time(ev.cluster, pf, ref) + ref_release, rel=1e-12)
    update_release = (grads + tm.update_activation_bytes(stage)) / 1e9 * 0.154
    assert moments["after_update"] == pytest.approx(host_copy_time(ev.cluster, pf, grads) + update_release, rel=1e-12)
    assert moments["ref_onload"] == pytest.approx(host_copy_time(ev.cluster, pf, ref), rel=1e-12)  # nothing to free


def test_without_a_reference_pass_nothing_is_released_after_it():
    sc = load_scenario(SCENARIOS / "c1-dsr1-a3-128.yaml")
    sc = sc.model_copy(update={"workload": sc.workload.model_copy(update={"use_kl_loss": False})})
    ev = Evaluation(sc, reference_profile("a3"))
    assert offload_moments(ev.train_memory, ev.rollout_memory, sc, ev.cluster, ev.profile)["ref_offload"] == 0.0
