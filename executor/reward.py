"""The recipes' MATH reward as a verl custom reward function (`reward.custom_reward_function`).

Total 1.0, correctness first: a wrong (or missing) answer scores 0 and nothing else is judged. A right
answer scores 0.7, plus 0.2 for the required format, plus 0.1 for an ordered chain of thought.

- Required format: the response is one reasoning block, then the answer, then nothing else inside
  tags: ``<think> reasoning </think> ... \\boxed{answer} ...`` - it starts (after whitespace) with
  ``<think>``, has exactly one non-empty ``<think>...</think>`` block, and a ``\\boxed{}`` after it.
  `PROMPT_INSTRUCTION` asks for exactly this.
- Answer: the text after the last ``</think>`` (the whole response when there is none), parsed by
  math_verify (a ``\\boxed{}`` answer first, else the last expression); correct when math_verify's
  `verify` finds it equal to the ground truth, so 1/2, 0.5, \\frac{1}{2} and 2/4 are one answer.
- Ordered chain of thought: in the reasoning (inside ``<think>`` when present, else the whole
  response), step markers "Step 1", "Step 2", ... numbered 1..k in order with k >= 2, or "first"
  followed later by "then", "next" or "second"; and at least one logic keyword (`LOGIC_KEYWORDS`).
"""

from __future__ import annotations

import re
import threading
from typing import Any

CORRECT_SCORE = 0.7
FORMAT_SCORE = 0.2
REASONING_SCORE = 0.1

PROMPT_INSTRUCTION = r"Think step by step in <think></think>, then answer in \boxed{}."
"""Appended to every dataset question: the format `compute_score` rewards."""

LOGIC_KEYWORDS = ("therefore", "thus", "hence", "so", "because", "since", "implies")

_THINK = re.compile(r"<think>(.*?)</think>", re.DOTALL)
_FORMAT = re.compile(r"\s*<think>(?P<reasoning>.*?)</think>(?P<answer>.*)", re.DOTALL)
_STEP = re.compile(r"\bstep\s+(\d+)\b", re.IGNORECASE)
_FIRST_THEN = re.compile(r"\bfirst\b.*\b(?:then|next|second)\b", re.IGNORECASE | re.DOTALL)
_KEYWORD = re.compile(r"\b(?:" + "|".join(LOGIC_KEYWORDS) + r")\b", re.IGNORECASE)
_BOXED = "\\boxed{"


def _timeout() -> int | None:
    # math_verify times out with SIGALRM, which only the main thread may set; verl calls reward
    # functions from an executor thread.
    return 5 if threading.current_thread() is threading.main_thread() else None


def is_correct(solution_str: str, ground_truth: str) -> bool:
    """math_verify equivalence of the response's answer (see module doc) and the ground truth."""
    from math_verify import parse, verify

    answer_part = solution_str.rsplit("</think>", 1)[-1]
    timeout = _timeout()
    gold = parse(f"${ground_truth}$", parsing_timeout=timeout)
    answer = parse(answer_part, parsing_timeout=timeout)
    if not gold or not answer:
        return False
    return bool(verify(gold, answer, timeout_seconds=timeout))


def has_required_format(solution_str: str) -> bool:
    """One leading, non-empty <think>...</think> block followed by a \\boxed{} answer."""
    match = _FORMAT.fullmatch(solution_str)
    if match is None or len(_THINK.findall(solution_str)) != 1 or "<think>" in match["answer"]:
        return False
    return bool(match["reasoning"].strip()) and _BOXED in match["answer"]


def has_ordered_reasoning(solution_str: str) -> bool:
    """Ordered step markers (or first..then) and a logic keyword in the reasoning."""
    blocks = _THINK.findall(solution_str)
    reasoning = blocks[0] if blocks else solution_str
    steps = [int(n) for n in _STEP.findall(reasoning)]
    ordered = (len(steps) >= 2 and steps == list(range(1, len(steps) + 1))) or bool(_FIRST_THEN.search(reasoning))
    return ordered and bool(_KEYWORD.search(reasoning))


def compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: str,
    extra_info: dict[str, Any] | None = None,
    **kwargs: Any,
) -> float:
    """verl's reward-function signature (reward loop: data_source, solution_str, ground_truth,
    extra_info as keywords); returns the score in [0, 1]."""
    if not is_correct(solution_str, str(ground_truth)):
        return 0.0
    score = CORRECT_SCORE
    if has_required_format(solution_str):
        score += FORMAT_SCORE
    if has_ordered_reasoning(solution_str):
        score += REASONING_SCORE
    return round(score, 6)
