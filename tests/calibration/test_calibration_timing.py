"""The kernel's counters of a process, as the CPU-loop benchmarks read them."""

from __future__ import annotations

import psutil

from calibration.timing import kernel_counters


def test_touching_fresh_memory_counts_minor_faults():
    me = psutil.Process()
    system0, faults0, switches0 = kernel_counters(me)
    buffer = bytearray(64 << 20)  # a fresh mapping: its pages fault in on first write
    buffer[::4096] = bytes(len(range(0, len(buffer), 4096)))
    system1, faults1, switches1 = kernel_counters(me)
    assert faults1 - faults0 >= 32  # 16,384 pages of 4 KiB, or 32 of 2 MiB where huge pages are always on
    assert system1 >= system0 and switches1 >= switches0
