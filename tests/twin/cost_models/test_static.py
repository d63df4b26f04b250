"""The vectorised shard table equals the per-tensor shard arithmetic for every enumerated layout."""

import pytest

from twin.catalog.registry import load_model
from twin.cost_models.placement import TRAIN_VOCAB_MULTIPLE, VLLM_VOCAB_MULTIPLE, Placement
from twin.cost_models.static import tensor_table
from twin.layout import RolloutLayout, enumerate_rollout, enumerate_train
from twin.topology import cluster_kind


def _per_tensor_train(pl: Placement) -> list[int]:
    lay = pl.train
    out = [0] * (lay.pp if lay.engine == "megatron" else 1)
    for t in pl.tensors:
        if lay.engine == "fsdp":
            rows = -(-t.shape[0] // pl.devices)
            out[0] += rows * (t.numel // t.shape[0]) * t.dtype_bytes
        elif t.shard.ep_dim is not None:
            out[pl.stage(t)] += t.shard_bytes(tp=lay.expert_tp, ep=lay.expert_partition)
        else:
            out[pl.stage(t)] += t.shard_bytes(tp=lay.tp, vocab_multiple=TRAIN_VOCAB_MULTIPLE)
    if pl.inv.tied_head and lay.engine == "megatron" and lay.pp > 1:
        emb = next(t for t in pl.tensors if t.group == "embedding")
        out[-1] += emb.shard_bytes(tp=lay.tp, vocab_multiple=TRAIN_VOCAB_MULTIPLE)
    return out


@pytest.mark.parametrize(("model", "devices", "kind"), [
    ("deepseek-r1", 256, "a3"), ("qwen3-30b-a3b", 16, "a3"), ("qwen2.5-1.5b", 8, "a2"), ("llama2-70b", 32, "a2"),
])
def test_table_equals_per_tensor_shards(model, devices, kind):
    inv = load_model(model)
    table = tensor_table(inv)
    k = cluster_kind(kind)
    rollouts = list(enumerate_rollout(inv.config, devices, k))
    for lay in list(enumerate_train(inv.config, devices, k, include_fsdp=True))[:80]:
        pl = Placement(inv, lay, RolloutLayout(tp=1, dp=devices), devices)
        assert list(table.train_stage_bytes(lay, devices).weight_bytes) == _per_tensor_train(pl), lay.short()
    for ro in rollouts:
        dense, expert = table.rollout_bytes(ro)
        per_tensor = sum(
            t.shard_bytes(ep=ro.ep) if t.shard.ep_dim is not None and ro.ep > 1
            else t.shard_bytes(tp=ro.tp, vocab_multiple=VLLM_VOCAB_MULTIPLE)
            for t in Placement(inv, lay, ro, devices).tensors)
        assert dense + expert == per_tensor, ro.short()


def test_stage_and_rollout_bytes_are_computed_once_per_parallel_structure():
    from twin.layout import TrainLayout
    from twin.layout.models import Recompute

    table = tensor_table(load_model("deepseek-r1"))
    lay = TrainLayout(tp=4, pp=8, ep=8)
    first = table.train_stage_bytes(lay, 256)
    again = table.train_stage_bytes(lay.model_copy(update={"recompute": Recompute(granularity="selective")}), 256)
    assert again is first and not first.weight_bytes.flags.writeable
    assert (first.weight_bytes == table._train_stage_bytes(lay, 256).weight_bytes).all()
    assert table.train_stage_bytes(TrainLayout(tp=4, pp=4, ep=8), 256) is not first
    ro = RolloutLayout(tp=2, dp=128, ep=256)
    assert table.rollout_bytes(ro) == table.rollout_bytes(ro.model_copy(update={"max_num_seqs": 8}))
    nbytes = table._rollout_shard_bytes(ro)
    assert table.rollout_bytes(ro) == (int(nbytes[~table.expert].sum()), int(nbytes[table.expert].sum()))
