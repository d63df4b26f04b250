"""The enumerator yields only valid layouts, and the recipes' among them."""

from twin.catalog.registry import load_config
from twin.layout import RolloutLayout, check_rollout, check_train, enumerate_rollout, enumerate_train
from twin.layout.rules import check_verl_replica
from twin.topology import cluster_kind


def test_recipe_layouts_are_enumerated():
    cfg, kind = load_config("deepseek-r1"), cluster_kind("a3")
    train = {(t.tp, t.pp, t.ep, t.moe_tp_extend_ep) for t in enumerate_train(cfg, 256, kind)}
    assert (4, 8, 8, True) in train
    rollout = {(r.tp, r.ep) for r in enumerate_rollout(cfg, 256, kind)}
    assert (2, 256) in rollout
    q = load_config("qwen3-235b-a22b")
    assert (4, 8, 4) in {(t.tp, t.pp, t.ep) for t in enumerate_train(q, 128, cluster_kind("a2"))}
    assert 8 in {r.tp for r in enumerate_rollout(q, 128, cluster_kind("a2"))}


def test_everything_enumerated_is_valid_and_distinct():
    for name, devices, kind in [("deepseek-r1", 256, "a3"), ("qwen3-30b-a3b", 16, "a3"), ("qwen2.5-7b", 16, "a2")]:
        cfg, k = load_config(name), cluster_kind(kind)
        train = list(enumerate_train(cfg, devices, k))
        assert train and all(check_train(t, cfg, devices, k) == [] for t in train)
        assert len(set(train)) == len(train)
        rollout = list(enumerate_rollout(cfg, devices, k))
        assert rollout and all(check_rollout(r, cfg, devices, k) == [] for r in rollout)


def test_dense_models_get_fsdp_layouts():
    cfg = load_config("qwen2.5-1.5b")
    assert any(t.engine == "fsdp" for t in enumerate_train(cfg, 8, cluster_kind("a2")))
    assert not any(t.engine == "fsdp" for t in enumerate_train(load_config("qwen3-30b-a3b"), 16, cluster_kind("a3")))


def test_the_planner_proposes_no_megatron_tp_that_leaves_part_of_a_vocabulary_row(tmp_path):
    import json

    from twin.catalog.registry import raw_config
    from twin.planner import Planner, default_scenario

    cfg, kind = load_config("qwen3-8b"), cluster_kind("a2")  # 32 heads, 8 KV heads: TP1-8 on one 8-NPU node
    assert {t.tp for t in enumerate_train(cfg, 8, kind) if t.engine == "megatron"} == {1, 2, 4, 8}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(raw_config("qwen3-8b")[0] | {"vocab_size": 500}))  # 500 = 4 x 125
    planner = Planner(default_scenario(str(path), "a2", 8))
    structures = planner.train_structures()
    assert {t.tp for t in structures if t.engine == "megatron"} == {1, 2, 4}
    assert all(check_train(t, planner.cfg, 8, kind) == [] for t in structures)


def test_verl_launches_a_data_parallel_rollout_replica_only_on_whole_nodes():
    # verl 0.9.1 vLLMHttpServer.launch_server, data_parallel_size > 1: a node's devices per replica node, TP dividing
    # them. On an 8-NPU A2 node: TP1 x DP4 (EP4) is half a node; TP1 x DP8 and TP2 x DP8 (EP16 over two nodes) are
    # whole ones; a replica without DP (EP1) is free of the rule
    a2, a3 = cluster_kind("a2"), cluster_kind("a3")
    assert [e.rule for e in check_verl_replica(RolloutLayout(tp=1, dp=8, ep=4), a2)] == [
        "a data-parallel rollout replica spans whole nodes (verl's vLLM server)"]
    assert check_verl_replica(RolloutLayout(tp=1, dp=8, ep=8), a2) == []
    assert check_verl_replica(RolloutLayout(tp=2, dp=8, ep=16), a2) == []
    assert check_verl_replica(RolloutLayout(tp=4, dp=2), a2) == []
    assert check_verl_replica(RolloutLayout(tp=2, dp=128, ep=256), a3) == []  # C1: 256 dies, 16 a node
    assert check_verl_replica(RolloutLayout(tp=2, dp=8, ep=8), a3) != []  # 8 of a node's 16 dies
    cfg = load_config("moonlight-16b-a3b")
    searched = {(r.tp, r.ep) for r in enumerate_rollout(cfg, 8, a2, verl_server=True)}
    assert (1, 4) in {(r.tp, r.ep) for r in enumerate_rollout(cfg, 8, a2)} and (1, 4) not in searched
    assert (1, 8) in searched


def test_mindspeed_only_layouts_are_searched_only_where_verl_trains_with_mindspeed():
    cfg = load_config("qwen3-30b-a3b")
    assert any(t.moe_tp_extend_ep for t in enumerate_train(cfg, 16, cluster_kind("a3")))
    assert not any(t.moe_tp_extend_ep for t in enumerate_train(cfg, 16, cluster_kind("h20")))
