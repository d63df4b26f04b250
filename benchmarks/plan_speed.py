"""Wall time, peak memory and result of `twin plan` for DeepSeek-R1 from 128 to 8192 cards on A3 and A2.

Run: python benchmarks/plan_speed.py [--cases a3:128,a2:128,a3:8192,a2:8192]
Each case runs in its own process (the search as `twin plan` runs it: screen, then the discrete-event
simulation of the best candidates), so its peak memory (resource.getrusage, maximum resident set) is its own.
Also prints the analytical model's step time and TPS for calibration case C1 beside the measured values.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CASES = "a3:128,a2:128,a3:8192,a2:8192"


def one(kind: str, cards: int) -> dict:
    """Plan one case in this process; its figures as a dict."""
    from twin.planner import Planner, default_scenario, search
    from twin.sim.step import simulated

    start = time.perf_counter()
    outcome = search(Planner(default_scenario("deepseek-r1", kind, cards)), top=5, finalize=simulated)
    wall = time.perf_counter() - start
    s = outcome.summary
    best = outcome.ranked[0] if outcome.ranked else None
    return {"kind": kind, "cards": cards, "wall_s": wall, "peak_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
            / 1e6, "train": s.train_layouts, "rollout": s.rollout_layouts, "pairs": s.pairs_evaluated,
            "fit": s.pairs_fitting, "full": s.simulated, "step_s": best.step_s if best else None,
            "tps_per_card": best.tps_per_card if best else None,
            "layout": f"{outcome.plan.layout.train.short()} | {outcome.plan.layout.rollout.short()}"
            if outcome.plan else None, "stopped": s.stopped}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cases", default=CASES, help="kind:cards,...")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # kind:cards, run in this process, print JSON
    args = parser.parse_args()
    if args.one:
        kind, cards = args.one.split(":")
        print(json.dumps(one(kind, int(cards))))
        return
    print(f"{'case':<20} {'train':>6} {'rollout':>8} {'pairs':>8} {'fit':>7} {'full':>5} {'wall s':>8} {'peak GB':>8} "
          f"{'step s':>8} {'TPS/card':>9}  layout")
    for case in args.cases.split(","):
        proc = subprocess.run([sys.executable, __file__, "--one", case], capture_output=True, text=True, cwd=ROOT)
        if proc.returncode:
            print(f"deepseek-r1 {case}: failed: {proc.stderr.strip().splitlines()[-1:]}")
            continue
        r = json.loads(proc.stdout.strip().splitlines()[-1])
        step = f"{r['step_s']:.1f}" if r["step_s"] else "none fits"
        tps = f"{r['tps_per_card']:.1f}" if r["tps_per_card"] else "-"
        print(f"deepseek-r1 {r['kind']} {r['cards']:<8} {r['train']:>6} {r['rollout']:>8} {r['pairs']:>8} "
              f"{r['fit']:>7} {r['full']:>5} {r['wall_s']:>8.1f} {r['peak_gb']:>8.2f} {step:>8} {tps:>9}  "
              f"{r['layout']}")
        if r["stopped"]:
            print(f"  stopped early: {r['stopped']}")
    from twin.evaluate import Evaluation
    from twin.scenario import load_scenario

    sc = load_scenario(ROOT / "scenarios" / "c1-dsr1-a3-128.yaml")
    r = Evaluation(sc).analytical(alternatives=False)
    m = sc.measured
    print(f"\nC1 analytical: step {r.step_s:.1f} s (measured {m.step_s}), TPS/card {r.tps_per_card:.1f} "
          f"(measured {m.tps_per_card})")


if __name__ == "__main__":
    main()
