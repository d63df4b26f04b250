"""The enumerator yields only valid layouts, and the recipes' among them."""

from twin.catalog.registry import load_config
from twin.layout import check_rollout, check_train, enumerate_rollout, enumerate_train
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
