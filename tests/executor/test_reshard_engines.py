"""check-reshard's engine-side count: bytes from the slices vLLM's modules hold, against hand arithmetic.

The vLLM run itself (vLLM loading the checkpoint at TP2 and reporting its slices) is exercised by
tests/calibration/test_calibration_cpu_loop.py through `executor check-reshard --json`.
"""

from __future__ import annotations

from executor.reshard.engine_check import _figures
from twin.catalog.config import parse_config
from twin.catalog.inventory import build_inventory
from twin.cost_models.placement import Placement
from twin.layout.models import RolloutLayout, TrainLayout

# the CPU loop's tiny Qwen2 (executor/cpu/assets.py): vocab 359, hidden 128, 4 heads of 32 (2 kv), FFN 256
CONFIG = {"model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"], "vocab_size": 359, "hidden_size": 128,
          "intermediate_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
          "max_position_embeddings": 512, "tie_word_embeddings": False, "torch_dtype": "float32"}


def _vllm_tp2_blocks(rank: int) -> dict[str, list[list[int]]]:
    """What vLLM's modules hold at TP2, written from vLLM's rules: column-parallel rows split in two, row-parallel
    columns split in two, norms whole, vocabulary padded to 64 per rank (384 -> 192 rows each, the last rank's
    real rows end at 359)."""
    half = lambda n: [rank * n // 2, (rank + 1) * n // 2]  # noqa: E731
    vocab = [[0, 192], [0, 128]] if rank == 0 else [[192, 359], [0, 128]]
    out = {"model.embed_tokens.weight": vocab, "lm_head.weight": vocab, "model.norm.weight": [[0, 128]]}
    for i in range(2):
        p = f"model.layers.{i}"
        for proj, rows in (("q_proj", 128), ("k_proj", 64), ("v_proj", 64)):
            out[f"{p}.self_attn.{proj}.weight"] = [half(rows), [0, 128]]
            out[f"{p}.self_attn.{proj}.bias"] = [half(rows)]
        out[f"{p}.self_attn.o_proj.weight"] = [[0, 128], half(128)]
        out[f"{p}.mlp.gate_proj.weight"] = out[f"{p}.mlp.up_proj.weight"] = [half(256), [0, 128]]
        out[f"{p}.mlp.down_proj.weight"] = [[0, 128], half(256)]
        out[f"{p}.input_layernorm.weight"] = out[f"{p}.post_attention_layernorm.weight"] = [[0, 128]]
    return out


def _placement() -> Placement:
    inv = build_inventory(parse_config(CONFIG, "tiny"))
    return Placement(inv, TrainLayout(engine="fsdp"), RolloutLayout(tp=2, dp=1), 2)


def test_received_bytes_from_vllms_slices_match_hand_arithmetic() -> None:
    # FSDP2 keeps dimension-0 halves (ceil: the embedding's 359 rows split 180 / 179). Per rank and layer, vLLM
    # needs beyond that: o_proj's other 64 x 64 quarter (16,384 B), down_proj's 64 x 128 (32,768 B); each of the
    # five norms' other 64 values (256 B); rank 0 also embedding and head rows 180-191 (12 x 128 x 4 = 6,144 B each)
    expected = [2 * (16_384 + 32_768) + 5 * 256 + 2 * 6_144, 2 * (16_384 + 32_768) + 5 * 256]
    assert expected == [111_872, 99_584]
    probes = [{"rank": r, "blocks": _vllm_tp2_blocks(r), "mismatched": [], "unknown": []} for r in (0, 1)]
    figures = _figures(_placement(), probes, expected)
    assert [r["received_bytes"] for r in figures["ranks"]] == expected
    assert figures["received_equal_to_twin"] and figures["blocks_equal_to_twin"] and figures["vllm_loaded_bit_exact"]
    needed = [r["needed_bytes"] for r in figures["ranks"]]
    assert needed[0] - needed[1] == 2 * (192 - 167) * 128 * 4  # the vocabulary split 192 / 167


def test_a_slice_vllm_holds_elsewhere_is_reported() -> None:
    blocks = _vllm_tp2_blocks(1)
    blocks["model.layers.0.self_attn.o_proj.weight"] = [[0, 128], [0, 64]]  # the other half
    probes = [{"rank": 0, "blocks": _vllm_tp2_blocks(0), "mismatched": [], "unknown": []},
              {"rank": 1, "blocks": blocks, "mismatched": ["lm_head.weight"], "unknown": []}]
    figures = _figures(_placement(), probes, [111_872, 99_584])
    bad = figures["ranks"][1]
    assert bad["blocks_differing"] == ["model.layers.0.self_attn.o_proj.weight"] and not bad["blocks_equal_to_twin"]
    assert not bad["vllm_loaded_bit_exact"] and not figures["vllm_loaded_bit_exact"]
    assert bad["received_bytes"] == 99_584  # the same amount, from the wrong place: caught by the block check
