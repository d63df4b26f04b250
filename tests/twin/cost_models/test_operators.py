"""Issue 9's effects with hand-derived numbers: routing imbalance, causal attention by length, dynamic
micro-batches, CP's ring exchange, a MoE layer's token permutations; and that they reach the stage times."""

import math

import pytest

from twin.catalog.registry import load_model
from twin.cost_models.efficiency import efficiency, hbm_bytes_s
from twin.cost_models.imbalance import expert_imbalance
from twin.cost_models.memory import dynamic_micro_batches
from twin.cost_models.operators import (
    LayerOperators,
    causal_attention_flops,
    decode_attention_flops_per_ctx_layer,
)
from twin.cost_models.training import cp_exchange_bytes
from twin.layout.models import TrainLayout
from twin.profile import embedded_profile
from twin.topology.clusters import cluster_kind


def test_imbalance_of_learned_routing_by_hand():
    # EP8, 256 experts (32 per rank), top-8, a huge batch: only the experts' spread counts.
    # cv_rank = 0.5 / sqrt(32); the max of 8 ranks sits sqrt(2 ln 8) sigmas above the mean.
    got = expert_imbalance(8, 256, 8, 1e12, 0.5)
    assert got == pytest.approx(1 + math.sqrt(2 * math.log(8)) * 0.5 / math.sqrt(32), rel=1e-9)
    assert got == pytest.approx(1.180254, abs=1e-6)


def test_imbalance_of_sampling_and_forced_routing_by_hand():
    # 2 ranks of 1 expert, top-1, 100 tokens, no preferred expert: relative spread sqrt((1/2) * 2 / 100) = 0.1
    assert expert_imbalance(2, 2, 1, 100, 0.0) == pytest.approx(1 + math.sqrt(2 * math.log(2)) * 0.1, rel=1e-9)
    assert expert_imbalance(256, 256, 8, 64, 0.5, "forced_balanced") == 1.0
    assert expert_imbalance(256, 256, 8, 1, 0.5) <= 256  # never more than every pair on one rank
    # more ranks, more imbalance; more experts per rank, less
    assert expert_imbalance(64, 256, 8, 1e9, 0.5) > expert_imbalance(8, 256, 8, 1e9, 0.5)


def test_causal_attention_cost_at_two_lengths():
    cfg = load_model("qwen3-8b").config  # 32 heads of 128: 2 * 32 * (128 + 128) = 16384 FLOPs per query-key pair
    assert causal_attention_flops(cfg, 1024**2) == 16384 * 1024**2 / 2
    assert causal_attention_flops(cfg, 32768**2) == 16384 * 32768**2 / 2
    kind, pf = cluster_kind("a3"), embedded_profile("a3")
    ops = LayerOperators(load_model("qwen3-8b"), kind, pf, 1, 1)
    short = ops.attention_seconds(causal_attention_flops(cfg, 1024**2), 1024)
    long = ops.attention_seconds(causal_attention_flops(cfg, 32768**2), 32768)
    eff = efficiency(kind, pf, "attention", 1024) / efficiency(kind, pf, "attention", 32768)
    assert long / short == pytest.approx(1024 * eff, rel=1e-9)  # 32x the length, 1024x the work


def test_mla_decode_attention_runs_over_the_latent():
    cfg = load_model("deepseek-r1").config  # 128 heads; latent 512 + rope 64 for scores, 512 for values
    assert decode_attention_flops_per_ctx_layer(cfg) == 2 * 128 * (512 + 64 + 512)


def test_dynamic_micro_batch_count_by_hand():
    assert dynamic_micro_batches(100_000, 64, 18_432) == 6  # ceil(100000 / 18432) = ceil(5.43)
    assert dynamic_micro_batches(100_000, 64, 18_432, vpp=4) == 8  # rounded up to a multiple of vpp
    assert dynamic_micro_batches(100_000, 3, 1_000) == 3  # at most one per sequence


def test_cp_exchange_volume_by_hand():
    cfg = load_model("qwen3-32b").config  # 8 KV heads of 128: K and V are 2048 wide
    lay = TrainLayout(tp=8, pp=2, cp=2)
    # one ring step (cp - 1 = 1) of 32768 / 2 tokens, K and V split over TP 8, bf16
    assert cp_exchange_bytes(cfg, lay, 32768) == 1 * 16384 * 2048 / 8 * 2 == 8_388_608
    assert cp_exchange_bytes(cfg, TrainLayout(tp=8, pp=2, cp=4), 32768) == 3 * 8192 * 2048 / 8 * 2


def _evaluation(name: str, **train):
    from pathlib import Path

    from twin.evaluate import Evaluation
    from twin.scenario import load_scenario

    sc = load_scenario(Path(__file__).resolve().parents[3] / "scenarios" / f"{name}.yaml")
    if train:
        layout = sc.layout.model_copy(update={"train": sc.layout.train.model_copy(update=train)})
        sc = sc.model_copy(update={"layout": layout})
    return Evaluation(sc)


