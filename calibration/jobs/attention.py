"""Attention: prefill and decode shapes, GQA through SDPA and MLA in DeepSeek's absorbed form."""

from __future__ import annotations

import math
from typing import Any

from calibration.devices import supported_dtypes, torch_dtype
from calibration.jobs.base import InProcessJob, Point, RunContext, tensor_bytes
from calibration.measurements import JobMeasurement

# GQA heads: (heads, kv_heads, head_dim); MLA heads: (heads, kv_lora_rank, qk_rope_dim, qk_nope_dim, v_head_dim).
SMALL = {
    "gqa": [(8, 2, 64)],
    "mla": [(4, 512, 64, 128, 128)],
    "prefill": [(1, 256)],  # (batch, seq)
    "decode": [(4, 512), (16, 512)],  # (batch, context)
}
FULL = {
    "gqa": [(32, 8, 128), (64, 8, 128), (8, 1, 128)],
    "mla": [(16, 512, 64, 128, 128), (32, 512, 64, 128, 128), (128, 512, 64, 128, 128)],
    "prefill": [(1, 1024), (1, 4096), (4, 4096), (1, 16384)],
    "decode": [(b, c) for b in (1, 8, 32, 64, 128, 256) for c in (1024, 4096, 16384)],
}


def causal_pairs(seq: int, ctx: int) -> int:
    """(query, key) pairs attended when `seq` new tokens follow `ctx - seq` cached ones, causally."""
    return seq * (ctx - seq) + seq * (seq + 1) // 2


def causal_mask(seq: int, ctx: int, device: str) -> Any:
    """Boolean [seq, ctx] mask, True where query i (at position ctx - seq + i) may attend."""
    import torch

    return torch.ones(seq, ctx, dtype=torch.bool, device=device).tril(diagonal=ctx - seq)


def mla_absorbed(q_nope: Any, q_rope: Any, c_kv: Any, k_rope: Any, w_uk: Any, w_uv: Any, mask: Any) -> Any:
    """MLA attention with the key/value up-projections absorbed into the query and the output.

    q_nope [b, h, s, nope], q_rope [b, h, s, rope]: queries; c_kv [b, t, rank]: the compressed KV cache;
    k_rope [b, t, rope]: the shared rotary key; w_uk [h, nope, rank], w_uv [h, rank, v]: up-projections;
    mask: boolean [s, t] or None. Returns [b, h, s, v].
    """
    import torch

    b, h, s, _ = q_nope.shape
    scale = 1.0 / math.sqrt(q_nope.shape[-1] + q_rope.shape[-1])
    # Every head reads the same latent cache: fold heads into the query rows (one matmul per sequence).
    q_latent = torch.einsum("bhsn,hnr->bhsr", q_nope, w_uk).reshape(b, h * s, -1)
    scores = torch.bmm(q_latent, c_kv.transpose(1, 2)) + torch.bmm(q_rope.reshape(b, h * s, -1), k_rope.transpose(1, 2))
    scores = (scores * scale).view(b, h, s, -1)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    softmax_dtype = torch.promote_types(scores.dtype, torch.float32)  # half precision: softmax in fp32
    probs = torch.softmax(scores.to(softmax_dtype), dim=-1).to(c_kv.dtype)
    out_latent = torch.bmm(probs.view(b, h * s, -1), c_kv).view(b, h, s, -1)
    return torch.einsum("bhsr,hrv->bhsv", out_latent, w_uv)


class AttentionJob(InProcessJob):
    name = "attention"

    def points(self, ctx: RunContext) -> list[Point]:
        grid = SMALL if ctx.grid == "small" else FULL
        wanted = ("fp32", "bf16") if ctx.device.kind == "cpu" else ("bf16",)
        points = []
        for dtype in supported_dtypes(ctx.device, wanted):
            for phase in ("prefill", "decode"):
                for batch, length in grid[phase]:
                    seq, context = (length, length) if phase == "prefill" else (1, length)
                    shape = {"batch": batch, "seq": seq, "ctx": context}
                    for h, kvh, d in grid["gqa"]:
                        params = {**shape, "heads": h, "kv_heads": kvh, "head_dim": d}
                        points.append(Point(self.name, f"gqa_{phase}", params, dtype=dtype))
                    for h, rank, rope, nope, v in grid["mla"]:
                        params = {**shape, "heads": h, "kv_lora_rank": rank, "qk_rope_dim": rope,
                                  "qk_nope_dim": nope, "v_head_dim": v}
                        points.append(Point(self.name, f"mla_{phase}", params, dtype=dtype))
        return points

    def measure(self, ctx: RunContext, point: Point) -> JobMeasurement:
        kind = point.op.split("_")[0]
        return (self._gqa if kind == "gqa" else self._mla)(ctx, point)

    def _gqa(self, ctx: RunContext, point: Point) -> JobMeasurement:
        import torch
        import torch.nn.functional as F

        p = {k: int(v) for k, v in point.params.items()}
        kw = {"dtype": torch_dtype(point.dtype or "fp32"), "device": ctx.device.torch_device}
        q = torch.randn(p["batch"], p["heads"], p["seq"], p["head_dim"], **kw)
        k = torch.randn(p["batch"], p["kv_heads"], p["ctx"], p["head_dim"], **kw)
        v = torch.randn_like(k)
        causal = p["seq"] > 1

        def op() -> Any:
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)

        out = op()
        samples = ctx.time(op)
        flops = 4.0 * p["batch"] * p["heads"] * causal_pairs(p["seq"], p["ctx"]) * p["head_dim"]
        return ctx.record(point, samples, flops=flops, nbytes=tensor_bytes(q, k, v, out))

    def _mla(self, ctx: RunContext, point: Point) -> JobMeasurement:
        import torch

        p = {k: int(v) for k, v in point.params.items()}
        b, h, s, t = p["batch"], p["heads"], p["seq"], p["ctx"]
        rank, rope, nope, vd = p["kv_lora_rank"], p["qk_rope_dim"], p["qk_nope_dim"], p["v_head_dim"]
        kw = {"dtype": torch_dtype(point.dtype or "fp32"), "device": ctx.device.torch_device}
        q_nope, q_rope = torch.randn(b, h, s, nope, **kw), torch.randn(b, h, s, rope, **kw)
        c_kv, k_rope = torch.randn(b, t, rank, **kw), torch.randn(b, t, rope, **kw)
        w_uk, w_uv = torch.randn(h, nope, rank, **kw) / nope**0.5, torch.randn(h, rank, vd, **kw) / rank**0.5
        mask = causal_mask(s, t, ctx.device.torch_device) if s > 1 else None

        def op() -> Any:
            return mla_absorbed(q_nope, q_rope, c_kv, k_rope, w_uk, w_uv, mask)

        out = op()
        samples = ctx.time(op)
        pairs = causal_pairs(s, t)
        flops = 2.0 * b * h * (s * nope * rank + pairs * (2 * rank + rope) + s * rank * vd)
        nbytes = tensor_bytes(q_nope, q_rope, c_kv, k_rope, w_uk, w_uv, out)
        return ctx.record(point, samples, flops=flops, nbytes=nbytes, note="MLA absorbed form")


JOB = AttentionJob()
