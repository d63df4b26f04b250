"""Training-step sweep: a causal LM's forward+backward+optimizer step, and its forward-only pass.

What a step of update_actor and a log-prob pass cost on this device beyond the matrix multiplies (kernel
launches, autograd, the optimizer's loop over tensors) is what the twin's per-micro-batch and per-step
overheads stand for; this job measures them on the same model family the decode job uses (the built-in
tiny Qwen2, or `--model-config`), over batch size and sequence length.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from calibration.devices import supported_dtypes, torch_dtype
from calibration.jobs.base import InProcessJob, Outcome, Point, RunContext
from calibration.jobs.decode import model_spec
from calibration.measurements import JobMeasurement

SMALL = {"batch": [1, 4], "seq": [64, 256]}
FULL = {"batch": [1, 4, 16], "seq": [512, 2048, 8192]}
OPS = ("train_step", "forward")


class TrainJob(InProcessJob):
    name = "train"

    def __init__(self) -> None:
        self._models: dict[str, Any] = {}  # dtype -> (model, optimizer), for one run() only

    def points(self, ctx: RunContext) -> list[Point]:
        label, _ = model_spec(ctx.model_config)
        grid = SMALL if ctx.grid == "small" else FULL
        wanted = ("fp32",) if ctx.device.kind == "cpu" else ("bf16",)
        return [Point(self.name, op, {"model": label, "batch": b, "seq": s}, dtype=dtype)
                for dtype in supported_dtypes(ctx.device, wanted) for op in OPS
                for b in grid["batch"] for s in grid["seq"]]

    def run(self, ctx: RunContext, points: list[Point]) -> Iterator[Outcome]:
        try:
            yield from super().run(ctx, points)
        finally:
            self._models.clear()
            ctx.device.release_cache()

    def _model(self, ctx: RunContext, dtype: str) -> tuple[Any, Any, int]:
        if dtype not in self._models:
            import torch
            from transformers import AutoConfig, AutoModelForCausalLM

            _, config = model_spec(ctx.model_config)
            fields = dict(config)
            hf_config = AutoConfig.for_model(fields.pop("model_type"), **fields)
            torch.manual_seed(0)
            model = AutoModelForCausalLM.from_config(hf_config, dtype=torch_dtype(dtype)).to(ctx.device.torch_device)
            optimizer = torch.optim.AdamW(model.parameters(), lr=1e-6)
            self._models[dtype] = (model, optimizer, int(hf_config.vocab_size))
        return self._models[dtype]

    def measure(self, ctx: RunContext, point: Point) -> JobMeasurement:
        import torch

        model, optimizer, vocab = self._model(ctx, point.dtype or "fp32")
        batch, seq = int(point.params["batch"]), int(point.params["seq"])
        ids = torch.randint(0, vocab, (batch, seq), device=ctx.device.torch_device)
        params = sum(p.numel() for p in model.parameters())

        def train_step() -> None:
            optimizer.zero_grad(set_to_none=True)
            model(input_ids=ids, labels=ids).loss.backward()
            optimizer.step()

        def forward() -> None:
            with torch.inference_mode():
                model(input_ids=ids).logits.float().log_softmax(-1)

        op = train_step if point.op == "train_step" else forward
        samples = ctx.time(op)
        factor = 6 if point.op == "train_step" else 2  # FLOPs per weight per token, forward (+ backward)
        return ctx.record(point, samples, flops=factor * params * batch * seq,
                          rates={"tokens_per_s": batch * seq})


JOB = TrainJob()
