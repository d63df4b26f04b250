"""Training passes: how many sequences a replica runs when Ulysses (FSDP) or CP shares them."""

from pathlib import Path

import pytest

from twin.cost_models.scheduling import UPDATE_INPUT_BYTES_PER_TOKEN, dispatch_seconds
from twin.evaluate import Evaluation
from twin.layout.models import TrainLayout
from twin.profile import reference_profile
from twin.scenario import load_scenario

C8_32 = Path(__file__).resolve().parents[3] / "scenarios" / "c8-dapo-qwen25-math-7b-h20-32.yaml"


@pytest.mark.parametrize(("sp", "replicas"), [(1, 32), (2, 16), (4, 8)])
def test_fsdp_ulysses_ranks_share_one_replicas_sequences(sp, replicas):
    # C8 at 32 GPUs: 512 prompts x 16 = 8192 responses; verl's FSDP workers divide the batch over
    # world // ulysses_sequence_parallel_size replicas, each of its SP ranks holding 1/sp of every sequence
    sc = load_scenario(C8_32)
    lay = sc.layout.train.model_copy(update={"cp": sp})
    ev = Evaluation(sc.model_copy(update={"layout": sc.layout.model_copy(update={"train": lay})}))
    assert ev.train_memory.dp == replicas
    assert ev.train_cost.sequences_per_dp_rank() == 8192 / replicas


def test_a_log_prob_pass_with_ulysses_costs_each_gpu_its_share_of_the_tokens():
    # the same sequences over 8 replicas of SP4 or 32 replicas of SP1: every GPU computes 1/32 of the tokens
    # either way, so the pass costs the same up to the SP all-to-alls (none counted in FSDP's compute)
    sc = load_scenario(C8_32)
    times = {}
    for sp in (1, 4):
        lay = sc.layout.train.model_copy(update={"cp": sp, "dynamic_batch_tokens": None, "log_prob_micro_batch": 4})
        ev = Evaluation(sc.model_copy(update={"layout": sc.layout.model_copy(update={"train": lay})}))
        times[sp] = ev.train_cost.microbatch(0, ev.train_cost.sequences_per_dp_rank(), False).compute_s
    assert times[4] == pytest.approx(times[1], rel=0.02)


def test_ray_dispatch_sends_each_ulysses_rank_its_replicas_inputs():
    # 8192 x (150 + 2500) tokens x 48 B over 8 replicas = 0.130 GB to each of the 32 workers
    pf = reference_profile("h20")
    sc = load_scenario(C8_32).model_copy(update={"optimizations": ()})
    share = 8192 * 2650 * 48 / 8 / 1e9
    expected = 32 * (pf["dispatch_ray_s_per_worker"] + share * pf["dispatch_ray_s_per_gb"]) + pf["worker_call_s"]
    lay = TrainLayout(engine="fsdp", cp=4)
    assert dispatch_seconds(sc, pf, lay, 32, UPDATE_INPUT_BYTES_PER_TOKEN) == pytest.approx(expected, rel=1e-12)
