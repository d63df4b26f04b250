"""Memory traffic of torch's AdamW step on this host's CPU, against the twin's count (the CPU optimizer's model).

Run: python benchmarks/cpu_adamw_traffic.py [MILLION_PARAMS] [THREADS]
Prints: the seconds of one AdamW step over that many fp32 parameters (torch's single-tensor path, the one CPU
tensors take), this host's copy bandwidth (read + write of one fp32 tensor of the same size), and the bytes per
parameter the step moves at that bandwidth, beside the 80 B that twin.cost_models.training counts from torch's
source (CPU_ADAMW_BYTES). Above 80 B the step does more than stream memory (its square root and division); the
twin's host step is then short by that ratio.
"""

from __future__ import annotations

import sys
import time

import torch

from twin.cost_models.training import CPU_ADAMW_BYTES


def seconds(op: object, repeats: int) -> float:
    op()  # first call: allocation and the optimizer's state
    start = time.perf_counter()
    for _ in range(repeats):
        op()
    return (time.perf_counter() - start) / repeats


def main(million: int = 64, threads: int = 2) -> None:
    torch.set_num_threads(threads)
    n = million * 1_000_000
    param = torch.nn.Parameter(torch.randn(n))
    param.grad = torch.randn(n)
    adamw = torch.optim.AdamW([param], lr=1e-3, weight_decay=0.1)
    step_s = seconds(adamw.step, 3)
    src, dst = torch.randn(n), torch.empty(n)
    copy_s = seconds(lambda: dst.copy_(src), 5)
    bandwidth = 2 * 4 * n / copy_s
    print(f"{million}M fp32 parameters, {threads} threads")
    print(f"AdamW step        {step_s:.3f} s")
    print(f"copy bandwidth    {bandwidth / 1e9:.1f} GB/s")
    print(f"bytes per param   {step_s * bandwidth / n:.1f} B at that bandwidth (twin counts {CPU_ADAMW_BYTES} B)")


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:3]))
