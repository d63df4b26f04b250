"""Exact parameter counts of the embedded catalog (../shared/reference/models.md)."""

import json

import pytest

from twin.catalog.registry import catalog_names, load_config, load_model
from twin.errors import TwinError

# model: (total, activated per token with the output head and without the input embedding)
PUBLISHED = {
    "deepseek-r1": (671_026_419_200, 36_625_618_432),
    "deepseek-v3": (671_026_419_200, 36_625_618_432),
    "qwen3-235b-a22b": (235_093_634_560, 21_568_433_664),
    "qwen3-30b-a3b": (30_532_122_624, 3_041_867_776),
    "qwen3-32b": (32_762_123_264, None),
    "qwen3-8b": (8_190_735_360, None),
    "qwen2.5-32b": (32_763_876_352, None),
    "qwen2.5-7b": (7_615_616_512, None),
    "qwen2.5-1.5b": (1_543_714_304, None),
    "llama2-7b": (6_738_415_616, None),
    "llama2-70b": (68_976_648_192, None),
}


def test_catalog_lists_every_published_model_and_the_tiny_cpu_models():
    by_hand = ["moonlight-16b-a3b", "qwen2.5-0.5b", "tiny", "tiny-moe", "tiny-deepseek"]
    assert sorted([*PUBLISHED, *by_hand]) == catalog_names()


def test_qwen25_half_b_count_by_hand():
    # Qwen2.5-0.5B-Instruct (configs/qwen2.5-0.5b.json): q [896, 896] and k, v [2 x 64, 896] with biases, o [896, 896]
    # without, gate, up and down [4864 x 896], two norms; the embedding [151936, 896] tied to the head
    layer = (896 * 896 + 896) + 2 * (128 * 896 + 128) + 896 * 896 + 3 * 4864 * 896 + 2 * 896
    assert layer == 14_912_384
    assert load_model("qwen2.5-0.5b").total_params() == 151_936 * 896 + 24 * layer + 896 == 494_032_768


def test_tiny_model_count_by_hand():
    layer = (128 * 128 + 128) + 2 * (64 * 128 + 64) + 128 * 128 + 3 * 256 * 128 + 2 * 128  # q/k/v biases, MLP, norms
    # untied embedding and head; 512 rows: the tokenizer's 359 tokens and 153 reserved ones
    assert load_model("tiny").total_params() == 2 * 512 * 128 + 2 * layer + 128


def test_tiny_moe_model_count_by_hand():
    attention = 128 * 128 + 2 * 64 * 128 + 128 * 128 + 2 * 32  # q, k, v (2 heads of 32), o; q/k norms over head_dim
    experts = 4 * (2 * 128 * 128 + 128 * 128)  # 4 experts: gate and up [128, 128] each, down [128, 128]
    layer = attention + 4 * 128 + experts + 2 * 128  # router [4, 128], two norms
    assert layer == 246_592
    assert load_model("tiny-moe").total_params() == 2 * 512 * 128 + 2 * layer + 128 == 624_384


def test_tiny_deepseek_model_count_by_hand():
    # MLA, 4 heads: q_a [32, 128] + its norm, q_b [4 x (128 nope + 64 rope), 32], kv_a [512 latent + 64 rope, 128] +
    # the latent's norm, kv_b [4 x (128 nope + 128 v), 512], o [128, 4 x 128]
    attention = 32 * 128 + 32 + 4 * 192 * 32 + 576 * 128 + 512 + 4 * 256 * 512 + 128 * 4 * 128
    assert attention == 692_768
    dense = 3 * 256 * 128  # layer 0 (first_k_dense_replace 1): gate, up, down
    moe = 4 * 3 * 128 * 128 + 3 * 128 * 128 + 4 * 128 + 4  # 4 routed experts, 1 shared, router and its score bias
    total = 2 * 512 * 128 + 128 + 2 * (attention + 2 * 128) + dense + moe
    assert load_model("tiny-deepseek").total_params() == total == 1_861_828


