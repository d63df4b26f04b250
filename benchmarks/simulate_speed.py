"""Wall time of the discrete-event twin (issue: the simulator).

Run: python benchmarks/simulate_speed.py
Prints: one simulated step of C1 (256 dies), of deepseek-r1 on 4096 A3 cards (8192 dies), and of
`twin plan --model deepseek-r1 --cards 128` (screen + simulation of the best candidates).
"""

from __future__ import annotations

import resource
import time
from pathlib import Path

from twin.cost_models.reshard import RESHARD_METHODS
from twin.evaluate import Evaluation
from twin.layout.models import Layout, RolloutLayout
from twin.planner import Planner, default_scenario, search
from twin.scenario import ClusterRef, load_scenario
from twin.sim.step import simulate, simulated

ROOT = Path(__file__).resolve().parents[1]


def timed(label: str, ev: Evaluation, steps: int) -> None:
    start = time.perf_counter()
    for method in RESHARD_METHODS:  # transfer lists (the chosen method and the reported alternatives): once per layout
        ev.reshard(method)
    prep = time.perf_counter() - start
    start = time.perf_counter()
    result, _ = simulate(ev, steps=steps)
    wall = time.perf_counter() - start
    print(f"{label:<44} devices {ev.devices:>5}  reshard lists {prep:6.2f} s  {steps} step(s) {wall:6.2f} s "
          f"({wall / steps:5.3f} s/step)  predicted step {result.step_s:7.1f} s")


def main() -> None:
    c1 = load_scenario(ROOT / "scenarios" / "c1-dsr1-a3-128.yaml")
    timed("C1, DeepSeek-R1 on 128 A3 cards", Evaluation(c1), steps=1)
    timed("C1, 5 steps", Evaluation(c1), steps=5)
    big = c1.model_copy(update={
        "name": "dsr1-a3-4096", "cluster": ClusterRef(kind="a3", cards=4096),
        "layout": Layout(train=c1.layout.train, rollout=RolloutLayout(**{**c1.layout.rollout.model_dump(),
                                                                         "dp": 4096}))})
    timed("DeepSeek-R1 on 4096 A3 cards (C1's layouts)", Evaluation(big), steps=1)
    start = time.perf_counter()
    outcome = search(Planner(default_scenario("deepseek-r1", "a3", 128)), top=5, finalize=simulated)
    print(f"twin plan --model deepseek-r1 --cards 128: {time.perf_counter() - start:.1f} s, "
          f"{outcome.summary.pairs_evaluated} pairs screened, {outcome.summary.simulated} simulated")

    print(f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6:.2f} GB (this process)")


if __name__ == "__main__":
    main()
