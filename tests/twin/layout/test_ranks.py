"""Rank <-> coordinates in Megatron's and vLLM's orders."""

from twin.layout import RolloutLayout, TrainLayout
from twin.layout.ranks import rollout_coord, rollout_group, train_coord, train_group, train_rank


def test_c4_groups_match_the_recipe():
    lay = TrainLayout(tp=1, pp=2, ep=4)  # 8 ranks: EP groups [0-3], [4-7]; PP groups [0,4], [1,5], ...
    assert train_group(lay, 8, "ep", 0) == [0, 1, 2, 3]
    assert train_group(lay, 8, "ep", 6) == [4, 5, 6, 7]
    assert [train_group(lay, 8, "pp", r) for r in range(4)] == [[0, 4], [1, 5], [2, 6], [3, 7]]


def test_megatron_order_tp_fastest_pp_slowest():
    lay = TrainLayout(tp=4, pp=8, ep=8, moe_tp_extend_ep=True)
    for r in range(256):
        c = train_coord(lay, 256, r)
        assert train_rank(lay, 256, c.tp, c.cp, c.dp, c.pp) == r
    c = train_coord(lay, 256, 37)
    assert (c.tp, c.dp, c.pp) == (1, 1, 1)
    assert c.ep == 5 and c.edp == 0  # experts split over TP x EP = 32 ranks of a stage
    assert len(train_group(lay, 256, "ep", 37)) == 32


def test_expert_tp_groups():
    lay = TrainLayout(tp=4, pp=1, ep=2)  # expert TP defaults to TP (Megatron)
    assert train_group(lay, 16, "etp", 0) == [0, 1, 2, 3]
    assert train_group(lay, 16, "ep", 0) == [0, 4]


def test_vllm_order():
    lay = RolloutLayout(tp=2, dp=128, ep=256)
    c = rollout_coord(lay, 37)
    assert (c.tp, c.dp, c.instance, c.ep) == (1, 18, 0, 37)
    assert rollout_group(lay, "tp", 37) == [36, 37]
    two = RolloutLayout(tp=8, dp=16, ep=64)
    assert rollout_coord(two, 70).instance == 1 and rollout_group(two, "ep", 70) == list(range(64, 128))
