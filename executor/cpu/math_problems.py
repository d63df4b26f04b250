"""Small arithmetic and algebra problems with exact answers the MATH reward can check.

Each problem is a question, its ground truth as LaTeX (an integer or a reduced \\frac), and a worked
solution in the reward's required format (used to train the tiny tokenizer, never shown to the model).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

KINDS = ("add", "sub", "mul", "linear", "fraction", "identity")
"""Problem kinds. "identity" (a + 0, a * 1) is the one a tiny model learns within seconds."""


@dataclass(frozen=True)
class Problem:
    kind: str
    question: str
    answer: Fraction

    @property
    def ground_truth(self) -> str:
        """The answer as LaTeX: '12', '-3' or '\\frac{3}{4}'."""
        if self.answer.denominator == 1:
            return str(self.answer.numerator)
        sign = "-" if self.answer < 0 else ""
        return f"{sign}\\frac{{{abs(self.answer.numerator)}}}{{{self.answer.denominator}}}"

    @property
    def solution(self) -> str:
        """A worked solution in the required format."""
        return (
            f"<think>Step 1: {self.question} Step 2: compute it, therefore the result is "
            f"{self.answer}.</think> The answer is \\boxed{{{self.ground_truth}}}."
        )


def make_problem(rng: random.Random, kinds: Sequence[str] = KINDS) -> Problem:
    """One random problem of a kind drawn uniformly from `kinds`."""
    unknown = sorted(set(kinds) - set(KINDS))
    if unknown or not kinds:
        raise ValueError(f"problem kinds must be a non-empty subset of {KINDS}, got {list(kinds)}")
    kind = rng.choice(list(kinds))
    a, b = rng.randint(2, 20), rng.randint(2, 20)
    if kind == "add":
        return Problem(kind, f"What is {a} + {b}?", Fraction(a + b))
    if kind == "sub":
        return Problem(kind, f"What is {a} - {b}?", Fraction(a - b))
    if kind == "mul":
        return Problem(kind, f"What is {a} * {b}?", Fraction(a * b))
    if kind == "linear":
        x, c = rng.randint(-9, 9), rng.randint(1, 9)
        return Problem(kind, f"Solve for x: {c}x + {a} = {c * x + a}.", Fraction(x))
    if kind == "fraction":
        return Problem(kind, f"What is 1/{a} + 1/{b}?", Fraction(1, a) + Fraction(1, b))
    return Problem(kind, f"What is {a} + 0?" if b % 2 else f"What is {a} * 1?", Fraction(a))


def make_problems(n: int, seed: int, kinds: Sequence[str] = KINDS) -> list[Problem]:
    """`n` problems drawn deterministically from `seed`."""
    rng = random.Random(seed)
    return [make_problem(rng, kinds) for _ in range(n)]
