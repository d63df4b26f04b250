"""The vocabulary's blocks: unpadded in Megatron's training layout (as verl's engine builds it), padded to 64s in
vLLM's rollout layout; the shard table, the static memory and the head's GEMM agree with them."""

import pytest

from twin.catalog.config import parse_config
from twin.catalog.inventory import build_inventory
from twin.cost_models.operators import LayerOperators
from twin.cost_models.placement import Placement
from twin.cost_models.static import tensor_table
from twin.layout import RolloutLayout, TrainLayout
from twin.profile import embedded_profile
from twin.topology import cluster_kind

HIDDEN = 64
CONFIG = {"model_type": "llama", "hidden_size": HIDDEN, "num_hidden_layers": 2, "vocab_size": 500,
          "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 4,
          "tie_word_embeddings": False, "torch_dtype": "bfloat16"}
INV = build_inventory(parse_config(CONFIG, "v500"))
VOCAB = ("model.embed_tokens.weight", "lm_head.weight")


def _placement(tp: int) -> Placement:
    return Placement(INV, TrainLayout(tp=tp), RolloutLayout(tp=tp, dp=1), tp)


@pytest.mark.parametrize(("tp", "train_rows", "rollout_rows"), [
    # Megatron: 500 / TP2 = 250 rows each (the plan padded to 128 x TP2 = 512 rows before: rank 0 held 0-256)
    # vLLM: 500 padded to 512 (a multiple of 64), 256 per rank; rank 1 holds the 244 real rows 256-500
    (2, [(0, 250), (250, 500)], [(0, 256), (256, 500)]),
    # Megatron: 500 / TP4 = 125 each (128 x TP4 = 512 before: 128 each); vLLM: 512 / 4 = 128 each
    (4, [(0, 125), (125, 250), (250, 375), (375, 500)], [(0, 128), (128, 256), (256, 384), (384, 500)]),
])
def test_vocabulary_blocks_unpadded_in_training_padded_in_rollout(tp, train_rows, rollout_rows):
    pl = _placement(tp)
    for name in VOCAB:
        t = INV.by_name[name]
        assert [pl.train_blocks(t, d) for d in range(tp)] == [[(r, (0, HIDDEN))] for r in train_rows]
        assert [pl.rollout_blocks(t, d) for d in range(tp)] == [[(r, (0, HIDDEN))] for r in rollout_rows]


def test_static_bytes_and_head_gemm_count_the_unpadded_rows():
    table = tensor_table(INV)
    # one layer at TP4: q, k, v, o 64x64 and gate, up, down 128x64 split four ways, two norms of 64 whole
    layer = (4 * HIDDEN * HIDDEN + 3 * 128 * HIDDEN) // 4 + 2 * HIDDEN
    vocab = 500 // 4 * HIDDEN  # 125 rows of each of embedding and head (128 with the old 128 x TP padding)
    stages = table.train_stage_bytes(TrainLayout(tp=4), 4)
    assert stages.weight_bytes.tolist() == [(2 * layer + HIDDEN + 2 * vocab) * 2]  # bf16, final norm included
    assert stages.dense_numel.tolist() == [2 * layer + HIDDEN + 2 * vocab]
    ops = LayerOperators(INV, cluster_kind("a2"), embedded_profile("a2"), 4, 1)
    assert ops.head_gemm.tolist() == [vocab]
