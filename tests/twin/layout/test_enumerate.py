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
