"""Reshard transfer lists: the recipes' C4 figures, hand-derived bytes, and real tensors moved bit-exactly."""

from collections import defaultdict

import numpy as np
import pytest

from twin.catalog.config import parse_config
from twin.catalog.inventory import block_intersection, block_slices, build_inventory
from twin.catalog.registry import load_model
from twin.cost_models.placement import Placement
from twin.cost_models.reshard import reshard_stats, transfers
from twin.layout import RolloutLayout, TrainLayout
from twin.topology import Cluster

GIB = 2**30
C4 = (TrainLayout(tp=1, pp=2, ep=4), RolloutLayout(tp=1, dp=8, ep=8))


def test_c4_extra_memory_is_the_recipes_figure():
    pl = Placement(load_model("deepseek-r1"), *C4, devices=8)
    directed = reshard_stats(pl, Cluster("a3", 4), "directed")
    gathered = reshard_stats(pl, Cluster("a3", 4), "all_gather")
    assert directed.extra_bytes_max == 2 * 2048 * 7168 * 2 == 58_720_256  # one expert's W1: 0.0547 GiB
    assert round(directed.extra_bytes_max / GIB, 4) == 0.0547
    assert gathered.extra_bytes_max == 256 * 58_720_256 == 14 * GIB  # the layer's 256 experts: 14 GiB


def test_verl_bucketed_stages_ep_experts_not_the_layer():
    """mbridge exports one local expert at a time, all-gathered over EP: 4 experts' W1 (235 MB) stage at once,
    below the largest whole tensor, the lm_head (129,280 x 7168 bf16), which sets the peak with the 2 GiB bucket."""
    pl = Placement(load_model("deepseek-r1"), *C4, devices=8)
    v = reshard_stats(pl, Cluster("a3", 4), "verl_bucketed")
    assert 4 * 58_720_256 < 129_280 * 7168 * 2
    assert v.extra_bytes_max == 129_280 * 7168 * 2 + 2048 * 2**20 == 4_000_841_728
    fsdp = Placement(load_model("deepseek-r1"), TrainLayout(engine="fsdp"), C4[1], devices=8)
    assert reshard_stats(fsdp, Cluster("a3", 4), "verl_bucketed").extra_bytes_max == 14 * GIB + 2048 * 2**20


def test_c4_directed_bytes_by_hand():
    """Rank 0 holds stage 0 (layers 0-30) and experts 0-63; as rollout rank 0 it needs every non-expert
    tensor and experts 0-31 of every MoE layer, so it receives stage 1 (layers 31-60, all MoE) only."""
    pl = Placement(load_model("deepseek-r1"), *C4, devices=8)
    st = reshard_stats(pl, Cluster("a3", 4), "directed")
    attention = 11_010_048 + 1536 + 37_748_736 + 4_128_768 + 512 + 16_777_216 + 117_440_512
    non_expert_layer = attention + 44_040_192 + 256 * 7168 + 256 + 2 * 7168  # + shared expert, router, norms
    stage1_non_expert = 30 * non_expert_layer + 7168 + 129_280 * 7168  # + final norm + lm_head
    experts = 30 * 32 * 3 * 2048 * 7168
    assert st.received[0] == 2 * (stage1_non_expert + experts)


def test_directed_moves_less_than_all_gather_and_verl():
    pl = Placement(load_model("qwen3-30b-a3b"), TrainLayout(tp=2, pp=2, ep=4), RolloutLayout(tp=2, dp=8, ep=16), 16)
    cl = Cluster("a3", 8)
    d, g, v = (reshard_stats(pl, cl, m) for m in ("directed", "all_gather", "verl_bucketed"))
    assert d.bytes_total < g.bytes_total == v.bytes_total
    assert d.extra_bytes_max < g.extra_bytes_max < v.extra_bytes_max
    assert sum(d.bytes_per_tier.values()) == d.bytes_total


