"""Wall time of `twin plan` and how many layouts it evaluates (issue: memory/reshard/plan).

Run: python benchmarks/plan_speed.py
Also prints the analytical model's step time and TPS for calibration case C1 beside the measured values.
"""

from __future__ import annotations

import time
from pathlib import Path

from twin.evaluate import Evaluation
from twin.planner import Planner, default_scenario, search
from twin.scenario import load_scenario

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    print(f"{'case':<24} {'train':>6} {'rollout':>8} {'pairs':>8} {'fit':>7} {'full':>5} {'wall s':>7} "
          f"{'best step s':>12} {'TPS/card':>9}")
    for kind, cards in (("a3", 128), ("a2", 128), ("a3", 4096)):
        start = time.perf_counter()
        outcome = search(Planner(default_scenario("deepseek-r1", kind, cards)), top=5)
        wall = time.perf_counter() - start
        s = outcome.summary
        best = outcome.ranked[0] if outcome.ranked else None
        step = f"{best.step_s:.1f}" if best else "none fits"
        tps = f"{best.tps_per_card:.1f}" if best else "-"
        print(f"deepseek-r1 {kind} {cards:<12} {s.train_layouts:>6} {s.rollout_layouts:>8} {s.pairs_evaluated:>8} "
              f"{s.pairs_fitting:>7} {s.simulated:>5} {wall:>7.2f} {step:>12} {tps:>9}")
    sc = load_scenario(ROOT / "scenarios" / "c1-dsr1-a3-128.yaml")
    r = Evaluation(sc).analytical(alternatives=False)
    m = sc.measured
    print(f"\nC1 analytical: step {r.step_s:.1f} s (measured {m.step_s}), TPS/card {r.tps_per_card:.1f} "
          f"(measured {m.tps_per_card})")


if __name__ == "__main__":
    main()
