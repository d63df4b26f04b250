"""Wall time of `twin plan` with --pareto and --explain on calibration case C1 (DeepSeek-R1, A3 cards), as the
command runs them (the discrete-event simulation evaluates each layout in full).

Run: python benchmarks/plan_explain_speed.py [--cards 128] [--cards 64,96,128]
Each --cards value is one plan: the searches of its card counts, then the Pareto evaluations they add (one joint
screen front across the card counts), then placing the recipe's own layout (--explain on the scenario file) in
the search of its card count. Prints the seconds and full evaluations of each part, the front's size and why it
was cut, and the explain verdict.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from twin.explain import explain_layout
from twin.pareto import front, point
from twin.planner import Planner, evaluate_front, search
from twin.scenario import load_scenario
from twin.sim.step import simulated

C1 = Path(__file__).resolve().parents[1] / "scenarios" / "c1-dsr1-a3-128.yaml"


def plan(cards: list[int]) -> None:
    """One `twin plan --scenario C1 --cards ... --pareto --explain C1` and its parts' times."""
    sc = load_scenario(C1)
    start = time.perf_counter()
    searches = [(p, search(p, 5, finalize=simulated)) for p in (
        Planner(sc.model_copy(update={"layout": None, "cluster": sc.cluster.model_copy(update={"cards": n})}))
        for n in cards)]
    t_search, n_search = time.perf_counter() - start, sum(o.summary.simulated for _, o in searches)
    start = time.perf_counter()
    evaluate_front(searches, simulated)
    everything = [point(e.layout, e.result) for _, o in searches for e in o.evaluated]
    pts = front(everything)
    t_pareto = time.perf_counter() - start
    n_pareto = sum(o.summary.simulated for _, o in searches) - n_search
    cut = "; ".join(f"{p.sc.cluster.cards}: {o.summary.front_stopped}" for p, o in searches if o.summary.front_stopped)
    where = next(((p, o) for p, o in searches if p.sc.cluster.cards == sc.cluster.cards), None)
    t_explain, summary, n_explain = 0.0, "(C1's card count not planned)", 0
    if where:
        start = time.perf_counter()
        ex = explain_layout(*where, str(C1), simulated)
        t_explain, summary, n_explain = time.perf_counter() - start, ex.summary, ex.evaluated
        if ex.versus:
            summary += f" [deciding stage {ex.versus.deciding_stage}, +{ex.versus.deciding_delta_s:.1f} s]"
    label = ",".join(map(str, cards))
    print(f"cards {label}: search {t_search:.1f} s ({n_search} full), --pareto adds {t_pareto:.1f} s ({n_pareto} "
          f"full; {len(pts)} of {len(everything)} on the front), --explain adds {t_explain:.1f} s ({n_explain} full); "
          f"total {t_search + t_pareto + t_explain:.1f} s", flush=True)
    if cut:
        print(f"  front cut: {cut}")
    print(f"  explain C1's layout: {summary}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cards", action="append", help="card counts of one plan, comma separated (repeatable)")
    args = parser.parse_args()
    for value in args.cards or ["128"]:
        plan(sorted(int(c) for c in value.split(",")))


if __name__ == "__main__":
    main()
