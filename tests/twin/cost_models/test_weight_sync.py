"""The weight sync of a disaggregated run (twin/cost_models/weight_sync.py), with hand-derived numbers."""

from pathlib import Path

import numpy as np
import pytest

from twin.cost_models.comm import collective_time, host_copy_time
from twin.cost_models.export import hf_tensor_count
from twin.cost_models.static import tensor_table
from twin.cost_models.weight_sync import (
    CHECKPOINT_BUCKET_BYTES,
    RECIPE_BUCKET_BYTES,
    SyncTensors,
    _buckets,
    double_buffered,
    load_call_s,
    recipe_checkpoint_engine,
    sync_tensors,
)
from twin.disaggregated import SyncEvaluation
from twin.errors import TwinError
from twin.evaluate import Evaluation
from twin.profile import reference_profile
from twin.scenario import RECIPE_ENGINE, load_scenario

SCENARIOS = Path(__file__).resolve().parents[3] / "scenarios"
C9_30B = SCENARIOS / "c9-qwen3-30b-a3b-h20-16-16-checkpoint-engine.yaml"
C9_7B = SCENARIOS / "c9-qwen25-math-7b-h20-4-4-per-tensor.yaml"


def test_the_double_buffered_pipeline_is_bound_by_its_slowest_stage():
    # equal stages: the first bucket passes all three (3 s), each other adds one stage time
    assert double_buffered(np.ones(3), np.ones(3), np.ones(3)) == 5.0
    # broadcast-bound: the first fill, four broadcasts back to back, the last load: 1 + 4 x 3 + 1
    assert double_buffered(np.ones(4), np.full(4, 3.0), np.ones(4)) == 14.0
    # load-bound with two receive buffers: bucket k's broadcast waits for bucket k-2's load: 1 + 1 + 4 x 3
    assert double_buffered(np.ones(4), np.ones(4), np.full(4, 3.0)) == 14.0
    assert double_buffered(np.zeros(0), np.zeros(0), np.zeros(0)) == 0.0


def test_buckets_fill_in_order_and_a_big_tensor_takes_one_of_its_own():
    gib = 2**30
    assert 2 * gib == CHECKPOINT_BUCKET_BYTES  # verl's update_weights_bucket_megabytes: 2048
    assert _buckets(np.array([gib, gib, gib, 3 * gib, 1.0])).tolist() == [0, 0, 1, 2, 3]


def test_qwen25_7b_yields_339_tensors_and_its_load_call_costs_the_call_alone():
    # 28 layers of q, k, v (weights and biases), o, gate, up, down and two norms = 12; the embedding, final norm, head
    ev = SyncEvaluation(load_scenario(C9_7B), reference_profile("h20"))
    table = tensor_table(ev.inv)
    assert hf_tensor_count(table) == 28 * 12 + 3 == 339
    assert load_call_s(table, ev.profile) == pytest.approx(300e-6, rel=1e-12)  # a dense model maps no experts


def _core_engine(path: Path) -> SyncEvaluation:
    """The scenario with verl unset: verl 0.9.1's core checkpoint engine, what the profiles were fitted on."""
    sc = load_scenario(path)
    return SyncEvaluation(sc.model_copy(update={"software": sc.software.model_copy(update={"verl": None})}),
                          reference_profile("h20"))


def test_qwen3_30b_syncs_18867_tensors_in_29_buckets_broadcast_from_trainer_rank_0():
    ev = _core_engine(C9_30B)
    table = tensor_table(ev.inv)
    # 48 layers of 9 non-expert tensors and 128 experts x 3 projections; the embedding, final norm, head
    assert hf_tensor_count(table) == 48 * (9 + 128 * 3) + 3 == 18_867
    # a call also rebuilds the expert mapping of 3 x 128 entries: 300 us + 384 x 1.5 us
    assert load_call_s(table, ev.profile) == pytest.approx(300e-6 + 384 * 1.5e-6, rel=1e-12)
    ts = sync_tensors(table, ev.layout.train, 16, ev.cluster, ev.profile)
    total = float(ts.nbytes.sum())
    assert total == pytest.approx(float((table.numel * table.dtype_bytes).sum()), rel=1e-12)  # every byte once
    t = ev.time("checkpoint_engine")
    assert (t.tensors, t.broadcasts) == (18_867, 29)  # 61.1 GB in 2 GiB buckets: 28.4, packed tensor by tensor
    # each bucket goes from trainer rank 0, alone of the group on its node, to the 16 rollout ranks on the next two
    # nodes: over IB (the receiving nodes' NVLink legs ride inside NCCL's pipelined broadcast)
    buckets = np.bincount(_buckets(ts.nbytes), weights=ts.nbytes)
    group = [0, *range(16, 32)]
    assert t.broadcast_s == pytest.approx(sum(collective_time(ev.cluster, ev.profile, group, "broadcast", b)
                                              for b in buckets), rel=1e-12)
    assert [u.tier for u in ev.cluster.tiers(group)] == ["ib"]


