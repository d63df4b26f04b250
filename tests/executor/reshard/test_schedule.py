"""The executor's round packing (a bipartite edge colouring of its own) against the twin's count of the reshard's
collective rounds: both must find as many all-to-all-v calls as the busiest sender or receiver has chunks."""

from collections import Counter
from pathlib import Path

import pytest

from executor.reshard.schedule import build_schedule
from twin.evaluate import Evaluation
from twin.scenario import load_scenario

SCENARIOS = Path(__file__).resolve().parents[3] / "scenarios"


@pytest.mark.parametrize(("name", "calls", "busiest_receiver"), [
    # C4: DeepSeek-R1 train TP1 PP2 EP4 -> rollout EP8 on 8 dies; a sender has more chunks than any receiver
    ("c4-dsr1-reshard-8dies", 3453, 3404),
    ("cpu-tiny-grpo", 9, 9),  # the CPU loop's FSDP2 -> vLLM TP2: each rank sends and receives 9 chunks
])
def test_the_schedule_takes_as_many_rounds_as_the_twin_counts(name: str, calls: int, busiest_receiver: int) -> None:
    ev = Evaluation(load_scenario(SCENARIOS / f"{name}.yaml"))
    st = ev.reshard("directed")
    (step,) = build_schedule(ev.placement, "directed").steps
    assert (len(step.rounds), st.collective_rounds, st.rounds_max) == (calls, calls, busiest_receiver)
    for round_ in step.rounds:  # at most one chunk out of and one into each rank per round
        assert max(Counter(p.src for p in round_).values()) == 1
        assert max(Counter(p.dst for p in round_).values()) == 1
    sent = Counter(p.src for r in step.rounds for p in r)
    assert [sent[d] for d in range(len(st.sent_rounds))] == st.sent_rounds.tolist()