def test_moonlight_count_by_hand():
    # Moonlight-16B-A3B (DeepSeek-V3's architecture, configs/moonlight-16b-a3b.json): MLA without a query LoRA, 16
    # heads: q [16 x (128 nope + 64 rope), 2048], kv_a [512 latent + 64 rope, 2048] + the latent's norm, kv_b
    # [16 x (128 nope + 128 v), 512], o [2048, 16 x 128]
    attention = 16 * 192 * 2048 + 576 * 2048 + 512 + 16 * 256 * 512 + 2048 * 16 * 128
    assert attention == 13_763_072
    dense = 3 * 2048 * 11264  # layer 0 (first_k_dense_replace 1)
    # 64 routed experts of 1408, two shared ones as one MLP of 2816, the router and its score bias
    moe = 64 * 3 * 2048 * 1408 + 3 * 2048 * 2816 + 64 * 2048 + 64
    total = 2 * 163840 * 2048 + 2048 + 27 * (attention + 2 * 2048) + dense + 26 * moe
    assert load_model("moonlight-16b-a3b").total_params() == total == 15_960_110_208  # "16B" on its model card


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_counts_are_exact(name):
    inv = load_model(name)
    total, active = PUBLISHED[name]
    assert inv.total_params() == total
    if active is not None:
        assert inv.active_params() == active


def test_activated_with_embedding_and_mtp():
    assert load_model("qwen3-235b-a22b").active_params(include_embedding=True) == 22_190_763_520
    assert load_model("qwen3-30b-a3b").active_params(include_embedding=True) == 3_353_032_704
    dsr1 = load_model("deepseek-r1")
    assert dsr1.mtp_params() == 11_610_068_224
    assert dsr1.total_params(include_mtp=True) == 671_026_419_200 + 11_610_068_224


def test_bf16_copy_of_deepseek_is_published_size():
    assert load_model("deepseek-r1").total_params() * 2 == 1_342_052_838_400


def test_routed_expert_w1_is_56_mib():
    t = load_model("deepseek-r1").by_name["model.layers.3.mlp.experts.gate_up_proj"]
    per_expert = t.nbytes // t.num_experts
    assert per_expert == 2 * 2048 * 7168 * 2 == 58_720_256 == 56 * 2**20


def test_user_config_path(tmp_path):
    raw = json.loads(json.dumps(load_config("qwen3-8b").model_dump()))  # not a HF config: rejected below
    assert raw["model_type"] == "qwen3"
    hf = {"model_type": "qwen2", "hidden_size": 64, "num_hidden_layers": 2, "vocab_size": 128,
          "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 96}
    (tmp_path / "config.json").write_text(json.dumps(hf))
    cfg = load_config(str(tmp_path))
    assert cfg.qkv_bias and cfg.head_dim == 16 and cfg.num_layers == 2


@pytest.mark.parametrize(("content", "fragment"), [
    ("{not json", "not valid JSON"),
    ('{"model_type": "gpt2"}', "model_type 'gpt2' is not supported"),
    ('{"model_type": "qwen2", "hidden_size": 64}', "field 'num_attention_heads' is missing"),
    ('{"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 0, "vocab_size": 8, '
     '"num_attention_heads": 4, "intermediate_size": 8}', "field 'num_hidden_layers' = 0 is outside 1..4,096"),
    ('{"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 1, "vocab_size": 8, '
     '"num_attention_heads": "4", "intermediate_size": 8}', "field 'num_attention_heads' is '4'; expected an integer"),
    ('{"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 1, "vocab_size": 8, '
     '"num_attention_heads": 4, "num_key_value_heads": 0, "intermediate_size": 8}',
     "field 'num_key_value_heads' = 0 is outside"),
    ('{"model_type": "llama", "hidden_size": 1180591620717411303424, "num_hidden_layers": 1, "vocab_size": 8, '
     '"num_attention_heads": 4, "intermediate_size": 8}', "field 'hidden_size' = 1180591620717411303424 is outside"),
    ('{"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 1, "vocab_size": 8, '
     '"num_attention_heads": 4, "num_key_value_heads": 3, "intermediate_size": 8}', "not a multiple"),
])
def test_malformed_config_names_the_field(tmp_path, content, fragment):
    path = tmp_path / "config.json"
    path.write_text(content)
    with pytest.raises(TwinError, match=fragment):
        load_config(str(path))


def test_unknown_model_lists_known_ones():
    with pytest.raises(TwinError, match="known models: deepseek-r1"):
        load_config("gpt-5")
