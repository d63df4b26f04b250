"""PPO's advantage on verl's driver, on this machine's CPU: the source of the twin's GAE terms
(twin/cost_models/scheduling.py: `gae_us_per_position`, `gae_ns_per_element`).

Run: python benchmarks/gae_driver_cpu.py [--points 32x2000 256x2000 1024x2000 256x8192 1024x8192] [--repeats 3]

verl's compute_gae_advantage_return (trainer/ppo/core_algos.py) walks the padded responses backwards one position
at a time, a few torch operations on a column of the (sequences x response limit) tensors each, then whitens the
advantages over the batch. This script times it, median of `--repeats`, at each `SEQUENCESxLENGTH` point and fits
seconds = length x (a + sequences x b) by least squares: `a` the per-position cost (the loop's Python and operator
dispatch), `b` the per-element cost (its column reads, strided by the response limit), weighting each point by
its own time (the relative error is what the twin carries).
"""

from __future__ import annotations

import argparse
import statistics
import time


def _point(text: str) -> tuple[int, int]:
    try:
        sequences, length = (int(part) for part in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected SEQUENCESxLENGTH, e.g. 256x2000") from None
    if sequences < 1 or length < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: sequences and length must be positive")
    return sequences, length


def _time_gae(sequences: int, length: int, repeats: int) -> float:
    import torch
    from verl.trainer.ppo.core_algos import compute_gae_advantage_return

    rewards, values = torch.randn(sequences, length), torch.randn(sequences, length)
    mask = torch.ones(sequences, length)
    compute_gae_advantage_return(rewards, values, mask, 1.0, 1.0)  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        compute_gae_advantage_return(rewards, values, mask, 1.0, 1.0)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    import numpy as np

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", nargs="+", type=_point,
                        default=[_point(p) for p in ("32x2000", "256x2000", "1024x2000", "256x8192", "1024x8192")])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    rows = []
    for sequences, length in args.points:
        seconds = _time_gae(sequences, length, max(1, args.repeats))
        rows.append((sequences, length, seconds))
        print(f"{sequences:6d} x {length:6d}: {seconds * 1e3:9.1f} ms, {seconds / length * 1e6:7.2f} us a position")
    design = np.array([[length, length * sequences] for sequences, length, _ in rows], dtype=float)
    target = np.array([seconds for _, _, seconds in rows])
    (per_position, per_element), *_ = np.linalg.lstsq(design / target[:, None], np.ones_like(target), rcond=None)
    print(f"fit: {per_position * 1e6:.1f} us a position + {per_element * 1e9:.1f} ns an element")
    for (sequences, length, seconds), fitted in zip(rows, design @ np.array([per_position, per_element]), strict=True):
        print(f"  {sequences:6d} x {length:6d}: fitted {fitted * 1e3:9.1f} ms ({(fitted / seconds - 1) * 100:+.0f} %)")


if __name__ == "__main__":
    main()
