"""Megatron-core on CPU over gloo (executor/cpu/megatron_compat.py, executor/cpu/megatron_model.py).

Two ranks build a GPTModel, load a transformers checkpoint through mbridge's converters, and must give
transformers' logits; the backward pass reaches every rank's parameters. A tiny Qwen2 at TP2 (its 300 vocabulary
rows unpadded, 150 per rank, as verl's Megatron engine builds it), and a tiny Qwen3-MoE
at EP2 with each rank on sequences of its own length, so that megatron-core's all-to-all token dispatcher moves
uneven token counts between the ranks over gloo (the MoE patches of executor/cpu/megatron_compat.py); and a tiny
DeepSeek-V3 at EP2 the same way: multi-latent attention with yarn rotary embeddings (DeepSeek-R1's rope settings),
a dense first layer, then a sigmoid router with expert bias, a shared expert and routed experts
(executor/cpu/megatron_mla.py and the MLA patches).
"""

from __future__ import annotations

import multiprocessing
import tempfile
from pathlib import Path
from typing import Any

import pytest

from executor.cpu.megatron_compat import PATCHES
from executor.npu_opt.host import HostEnv
from executor.reshard.experts import split_tensors

CONFIG = {"model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"], "vocab_size": 300, "hidden_size": 64,
          "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
          "max_position_embeddings": 64, "tie_word_embeddings": False, "torch_dtype": "float32"}