def test_per_tensor_sync_is_bound_by_one_load_call_per_tensor_on_an_moe_model():
    ev = SyncEvaluation(load_scenario(SCENARIOS / "c9-qwen3-30b-a3b-h20-16-16-per-tensor.yaml"),
                        reference_profile("h20"))
    t = ev.time()
    # every one of the 18,867 entries: 63 us + its expert-mapping scan (an expert's halfway through the 384
    # entries, 192 x 100 ns; the 435 others all of it) + the call, 876 us
    expected_load = 18_867 * (63e-6 + 876e-6) + (18_432 * 192 + 435 * 384) * 100e-9
    assert t.load_s == pytest.approx(expected_load, rel=1e-9)
    assert t.broadcasts == t.tensors == 18_867
    assert t.seconds > t.load_s and t.seconds > ev.time("checkpoint_engine").seconds


def test_the_floor_is_the_models_bytes_over_the_fastest_link():
    ev = SyncEvaluation(load_scenario(SCENARIOS / "c9-qwen25-math-7b-h20-4-4-checkpoint-engine.yaml"),
                        reference_profile("h20"))
    nbytes = float((tensor_table(ev.inv).numel * 2).sum())
    assert ev.floor_s() == pytest.approx(nbytes / 450e9, rel=1e-12)  # H20 NVLink, per direction
    assert ev.sc.measured.stages_s["weight_sync"] < ev.floor_s()  # C9's 0.02 s: below it


def test_a_colocated_scenario_has_no_disaggregated_sync_and_a_separate_one_no_step():
    with pytest.raises(TwinError, match="colocated"):
        SyncEvaluation(load_scenario(SCENARIOS / "c1-dsr1-a3-128.yaml"))
    with pytest.raises(TwinError, match="twin weight-sync"):
        Evaluation(load_scenario(C9_30B))


def test_an_fsdp_trainer_gathers_each_fp32_parameter_over_all_its_ranks():
    from twin.cost_models.weight_sync import _gather_seconds
    from twin.layout.models import TrainLayout

    sc = load_scenario(C9_7B)
    fsdp = sc.model_copy(update={"layout": sc.layout.model_copy(update={"train": TrainLayout(engine="fsdp")})})
    ev = SyncEvaluation(fsdp, reference_profile("h20"))
    table = tensor_table(ev.inv)
    gathers = _gather_seconds(table, ev.layout.train, 4, ev.cluster, ev.profile)
    expected = [collective_time(ev.cluster, ev.profile, [0, 1, 2, 3], "all_gather", 4.0 * n) for n in table.numel]
    assert gathers.tolist() == pytest.approx(expected, rel=1e-12)
    assert ev.time().export_s == pytest.approx(gathers.sum(), rel=1e-12)  # no object collectives, no conversion


