"""Host<->device copies; on cpu, memcpy between two host tensors as the analogue."""

from __future__ import annotations

from calibration.jobs.base import InProcessJob, Point, RunContext
from calibration.measurements import JobMeasurement

MIB = 1 << 20
SMALL_SIZES = [1 * MIB, 16 * MIB, 128 * MIB]
FULL_SIZES = [1 * MIB, 4 * MIB, 16 * MIB, 64 * MIB, 256 * MIB, 1024 * MIB, 4096 * MIB]
CPU_NOTE = "cpu: memcpy between two host tensors, the analogue of a host<->device copy on this machine"
# (direction, pinned host memory) measured on an accelerator.
DEVICE_CASES = [("h2d", True), ("h2d", False), ("d2h", True), ("d2h", False), ("d2d", False)]


class CopyJob(InProcessJob):
    name = "copy"

    def points(self, ctx: RunContext) -> list[Point]:
        sizes = SMALL_SIZES if ctx.grid == "small" else FULL_SIZES
        cases = [("h2h", False)] if ctx.device.kind == "cpu" else DEVICE_CASES
        return [
            Point(self.name, direction, {"bytes": size, "pinned": pinned}, dtype="uint8")
            for direction, pinned in cases
            for size in sizes
        ]

    def measure(self, ctx: RunContext, point: Point) -> JobMeasurement:
        import torch

        size, pinned = int(point.params["bytes"]), bool(point.params["pinned"])
        host = {"device": "cpu", "pin_memory": pinned}
        on_device = {"device": ctx.device.torch_device}
        src_kw, dst_kw = {
            "h2h": (host, host),
            "h2d": (host, on_device),
            "d2h": (on_device, host),
            "d2d": (on_device, on_device),
        }[point.op]
        src = torch.ones(size, dtype=torch.uint8, **src_kw)
        dst = torch.empty(size, dtype=torch.uint8, **dst_kw)
        samples = ctx.time(lambda: dst.copy_(src, non_blocking=pinned))
        note = CPU_NOTE if point.op == "h2h" else ""
        return ctx.record(point, samples, nbytes=size, note=note)


JOB = CopyJob()