DEEPSEEK_YARN = {"type": "yarn", "factor": 40, "original_max_position_embeddings": 4096, "beta_fast": 32,
                 "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 1.0}  # DeepSeek-R1's config.json
MOE_CONFIG = {"model_type": "qwen3_moe", "architectures": ["Qwen3MoeForCausalLM"], "vocab_size": 256,
              "hidden_size": 64, "intermediate_size": 128, "moe_intermediate_size": 32, "num_experts": 4,
              "num_experts_per_tok": 2, "norm_topk_prob": True, "num_hidden_layers": 2, "num_attention_heads": 4,
              "num_key_value_heads": 2, "head_dim": 16, "max_position_embeddings": 64, "tie_word_embeddings": False,
              "torch_dtype": "float32"}
DEEPSEEK_CONFIG = {"model_type": "deepseek_v3", "architectures": ["DeepseekV3ForCausalLM"], "vocab_size": 300,
                   "hidden_size": 64, "intermediate_size": 128, "moe_intermediate_size": 32, "n_routed_experts": 4,
                   "num_experts_per_tok": 2, "n_shared_experts": 1, "n_group": 1, "topk_group": 1,
                   "first_k_dense_replace": 1, "routed_scaling_factor": 2.5, "norm_topk_prob": True,
                   "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 4, "q_lora_rank": 16,
                   "kv_lora_rank": 16, "qk_nope_head_dim": 8, "qk_rope_head_dim": 8, "v_head_dim": 8,
                   "max_position_embeddings": 64, "rope_scaling": DEEPSEEK_YARN, "tie_word_embeddings": False,
                   "torch_dtype": "float32"}
IDS = [[1, 5, 7, 200, 299, 2, 9, 11]]
MOE_IDS = ([[1, 5, 7, 200, 255, 2, 9, 11]], [[3, 250, 17, 4, 90]])  # rank 0's, rank 1's: uneven token counts
CASES = {"qwen2-tp2": (CONFIG, {"tp": 2}, (IDS, IDS)), "qwen3-moe-ep2": (MOE_CONFIG, {"tp": 1, "ep": 2}, MOE_IDS),
         "deepseek-v3-ep2": (DEEPSEEK_CONFIG, {"tp": 1, "ep": 2}, MOE_IDS),
         # MindSpeed's moe_tp_extend_ep at TP2: whole experts in a legacy GroupedMLP over the two TP ranks
         # (megatron-core's expert grid of expert TP 1 over EP2 places them so), loaded through
         # executor/reshard/megatron_blocks.py's views; GroupedMLP computes in bf16 only, so both sides run bf16
         "qwen3-moe-tp2-extend-ep": ({**MOE_CONFIG, "torch_dtype": "bfloat16"},
                                     {"tp": 2, "ep": 2, "etp": 1, "grouped_experts": True}, (MOE_IDS[0], MOE_IDS[0]))}
TOLERANCE = {"qwen3-moe-tp2-extend-ep": 2e-2}  # of the largest logit: bf16 logits of two implementations
EXPERT_SCALE = {"qwen3-moe-tp2-extend-ep": 30.0}


def test_each_patch_finds_its_target_in_the_installed_megatron_core() -> None:
    pytest.importorskip("megatron.core")
    found = [p.detect(HostEnv()) for p in PATCHES]
    assert [(a.id, a.available) for a in found] == [(p.id, True) for p in PATCHES], [a.reason for a in found]
    assert len({p.id for p in PATCHES}) == len(PATCHES) == 8


def test_each_patch_of_verls_megatron_path_finds_its_targets() -> None:
    pytest.importorskip("megatron.core")
    pytest.importorskip("mbridge")
    from executor.cpu.megatron_verl_compat import PATCHES as VERL_PATH

    found = [p.detect(HostEnv()) for p in VERL_PATH]
    assert [(a.id, a.available) for a in found] == [(p.id, True) for p in VERL_PATH], [a.reason for a in found]
    assert len({p.id for p in (*PATCHES, *VERL_PATH)}) == len(PATCHES) + len(VERL_PATH) == 15


def _rank(rank: int, store: str, checkpoint: dict, results: Any, case: str) -> None:
    import torch
    import torch.distributed as dist

    from executor.cpu.megatron_model import MegatronCpuModel

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
    try:
        config, sizes, ids_per_rank = CASES[case]
        m = MegatronCpuModel.build(config, pp=1, dtype=getattr(torch, config["torch_dtype"]), **sizes)
        m.load(checkpoint)
        if sizes.get("grouped_experts"):  # megatron-core refuses MoE at TP > 1 in training mode without sequence
            m.model.eval()  # parallelism, which the CPU builder leaves off (dropout is 0 either way)
        ids = torch.tensor(ids_per_rank[rank])
        pos = torch.arange(ids.shape[1]).view(1, -1)
        logits = m.model(ids, pos, attention_mask=None).detach().contiguous()
        if sizes["tp"] > 1:  # the vocabulary is split over the TP ranks
            parts = [torch.empty_like(logits) for _ in range(sizes["tp"])]
            dist.all_gather(parts, logits)
            logits = torch.cat(parts, dim=-1)
        m.model(ids, pos, attention_mask=None, labels=ids).sum().backward()
        grad = sum(float(p.grad.norm()) for p in m.model.parameters() if p.grad is not None)
        # by value: a tensor would cross as a file descriptor this process's exit can close before the parent reads
        results.put((rank, logits.float().numpy(), grad, [*m.sources, *m.grouped]))
    except BaseException as exc:
        results.put((rank, f"{type(exc).__name__}: {exc}", 0.0, []))
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("case", sorted(CASES))
def test_megatron_loaded_through_mbridge_gives_transformers_logits(case: str) -> None:
    pytest.importorskip("megatron.core")
    pytest.importorskip("mbridge")
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config, _, ids_per_rank = CASES[case]
    torch.manual_seed(0)
    hf = AutoModelForCausalLM.from_config(AutoConfig.for_model(**config), dtype=getattr(torch, config["torch_dtype"]))
    with torch.no_grad():  # routed experts that dominate the logits, so that a misplaced expert or projection shows
        for name, p in hf.named_parameters():
            if ".mlp.experts." in name:
                p.mul_(EXPERT_SCALE.get(case, 1.0))
    # experts one by one, as a checkpoint on disk names them (transformers 5 fuses them in memory)
    checkpoint = split_tensors({k: v.detach().clone() for k, v in hf.state_dict().items()})
    with torch.no_grad():
        wants = [hf(torch.tensor(ids)).logits for ids in ids_per_rank]
    ctx = multiprocessing.get_context("fork")
    results = ctx.Queue()
    with tempfile.TemporaryDirectory() as tmp:
        procs = [ctx.Process(target=_rank, args=(r, str(Path(tmp) / "store"), checkpoint, results, case))
                 for r in (0, 1)]
        for p in procs:
            p.start()
        got = sorted(results.get(timeout=120) for _ in procs)
        for p in procs:
            p.join(timeout=30)
    for rank, logits, grad, names in got:
        assert not isinstance(logits, str), f"rank {rank}: {logits}"
        assert logits.shape == wants[rank].shape  # at TP2, 2 x 150 columns: no padding rows to cut off
        want = wants[rank].float()
        assert (torch.from_numpy(logits) - want).abs().max().item() < TOLERANCE.get(case, 1e-5) * (
            want.abs().max().item() if case in TOLERANCE else 1.0)
        assert grad > 0
        attention = "linear_kv_up_proj" if config["model_type"] == "deepseek_v3" else "linear_qkv"  # MLA's, GQA's
        assert f"decoder.layers.0.self_attention.{attention}.weight" in names
        if CASES[case][1].get("grouped_experts"):
            assert {"decoder.layers.0.mlp.experts.weight1", "decoder.layers.0.mlp.experts.weight2"} <= set(names)
