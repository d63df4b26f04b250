"""First touch of host memory the hypervisor has taken back, against memory the guest kernel still holds.

A guest kernel with free page reporting (virtio-balloon; Linux mm/page_reporting.c) reports free blocks of
2^page_reporting_order pages (order 9 on the CI host: 2 MiB) to the host PAGE_REPORTING_DELAY = 2 s after they are
freed, and the host discards them: the next touch of such a page faults on the host as well. Each call maps a fresh
anonymous buffer, asks for transparent huge pages on it (MADV_HUGEPAGE: a huge page needs a free 2 MiB block, which
after a quiet spell only the reported blocks offer), writes one byte of every 4 KiB page and unmaps it. Timed right
after the previous call the kernel hands the same blocks out again; timed after `idle_s` (and, before the first,
`DRAIN_S` for the kernel to report what earlier work freed) it hands out reported ones. The difference per 4 KiB
page is the host's cost of backing a page again, what the twin charges a CPU target's trainer for the pages it first
touches after the rollout (twin.cost_models.host_pages); on a host without reporting it comes out near 0.
"""

from __future__ import annotations

import mmap
import time
from pathlib import Path

from calibration.jobs.base import InProcessJob, Point, RunContext
from calibration.measurements import JobMeasurement
from twin.cost_models.host_pages import PAGE_BYTES

BUFFER_BYTES = 256 << 20  # 65,536 pages of 4 KiB: a trainer pass's activations on the CPU loop are 0.1-0.3 GB
# twice the kernel's reporting delay, so that the freed buffer has been reported when the next call starts
IDLE_S = 4.0
# before the idle point: the kernel reports a freed backlog a part per pass, passes 2 s apart, and until it is through
# fresh memory still comes from unreported blocks: after a 6 GiB free, touches stayed at the back-to-back cost for 16 s
# and were returned-page slow from 20 s on (2026-12-05); in CI the jobs before this one free gigabytes
DRAIN_S = 30.0
THP_MODE = Path("/sys/kernel/mm/transparent_hugepage/enabled")


def thp_mode() -> str:
    """The kernel's transparent huge page mode (the bracketed word of its sysfs file), or "absent"."""
    try:
        text = THP_MODE.read_text()
    except OSError:
        return "absent"
    return text[text.find("[") + 1:text.find("]")] if "[" in text else text.strip()


def touch_fresh_buffer(size: int) -> None:
    """Map `size` bytes, ask for huge pages, write one byte of every 4 KiB page, unmap."""
    import numpy as np

    buf = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    try:
        if hasattr(mmap, "MADV_HUGEPAGE"):
            buf.madvise(mmap.MADV_HUGEPAGE)
        view = np.frombuffer(buf, dtype=np.uint8)
        view[::PAGE_BYTES] = 1
        del view
    finally:
        buf.close()


class PageTouchJob(InProcessJob):
    name = "page_touch"

    def points(self, ctx: RunContext) -> list[Point]:
        return [Point(self.name, "first_touch", {"bytes": BUFFER_BYTES, "idle_s": idle}, dtype="uint8")
                for idle in (0.0, IDLE_S)]

    def measure(self, ctx: RunContext, point: Point) -> JobMeasurement:
        size, idle = int(point.params["bytes"]), float(point.params["idle_s"])
        if idle > 0:
            time.sleep(DRAIN_S)
        samples = ctx.time(lambda: touch_fresh_buffer(size), before=lambda: time.sleep(idle))
        return ctx.record(point, samples, rates={"pages": float(size // PAGE_BYTES)},
                          note=f"a fresh {size >> 20} MiB mapping (MADV_HUGEPAGE; transparent huge pages "
                               f"'{thp_mode()}') written once a 4 KiB page and unmapped, {idle:g} s after the last")


JOB = PageTouchJob()
