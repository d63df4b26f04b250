"""executor/reshard/vllm_blocks.py on stand-ins of vLLM's DeepSeek-V2/V3 modules (no vLLM needed): the attributes it
reads, named as vLLM 0.32 names them (vllm/model_executor/layers/linear.py, models/deepseek_v2.py,
layers/attention/mla_attention.py), blocks derived by hand. The engine test (test_reshard_engines.py) holds the same
readers to vLLM's real modules."""

from __future__ import annotations

import torch

from executor.reshard.vllm_blocks import derived_weights, load_blocks, module_blocks


class MergedColumnParallelLinear(torch.nn.Module):
    def __init__(self, output_sizes: list[int], cols: int, tp_size: int, tp_rank: int) -> None:
        super().__init__()
        self.output_sizes, self.tp_size, self.tp_rank = output_sizes, tp_size, tp_rank
        self.weight = torch.nn.Parameter(torch.randn(sum(output_sizes) // tp_size, cols), requires_grad=False)
        self.bias = None


class DeepSeekV2FusedQkvAProjLinear(MergedColumnParallelLinear):
    """vLLM builds it with disable_tp=True: every rank holds it whole (tp_rank 0 of 1)."""


class GateLinear(torch.nn.Module):
    """A ReplicatedLinear subclass in vLLM; DeepseekV2MoE adds the float32 correction bias to it as a parameter."""

    def __init__(self, experts: int, hidden: int) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(experts, hidden), requires_grad=False)
        self.e_score_correction_bias = torch.nn.Parameter(torch.randn(experts), requires_grad=False)


def test_fused_qkv_a_proj_is_q_a_proj_rows_then_kv_a_proj_rows_whole_on_every_rank() -> None:
    # q_lora_rank 16, kv_lora_rank 16 + rope 8 = 24 rows, hidden 64: rows 0-15 are q_a_proj, 16-39 kv_a_proj_with_mqa
    module = DeepSeekV2FusedQkvAProjLinear([16, 24], 64, tp_size=1, tp_rank=0)
    held = module_blocks("model.layers.3.self_attn.fused_qkv_a_proj", module, {})
    q, kv = held["model.layers.3.self_attn.q_a_proj.weight"], held["model.layers.3.self_attn.kv_a_proj_with_mqa.weight"]
    assert (q[0], kv[0]) == ([[0, 16], [0, 64]], [[0, 24], [0, 64]])
    assert torch.equal(q[1], module.weight[:16]) and torch.equal(kv[1], module.weight[16:])
    assert len(held) == 2


def test_a_merged_linear_of_an_unknown_name_is_not_read() -> None:
    assert module_blocks("model.layers.3.self_attn.fused_qkv_b_proj",
                         DeepSeekV2FusedQkvAProjLinear([16, 24], 64, 1, 0), {}) == {}


def test_shared_experts_gate_up_split_by_tp_or_whole_when_vllm_disables_tp() -> None:
    # moe_intermediate_size 8 x 2 shared experts = 16 rows each of gate and up; TP rank 1 of 2 holds rows 8-15 of each,
    # its local weight stacking gate's 8 rows over up's 8
    split = MergedColumnParallelLinear([16, 16], 64, tp_size=2, tp_rank=1)
    held = module_blocks("model.layers.3.mlp.shared_experts.gate_up_proj", split, {})
    gate, up = (held[f"model.layers.3.mlp.shared_experts.{p}.weight"] for p in ("gate_proj", "up_proj"))
    assert (gate[0], up[0]) == ([[8, 16], [0, 64]], [[8, 16], [0, 64]])
    assert torch.equal(gate[1], split.weight[:8]) and torch.equal(up[1], split.weight[8:])
    # sequence-parallel MoE (EP with TP > 1 and DP > 1): DeepseekV2MLP(disable_tp=True), tp_rank 0 of 1 on every rank
    whole = module_blocks("model.layers.3.mlp.shared_experts.gate_up_proj",
                          MergedColumnParallelLinear([16, 16], 64, tp_size=1, tp_rank=0), {})
    assert [b for b, _ in whole.values()] == [[[0, 16], [0, 64]]] * 2


def test_router_weight_and_correction_bias_are_whole_where_their_shapes_are_the_checkpoints() -> None:
    gate = GateLinear(256, 64)
    shapes = {"model.layers.3.mlp.gate.weight": (256, 64), "model.layers.3.mlp.gate.e_score_correction_bias": (256,)}
    held = module_blocks("model.layers.3.mlp.gate", gate, shapes)
    assert {n: b for n, (b, _) in held.items()} == {"model.layers.3.mlp.gate.weight": [[0, 256], [0, 64]],
                                                    "model.layers.3.mlp.gate.e_score_correction_bias": [[0, 256]]}
    assert held["model.layers.3.mlp.gate.e_score_correction_bias"][1] is gate.e_score_correction_bias
    assert module_blocks("model.layers.3.mlp.gate", gate, {"model.layers.3.mlp.gate.weight": (128, 64)}) == {}


def test_loaded_blocks_land_in_the_fused_weight() -> None:
    module = DeepSeekV2FusedQkvAProjLinear([16, 24], 64, tp_size=1, tp_rank=0)
    model = torch.nn.Module()
    model.add_module("fused_qkv_a_proj", module)
    kv = torch.randn(24, 64)
    assert load_blocks(model, {}, [("kv_a_proj_with_mqa.weight", ((0, 24), (0, 64)), kv)]) == 1
    assert torch.equal(module.weight[16:], kv)


class MLAAttention(torch.nn.Module):
    def __init__(self, heads: int, nope: int, v: int, rank: int) -> None:
        super().__init__()
        self.num_heads, self.qk_nope_head_dim, self.v_head_dim, self.kv_lora_rank = heads, nope, v, rank
        self.kv_b_proj = torch.nn.Linear(rank, heads * (nope + v), bias=False)
        self.W_UK_T = torch.nn.Parameter(torch.empty(heads, nope, rank), requires_grad=False)
        self.W_UV = torch.nn.Parameter(torch.empty(heads, rank, v), requires_grad=False)


def test_mla_derived_weights_are_each_heads_key_and_value_rows_of_kv_b_proj() -> None:
    # kv_b_proj's local rows are, head after head, P = 3 key rows then V = 2 value rows, over L = 4 latent columns:
    # head h's key rows are 5h..5h+2 (W_UK_T[h], [P, L] as stored) and its value rows 5h+3..5h+4 (W_UV[h], stored
    # transposed, [L, V])
    attn = MLAAttention(heads=2, nope=3, v=2, rank=4)
    made = derived_weights(attn, "model.layers.3.self_attn.kv_b_proj")
    assert {a: s for a, (s, _) in made.items()} == {"W_UK_T": "model.layers.3.self_attn.kv_b_proj.weight",
                                                    "W_UV": "model.layers.3.self_attn.kv_b_proj.weight"}
    w = torch.arange(10 * 4, dtype=torch.float32).reshape(10, 4)
    uk_t, uv = made["W_UK_T"][1](w), made["W_UV"][1](w)
    assert uk_t.shape == attn.W_UK_T.shape and uv.shape == attn.W_UV.shape
    assert torch.equal(uk_t, torch.stack([w[0:3], w[5:8]]))
    assert torch.equal(uv, torch.stack([w[3:5].t(), w[8:10].t()]))


def test_only_mla_attention_has_derived_weights() -> None:
    assert derived_weights(GateLinear(4, 2), "x") == {}
    assert derived_weights(MLAAttention(2, 3, 2, 4), None) == {}
