"""How many valid layouts exist, and how long enumerating them takes (issue: foundation).

Run: python benchmarks/enumerate_speed.py
"""

from __future__ import annotations

import resource
import time

from twin.catalog.registry import load_config
from twin.layout.enumerate import enumerate_rollout, enumerate_train
from twin.topology.clusters import cluster_kind


def main() -> None:
    cfg = load_config("deepseek-r1")
    kind = cluster_kind("a3")
    print(f"{'model':<12} {'cards':>6} {'devices':>8} {'train':>7} {'rollout':>8} {'pairs':>9} {'seconds':>8}")
    for cards in (128, 4096):
        devices = cards * kind.devices_per_card
        start = time.perf_counter()
        train = list(enumerate_train(cfg, devices, kind))
        rollout = list(enumerate_rollout(cfg, devices, kind))
        wall = time.perf_counter() - start
        print(f"{cfg.name:<12} {cards:>6} {devices:>8} {len(train):>7} {len(rollout):>8} "
              f"{len(train) * len(rollout):>9} {wall:>8.3f}")

    print(f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6:.2f} GB (this process)")


if __name__ == "__main__":
    main()