@pytest.mark.parametrize("method", ["directed", "all_gather", "verl_bucketed"])
@pytest.mark.parametrize(("model", "train", "rollout", "kind", "cards"), [
    ("deepseek-r1", *C4, "a3", 4),
    ("qwen3-30b-a3b", TrainLayout(tp=2, pp=4, ep=8, moe_tp_extend_ep=True), RolloutLayout(tp=4, dp=8, ep=32), "a3", 16),
    ("qwen3-30b-a3b", TrainLayout(tp=4, pp=2, ep=2, etp=1), RolloutLayout(tp=4, dp=4), "a2", 16),
    ("qwen2.5-7b", TrainLayout(tp=4, pp=2, cp=2), RolloutLayout(tp=2, dp=8), "a2", 16),
    ("qwen2.5-1.5b", TrainLayout(engine="fsdp"), RolloutLayout(tp=2, dp=4), "a2", 8),
])
def test_vectorised_stats_equal_the_transfer_list(model, train, rollout, kind, cards, method):
    cl = Cluster(kind, cards)
    pl = Placement(load_model(model), train, rollout, cl.devices)
    received = np.zeros(cl.devices, dtype=np.int64)
    sent = np.zeros(cl.devices, dtype=np.int64)
    tiers: dict[str, int] = defaultdict(int)
    for tr in transfers(pl, method):
        received[tr.dst] += tr.nbytes
        sent[tr.src] += tr.nbytes
        tiers[cl.pair_tier(tr.src, tr.dst)] += tr.nbytes
    st = reshard_stats(pl, cl, method)
    assert (st.received == received).all() and (st.sent == sent).all()
    assert st.bytes_per_tier == dict(tiers)


TINY_DS = {"model_type": "deepseek_v3", "hidden_size": 64, "num_hidden_layers": 4, "vocab_size": 512,
           "num_attention_heads": 4, "num_key_value_heads": 4, "intermediate_size": 96,
           "moe_intermediate_size": 32, "n_routed_experts": 8, "num_experts_per_tok": 2, "n_shared_experts": 1,
           "first_k_dense_replace": 1, "n_group": 2, "topk_group": 1, "q_lora_rank": 24, "kv_lora_rank": 16,
           "qk_nope_head_dim": 8, "qk_rope_head_dim": 4, "v_head_dim": 8, "num_nextn_predict_layers": 0}


@pytest.mark.parametrize("method", ["directed", "all_gather"])
@pytest.mark.parametrize(("train", "rollout"), [
    (TrainLayout(tp=1, pp=2, ep=4), RolloutLayout(tp=1, dp=8, ep=8)),  # C4's shape, on a tiny model
    (TrainLayout(tp=2, pp=2, ep=2), RolloutLayout(tp=4, dp=2, ep=8)),  # expert TP 2 -> whole experts
    (TrainLayout(tp=4, pp=2, ep=1), RolloutLayout(tp=2, dp=4, ep=1)),  # TP shrinks, experts stay TP-split
])
def test_real_tensors_arrive_bit_exact(train, rollout, method):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.for_model(**TINY_DS))
    state = {k: v.detach().to(torch.bfloat16) for k, v in model.state_dict().items()}
    inv = build_inventory(parse_config(TINY_DS, "tiny-ds"))
    pl = Placement(inv, train, rollout, 8)
    # each device's training shards, as the layout cuts the real tensors
    held = {(t.name, d): {b: state[t.name][block_slices(b)].clone() for b in pl.train_blocks(t, d)}
            for t in pl.tensors for d in range(8)}
    stage_bytes = defaultdict(int)
    for (_, d), blocks in held.items():
        stage_bytes[d] += sum(x.numel() * x.element_size() for x in blocks.values())
    from twin.cost_models.static import tensor_table

    predicted = tensor_table(inv).train_stage_bytes(train, 8).weight_bytes
    for d in range(8):
        assert stage_bytes[d] == predicted[pl.device_stage(d)]  # to the byte (no vocab padding at this size)
    inbox = defaultdict(list)
    pending = list(transfers(pl, method))
    while pending:  # all_gather forwards what a device got by the PP broadcast: serve it once it has arrived
        waiting = []
        for tr in pending:
            have = list(held[(tr.tensor, tr.src)].items()) + inbox[(tr.tensor, tr.src)]
            found = next(((b, x) for b, x in have if block_intersection(b, tr.block) == tr.block), None)
            if found is None:
                waiting.append(tr)
                continue
            src_block, data = found
            local = tuple(slice(lo - b0, hi - b0) for (lo, hi), (b0, _) in zip(tr.block, src_block, strict=True))
            payload = data[local].clone()
            assert payload.numel() * payload.element_size() == tr.nbytes
            inbox[(tr.tensor, tr.dst)].append((tr.block, payload))
        assert len(waiting) < len(pending), "a transfer's source never gets its block"
        pending = waiting
    for t in pl.tensors:
        full = state[t.name]
        for d in range(8):
            for need in pl.rollout_blocks(t, d):
                out = torch.full_like(full[block_slices(need)], float("nan"))
                for src_block, x in list(held[(t.name, d)].items()) + inbox[(t.name, d)]:
                    inter = block_intersection(need, src_block)
                    if inter is None:
                        continue
                    dst = tuple(slice(lo - n0, hi - n0) for (lo, hi), (n0, _) in zip(inter, need, strict=True))
                    src = tuple(slice(lo - s0, hi - s0) for (lo, hi), (s0, _) in zip(inter, src_block, strict=True))
                    out[dst] = x[src]
                assert torch.equal(out, full[block_slices(need)]), (t.name, d)


