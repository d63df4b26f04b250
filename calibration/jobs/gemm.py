"""GEMM efficiency: C = A @ B over (m, n, k) shapes and dtypes."""

from __future__ import annotations

from itertools import product

from calibration.devices import DTYPE_NAMES, supported_dtypes, torch_dtype
from calibration.jobs.base import InProcessJob, Point, RunContext, tensor_bytes
from calibration.measurements import JobMeasurement

SMALL_SHAPES = [(256, 256, 256), (1024, 1024, 1024), (2048, 512, 1024)]
# Tokens x (out, in) features of the dense and expert layers of the catalog's models.
FULL_TOKENS = [128, 512, 2048, 8192, 16384]
FULL_FEATURES = [(4096, 4096), (14336, 4096), (4096, 14336), (7168, 7168), (18432, 7168),
                 (7168, 18432), (2048, 7168), (7168, 2048), (24576, 1536), (32768, 512)]
# What the CPU target computes in (FSDP and vLLM in fp32, Megatron in bf16). Without fp16 units a CPU emulates fp16
# matmuls: 1024^3 took 2.0 s against 0.020 s in fp32 and 0.0044 s in bf16 on this host (2026-12-01)
CPU_DTYPES = ("fp32", "bf16")


class GemmJob(InProcessJob):
    name = "gemm"

    def points(self, ctx: RunContext) -> list[Point]:
        if ctx.grid == "small":
            shapes = SMALL_SHAPES
        else:
            shapes = [(m, n, k) for m, (n, k) in product(FULL_TOKENS, FULL_FEATURES)]
        return [
            Point(self.name, "matmul", {"m": m, "n": n, "k": k}, dtype=dtype)
            for dtype in supported_dtypes(ctx.device, CPU_DTYPES if ctx.device.kind == "cpu" else DTYPE_NAMES)
            for m, n, k in shapes
        ]

    def measure(self, ctx: RunContext, point: Point) -> JobMeasurement:
        import torch

        m, n, k = (int(point.params[d]) for d in ("m", "n", "k"))
        kwargs = {"dtype": torch_dtype(point.dtype or "fp32"), "device": ctx.device.torch_device}
        a = torch.randn(m, k, **kwargs)
        b = torch.randn(k, n, **kwargs)
        c = torch.empty(m, n, **kwargs)
        samples = ctx.time(lambda: torch.matmul(a, b, out=c))
        return ctx.record(point, samples, flops=2.0 * m * n * k, nbytes=tensor_bytes(a, b, c))


JOB = GemmJob()