def test_verl_07s_recipe_engine_sends_each_ranks_buckets_in_rounds_one_after_another():
    # 5 tensors of 3, 1, 2, 2, 1 GiB over 2 trainer ranks, by index: rank 0 holds 3 + 2 + 1 (tensors 0, 2, 4), rank 1
    # 1 + 2 (1, 3). In 4 GiB buckets, in order: rank 0 [3] [2 + 1], rank 1 [1 + 2]: round 0 sends rank 0's 3 GiB and
    # rank 1's 3 GiB, round 1 rank 0's last 3 GiB: three broadcasts of 3 GiB, two copies to the device of 3 GiB (one a
    # round, the ranks in parallel), one copy to host of rank 0's 6 GiB, every load after its broadcast
    ev = SyncEvaluation(load_scenario(C9_30B), reference_profile("h20"))
    gib = 2**30
    assert 4 * gib == RECIPE_BUCKET_BYTES  # the recipe's device_buffer_size_M: 4096
    ts = SyncTensors(nbytes=np.array([3, 1, 2, 2, 1]) * float(gib), export_s=np.array([0.5, 0.1, 0.2, 0.2, 0.1]),
                     load_s=np.array([0.03, 0.01, 0.02, 0.02, 0.01]))
    table = tensor_table(ev.inv)
    group = [0, 1, 2]  # both trainer ranks and the rollout rank
    t = recipe_checkpoint_engine(ts, table, 2, [2], ev.cluster, ev.profile)
    bcast = collective_time(ev.cluster, ev.profile, group, "broadcast", 3.0 * gib)
    copy3, copy6 = (host_copy_time(ev.cluster, ev.profile, k * float(gib)) for k in (3, 6))
    assert (t.broadcasts, t.tensors) == (3, 5)
    assert t.export_s == pytest.approx(1.1 + copy6, rel=1e-12)
    assert t.broadcast_s == pytest.approx(2 * copy3 + 3 * bcast, rel=1e-12)
    assert t.load_s == pytest.approx(0.09 + 3 * load_call_s(table, ev.profile), rel=1e-12)
    assert t.seconds == pytest.approx(t.export_s + t.broadcast_s + t.load_s, rel=1e-12)  # nothing overlapped


def test_c9s_verl_07_runs_the_recipe_engine_and_earlier_verl_has_none():
    sc = load_scenario(C9_30B)
    assert sc.software.verl == "0.7.0.dev" and sc.software.checkpoint_engine == RECIPE_ENGINE
    ev = SyncEvaluation(sc, reference_profile("h20"))
    table = tensor_table(ev.inv)
    ts = sync_tensors(table, ev.layout.train, 16, ev.cluster, ev.profile)
    assert ev.time() == recipe_checkpoint_engine(ts, table, 16, list(range(16, 32)), ev.cluster, ev.profile)
    # 61.1 GB over 16 ranks: 3.8 GB a rank on average, in 4 GiB buckets, so at least 16 broadcasts, not the core
    # engine's 29 of 2 GiB
    assert 16 <= ev.time().broadcasts < _core_engine(C9_30B).time().broadcasts == 29
    assert ev.time("per_tensor") == _core_engine(C9_30B).time("per_tensor")  # the same either way
    with pytest.raises(ValueError, match="no checkpoint engine"):
        sc.software.model_validate({"verl": "0.6.1", "weight_sync": "checkpoint_engine"})
    old = sc.model_copy(update={"software": sc.software.model_validate({"verl": "0.6.1"})})
    ev = SyncEvaluation(old, reference_profile("h20"))
    assert ev.method == "per_tensor" and list(ev.times()) == ["per_tensor"]


def _ablation(model: str) -> tuple[float, float]:
    """(predicted, measured) per-tensor / checkpoint-engine sync time of C9's `model` (the published ablation)."""
    pair = [load_scenario(SCENARIOS / f"c9-{model}-{m}.yaml") for m in ("per-tensor", "checkpoint-engine")]
    predicted = [SyncEvaluation(sc).time().seconds for sc in pair]
    measured = [sc.measured.stages_s["weight_sync"] for sc in pair]
    return predicted[0] / predicted[1], measured[0] / measured[1]


def test_c9_30b_checkpoint_engine_ablation_within_25_percent():
    """Measured 15.76 / 4.38 = 3.60 with verl 0.7's recipe engine (2.75 s, a ratio of 7.3, while the twin ran verl
    0.8's pipelined engine and sent whole broadcasts over one NIC a GPU)."""
    predicted, measured = _ablation("qwen3-30b-a3b-h20-16-16")
    assert predicted == pytest.approx(measured, rel=0.25)


@pytest.mark.xfail(strict=True, reason="58.57 / 23.70 = 2.47 measured, 1.62 predicted: the per-tensor sync's 36,945 "
                                       "broadcasts over 128 ranks lack about 19 s of per-call time (README, C9)")
def test_c9_235b_checkpoint_engine_ablation_within_25_percent():
    predicted, measured = _ablation("qwen3-235b-a22b-h20-64-64")
    assert predicted == pytest.approx(measured, rel=0.25)