def test_dynamic_batching_sets_micro_batches_and_their_memory():
    # C7: sequences of 200 + 12000 = 12200 tokens on average; budget 18432 x CP 2 = 36864 tokens per micro-batch:
    # 256 sequences need ceil(256 x 12200 / 36864) = ceil(84.72) = 85 micro-batches. The whole step's 32 x 16 = 512
    # sequences on DP 1 (32 dies / TP8 PP2 CP2) need ceil(169.44) = 170
    ev = _evaluation("c7-dapo-qwen3-32b-a3-32dies")
    tc = ev.train_cost
    assert tc.micro_batches(256, 1) == 85
    _, m = tc.pipeline_time(1, backward=False)
    assert m == 170
    # activation memory follows the same budget: twice the budget, more activation memory
    bigger = _evaluation("c7-dapo-qwen3-32b-a3-32dies", dynamic_batch_tokens=36864)
    assert bigger.train_memory.update_activation_bytes(0) > ev.train_memory.update_activation_bytes(0)
    assert bigger.train_cost.micro_batches(256, 1) == 43  # ceil(84.72 / 2)


def test_the_log_prob_passes_pack_at_their_own_budget():
    # C7 with verl's log_prob_max_token_len_per_gpu at 3 x 18432: the forward-only passes pack 512 x 12200 tokens
    # into micro-batches of 55296 x CP 2 = 110592: ceil(56.48) = 57; the update keeps ceil(169.44) = 170
    ev = _evaluation("c7-dapo-qwen3-32b-a3-32dies", log_prob_dynamic_batch_tokens=55296)
    tc = ev.train_cost
    assert tc.pipeline_time(1, backward=False)[1] == 57
    assert tc.micro_batches(512, 1) == 170 and tc.micro_batches(512, 1, forward_only=True) == 57
    # its larger micro-batches hold more activation memory in the log-prob pass, the same in the update
    base = _evaluation("c7-dapo-qwen3-32b-a3-32dies")
    assert ev.train_memory.log_prob_activation_bytes(0) > base.train_memory.log_prob_activation_bytes(0)
    assert ev.train_memory.update_activation_bytes(0) == base.train_memory.update_activation_bytes(0)


def test_learned_routing_slows_every_ep_step():
    forced = _evaluation("c1-dsr1-a3-128")
    learned = forced.sc.model_copy(update={"workload": forced.sc.workload.model_copy(
        update={"expert_routing": "learned"})})
    from twin.evaluate import Evaluation

    ev = Evaluation(learned)
    assert ev.rollout_cost.decode_step(64, 1500).total > forced.rollout_cost.decode_step(64, 1500).total
    assert ev.train_cost.update_time() > forced.train_cost.update_time()
    assert ev.train_cost.log_prob_time() > forced.train_cost.log_prob_time()


def test_a_moe_layers_token_permutations_by_hand():
    """Qwen3-30B-A3B (hidden 2048, top-8): a row is 2048 x 2 = 4096 bytes. A device whose 1,000 tokens send 8,000
    token-expert pairs and whose experts receive 9,000: permute 2 x 8,000 rows, the sorts 2 x 9,000 rows each way,
    unpermute 8,000 rows read and 1,000 written. Without the sorts (one local expert, or FSDP's Hugging Face
    block) only the permute and the unpermute."""
    inv = load_model("qwen3-30b-a3b")
    kind, pf = cluster_kind("a3"), embedded_profile("a3")
    ops = LayerOperators(inv, kind, pf, 1, 1)
    assert ops.token_permutation_kernels(8000.0, 9000.0, True).tolist() == [
        4096 * 16_000, 4096 * 18_000, 4096 * 18_000, 4096 * 9_000]
    assert ops.token_permutation_kernels(8000.0, 9000.0, False).tolist() == [4096 * 16_000, 0, 0, 4096 * 9_000]
    sorted_s = ops.token_permutation_seconds(8000.0, 9000.0, True)
    assert sorted_s == pytest.approx(sum(
        b / (hbm_bytes_s(kind) * efficiency(kind, pf, "memory", b))
        for b in (4096 * 16_000, 4096 * 18_000, 4096 * 18_000, 4096 * 9_000)), rel=1e-12)


def test_the_token_permutations_reach_every_moe_pass(monkeypatch):
    """C6's Qwen3-30B-A3B on TP2 EP8 (16 experts a rank, sequence parallel): a MoE layer's forward costs the
    permutations of its device's tokens (4,096 / 2 = 2,048 a rank, 16,384 pairs sent) and of the pairs its experts
    receive (as many on average, times the busiest rank's imbalance) beyond the rest of the layer, and so the
    log-prob pass and the update cost more; a dense model's passes have none."""
    def passes(name: str) -> tuple[float, float, object]:
        tc = _evaluation(name).train_cost
        return tc.log_prob_time(), tc.update_time(), tc

    moe, dense = passes("c6-gspo-qwen3-30b-a3b-a3-16dies"), passes("c7-dapo-qwen3-32b-a3-32dies")
    tc = moe[2]
    layer = tc._forward_parts(0, 4096.0, 4096.0 * 1024)[0][True]
    received = 16384 * tc.imbalance(16384.0)
    expected = tc.ops.token_permutation_seconds(16384.0, received, True)
    monkeypatch.setattr(LayerOperators, "token_permutation_seconds", lambda self, *args: 0.0)
    bare, bare_dense = passes("c6-gspo-qwen3-30b-a3b-a3-16dies"), passes("c7-dapo-qwen3-32b-a3-32dies")
    assert (tc.sp, tc.expert_ranks) == (2, 8)
    assert layer - bare[2]._forward_parts(0, 4096.0, 4096.0 * 1024)[0][True] == pytest.approx(expected, rel=1e-12)
    assert moe[0] > bare[0] and moe[1] > bare[1]
    assert dense[:2] == bare_dense[:2]
