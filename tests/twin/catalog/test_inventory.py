"""The tensor inventory against real transformers modules, and shard arithmetic."""

import math

import pytest

from twin.catalog.config import parse_config
from twin.catalog.inventory import block_is_contiguous, build_inventory

TINY = {
    "qwen3": {"model_type": "qwen3", "hidden_size": 64, "num_hidden_layers": 2, "vocab_size": 256,
              "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32, "intermediate_size": 96},
    "qwen2": {"model_type": "qwen2", "hidden_size": 64, "num_hidden_layers": 2, "vocab_size": 256,
              "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 96,
              "tie_word_embeddings": True},
    "llama": {"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2, "vocab_size": 256,
              "num_attention_heads": 4, "num_key_value_heads": 4, "intermediate_size": 96},
    "qwen3_moe": {"model_type": "qwen3_moe", "hidden_size": 64, "num_hidden_layers": 3, "vocab_size": 256,
                  "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "intermediate_size": 96,
                  "moe_intermediate_size": 32, "num_experts": 8, "num_experts_per_tok": 2,
                  "decoder_sparse_step": 1, "mlp_only_layers": [1]},
    "deepseek_v3": {"model_type": "deepseek_v3", "hidden_size": 64, "num_hidden_layers": 3, "vocab_size": 256,
                    "num_attention_heads": 4, "num_key_value_heads": 4, "intermediate_size": 96,
                    "moe_intermediate_size": 32, "n_routed_experts": 8, "num_experts_per_tok": 2,
                    "n_shared_experts": 1, "first_k_dense_replace": 1, "n_group": 2, "topk_group": 1,
                    "q_lora_rank": 24, "kv_lora_rank": 16, "qk_nope_head_dim": 8, "qk_rope_head_dim": 4,
                    "v_head_dim": 8, "num_nextn_predict_layers": 1},
}


def _hf_state_dict(raw):
    transformers = pytest.importorskip("transformers")
    cfg = transformers.AutoConfig.for_model(**raw)
    model = transformers.AutoModelForCausalLM.from_config(cfg)
    return {k: tuple(v.shape) for k, v in model.state_dict().items()}


@pytest.mark.parametrize("family", sorted(TINY))
def test_names_and_shapes_equal_the_real_module(family):
    raw = TINY[family]
    inv = build_inventory(parse_config(raw, family))
    ours = {t.name: t.shape for t in inv.main()}
    assert ours == _hf_state_dict(raw)
    assert list(ours) == list(_hf_state_dict(raw))  # state_dict order too


def test_deepseek_mtp_layer_is_listed_but_flagged():
    inv = build_inventory(parse_config(TINY["deepseek_v3"], "ds"))
    mtp = [t for t in inv if t.mtp]
    assert {t.layer for t in mtp} == {3}
    assert "model.layers.3.eh_proj.weight" in {t.name for t in mtp}
    assert inv.total_params(include_mtp=True) - inv.total_params() == sum(t.numel for t in mtp)


def test_qwen3_moe_dense_layer_from_mlp_only_layers():
    cfg = parse_config(TINY["qwen3_moe"], "q")
    assert [cfg.is_moe_layer(i) for i in range(3)] == [True, False, True]


def test_tied_head_counted_once():
    inv = build_inventory(parse_config(TINY["qwen2"], "q2"))
    assert inv.tied_head
    emb = inv.by_name["model.embed_tokens.weight"].numel
    assert inv.total_params() == sum(t.numel for t in inv) - emb


def test_distinct_shard_blocks_tile_each_tensor():
    inv = build_inventory(parse_config(TINY["deepseek_v3"], "ds"))
    for t in inv:
        for tp in (1, 2, 4):
            ep = 4 if t.shard.ep_dim is not None else 1
            blocks = {b for r in range(tp) for e in range(ep)
                      for b in t.shard_blocks(tp=tp, tp_rank=r, ep=ep, ep_rank=e)}
            assert sum(math.prod(hi - lo for lo, hi in b) for b in blocks) == t.numel, (t.name, tp)


def test_kv_heads_are_replicated_when_tp_exceeds_them():
    inv = build_inventory(parse_config(TINY["qwen3"], "q3"))
    k = inv.by_name["model.layers.0.self_attn.k_proj.weight"]  # 2 KV heads of 32
    assert k.shard_blocks(tp=4, tp_rank=0) == k.shard_blocks(tp=4, tp_rank=1) == [((0, 32), (0, 64))]
    assert k.shard_blocks(tp=4, tp_rank=3) == [((32, 64), (0, 64))]
    assert k.shard_bytes(tp=4) == 32 * 64 * 2


def test_vocab_padding_vllm_style_and_unpadded():
    inv = build_inventory(parse_config({**TINY["llama"], "vocab_size": 250}, "l"))
    head = inv.by_name["lm_head.weight"]
    # vLLM: padded to a multiple of 64 = 256 rows, 64 per rank at TP4; rank 3 holds rows 192-249, 58 real rows
    assert head.shard_bytes(tp=4, vocab_multiple=64) == 64 * 64 * 2
    assert head.shard_blocks(tp=4, tp_rank=3, vocab_multiple=64) == [((192, 250), (0, 64))]
    # unpadded (the training engines): 250 / TP2 = 125 rows per rank; TP4 does not divide 250
    assert head.shard_bytes(tp=2) == 125 * 64 * 2
    assert head.shard_blocks(tp=2, tp_rank=1) == [((125, 250), (0, 64))]
    with pytest.raises(ValueError, match=r"250 vocabulary rows \(padding included\) cannot be split over TP=4"):
        head.shard_blocks(tp=4, tp_rank=0)


def test_fused_gate_up_gives_one_block_per_chunk():
    inv = build_inventory(parse_config(TINY["qwen3_moe"], "q"))
    gu = inv.by_name["model.layers.0.mlp.experts.gate_up_proj"]  # (8, 64, 64): gate rows 0-31, up rows 32-63
    assert gu.shard_blocks(tp=2, tp_rank=1, ep=2, ep_rank=1) == [((4, 8), (16, 32), (0, 64)),
                                                                  ((4, 8), (48, 64), (0, 64))]


def test_contiguity():
    assert block_is_contiguous(((2, 3), (0, 4)), (5, 4))
    assert block_is_contiguous(((1, 2), (1, 3)), (5, 4))
    assert not block_is_contiguous(((0, 2), (1, 3)), (5, 4))


def test_a_critic_is_the_checkpoint_with_a_one_output_score_head_in_place_of_the_lm_head():
    """verl's PPO critic: ...ForTokenClassification with one label: Qwen3-8B's 8,190,735,360 parameters less its
    LM head (151,936 x 4,096) plus a score head of 4,096 weights and one bias; the embedding stays its own."""
    from twin.catalog.inventory import value_model
    from twin.catalog.registry import load_model, load_value_model

    actor = load_model("qwen3-8b")
    critic = value_model(actor)
    assert actor.total_params() == 8_190_735_360
    assert critic.total_params() == 8_190_735_360 - 151_936 * 4096 + 4096 + 1
    assert (actor.head_outputs, critic.head_outputs) == (151_936, 1)
    assert [t.name for t in critic.tensors if t.group == "head"] == ["score.weight", "score.bias"]
    assert all(t.shard.replicated for t in critic.tensors if t.group == "head")
    assert load_value_model("qwen3-8b") is load_value_model("qwen3-8b")  # one object: tables are keyed on it
    tied = load_model("qwen2.5-1.5b")  # a tied LM head: the critic keeps the embedding and adds its score head
    assert tied.tied_head and not value_model(tied).tied_head
    assert value_model(tied).total_params() == tied.total_params() + tied.config.hidden_size + 1
    mtp = load_model("deepseek-r1")
    assert not any(t.mtp for t in value_model(mtp).tensors)