@pytest.mark.parametrize(("kind", "cards", "pod_cards"), [
    ("a3", 48, 16),  # pods of two 8-card nodes: cards, nodes and pods nested, every tier used
    ("a3", 48, 12),  # a node split across pods: not nested, the general look-up serves
    ("a2", 16, None),  # no chip or pod tier
])
def test_vectorised_pair_tiers_equal_the_cluster(kind, cards, pod_cards):
    from types import SimpleNamespace

    from twin.cost_models.reshard import _Arrays
    from twin.topology.clusters import cluster_kind

    k = cluster_kind(kind)
    cl = Cluster(k.model_copy(update={"cards_per_pod": pod_cards}) if pod_cards else k, cards)
    arrays = _Arrays(SimpleNamespace(devices=cl.devices, stage_size=cl.devices), cl)
    assert arrays.nested == (pod_cards != 12)
    src, dst = (x.ravel() for x in np.meshgrid(np.arange(cl.devices), np.arange(cl.devices)))
    got = [arrays.tier_names[i] for i in arrays.tiers(src, dst)]
    assert got == [cl.pair_tier(int(a), int(b)) for a, b in zip(src, dst, strict=True)]
    tiers = {cl.kind.chip_tier, cl.kind.node_tier, cl.kind.pod_tier, cl.kind.scaleout_tier} - {None}
    assert set(got) == tiers


@pytest.mark.parametrize(("kind", "cards", "pod_cards", "stages", "by_stages"), [
    ("a3", 48, 16, 3, True),  # a stage per pod
    ("a3", 48, 16, 6, True),  # a stage per node, two per pod
    ("a3", 48, 16, 4, False),  # a node split between two stages
    ("a2", 16, None, 2, True),
    ("a2", 16, None, 4, False),
])
def test_flows_between_stages_take_the_stages_tier(kind, cards, pod_cards, stages, by_stages):
    from types import SimpleNamespace

    from twin.cost_models.reshard import TRASH, _Arrays
    from twin.topology.clusters import cluster_kind

    k = cluster_kind(kind)
    cl = Cluster(k.model_copy(update={"cards_per_pod": pod_cards}) if pod_cards else k, cards)
    size = cl.devices // stages
    arrays = _Arrays(SimpleNamespace(devices=cl.devices, stage_size=size), cl)
    assert (arrays.stage_tiers is not None) == by_stages
    if by_stages:
        assert (np.diag(arrays.stage_tiers) == TRASH).all()
        for a in range(cl.devices):
            for b in range(cl.devices):
                if a // size != b // size:
                    assert arrays.tier_names[arrays.stage_tiers[a // size, b // size]] == cl.pair_tier(a, b)
