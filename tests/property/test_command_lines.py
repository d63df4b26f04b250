"""Generated command lines: every numeric option of `twin` given values inside and outside its domain."""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

REPO = Path(__file__).resolve().parents[2]
SCENARIO = REPO / "scenarios" / "cpu-tiny-grpo.yaml"
NUMBER = st.one_of(st.integers(-5, 40), st.sampled_from([0, -1, 10**6, 2**63, 2**64]),
                   st.sampled_from(["nan", "inf", "1e3", "x", "", "--json"]))


def _argv(kind: str, a, b, c) -> tuple:
    return {
        "layouts": ("layouts", "--model", "tiny", "--cluster", "cpu", "--cards", a, "--sample", b, "--json"),
        "layouts-a3": ("layouts", "--model", "deepseek-r1", "--cards", a, "--sample", b, "--json"),
        "simulate": ("simulate", SCENARIO, "--analytical", "--json", "--seed", a, "--steps", b),
        "simulate-des": ("simulate", SCENARIO, "--json", "--seed", a, "--steps", b),
        "plan": ("plan", "--model", "tiny", "--cluster", "cpu", "--cards", a, "--top", b, "--time-limit", c, "--json",
                 "-o", "{work}/cl-plan.json"),
        "plan-a3": ("plan", "--model", "deepseek-r1", "--cards", a, "--time-limit", c, "-o", "{work}/cl-plan.json"),
    }[kind]


@settings(max_examples=60)
@given(st.sampled_from(["layouts", "layouts-a3", "simulate", "simulate-des", "plan", "plan-a3"]), NUMBER, NUMBER,
       NUMBER)
def test_generated_command_line(cli, work, kind, a, b, c) -> None:
    if kind == "plan-a3" and isinstance(a, int) and a > 0:
        a = min(a, 8)  # a deepseek plan at 128 cards is a benchmark, not a property case
    if kind == "simulate-des" and isinstance(b, int) and b > 3:
        b = 3  # each simulated step costs the full simulation
    argv = [str(x).format(work=work) for x in _argv(kind, a, b, c)]
    outcome = cli("twin", *argv, inputs=[SCENARIO])
    if outcome.code == 0 and "--json" in argv:
        json.loads(outcome.stdout)
