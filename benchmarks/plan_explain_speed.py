"""Wall time of `twin plan` with --pareto and --explain on calibration case C1 (DeepSeek-R1, 128 A3 cards),
as the command runs it (the discrete-event simulation evaluates each layout in full).

Run: python benchmarks/plan_explain_speed.py [--cards 64,96,128]
Prints the time of the plain search, of the Pareto evaluations it adds, and of placing the recipe's own
layout (--explain on the scenario file), with how many layouts each evaluated in full and the explain verdict.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from twin.explain import explain_layout
from twin.pareto import front, point
from twin.planner import Planner, evaluate_front, evaluate_headroom_variants, search
from twin.scenario import load_scenario
from twin.sim.step import simulated

C1 = Path(__file__).resolve().parents[1] / "scenarios" / "c1-dsr1-a3-128.yaml"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cards", default="128", help="card counts, comma separated")
    args = parser.parse_args()
    sc = load_scenario(C1)
    print(f"{'cards':>5} {'search s':>9} {'full':>5} {'pareto s':>9} {'full':>5} {'front':>6} {'explain s':>10} "
          f"{'full':>5}  explain of the recipe's layout")
    for cards in (int(c) for c in args.cards.split(",")):
        planner = Planner(sc.model_copy(update={"layout": None, "cluster": sc.cluster.model_copy(
            update={"cards": cards})}))
        start = time.perf_counter()
        outcome = search(planner, 5, finalize=simulated)
        t_search, n_search = time.perf_counter() - start, outcome.summary.simulated
        start = time.perf_counter()
        evaluate_front(planner, outcome, simulated)
        evaluate_headroom_variants(planner, outcome, simulated)
        pts = front([point(e.layout, e.result) for e in (*outcome.evaluated, *outcome.headroom_variants)])
        t_pareto, n_pareto = time.perf_counter() - start, outcome.summary.simulated - n_search
        start = time.perf_counter()
        ex = explain_layout(planner, outcome, str(C1), simulated)
        t_explain = time.perf_counter() - start
        print(f"{cards:>5} {t_search:>9.1f} {n_search:>5} {t_pareto:>9.1f} {n_pareto:>5} {len(pts):>6} "
              f"{t_explain:>10.1f} {ex.evaluated:>5}  {ex.summary}")


if __name__ == "__main__":
    main()
