"""The MATH reward on real answers, scored with the real math_verify."""

from __future__ import annotations

import threading

import pytest

from executor.reward import (
    CORRECT_SCORE,
    FORMAT_SCORE,
    REASONING_SCORE,
    compute_score,
    has_ordered_reasoning,
    has_required_format,
)

REASONING = "Step 1: 1/4 + 1/4 = 2/4. Step 2: 2/4 has a common factor 2, therefore it is 1/2."


def score(response: str, ground_truth: str = "\\frac{1}{2}") -> float:
    return compute_score("ascend-rl-twin/tiny-math", response, ground_truth, extra_info={"index": 0})


@pytest.mark.parametrize("answer", ["1/2", "0.5", "\\frac{1}{2}", "\\dfrac{1}{2}", "2/4", "0.50"])
def test_equivalent_boxed_answers_score_full_marks(answer: str) -> None:
    response = f"<think>{REASONING}</think> The answer is \\boxed{{{answer}}}."
    assert score(response) == pytest.approx(CORRECT_SCORE + FORMAT_SCORE + REASONING_SCORE)


@pytest.mark.parametrize("answer", ["1/3", "2", "-1/2", "0.55"])
def test_wrong_answer_scores_zero_even_when_well_formed(answer: str) -> None:
    assert score(f"<think>{REASONING}</think> \\boxed{{{answer}}}") == 0.0


def test_integer_and_negative_ground_truths() -> None:
    assert score("<think>Step 1: 4 + 12. Step 2: so 16</think>\\boxed{16}", "16") == pytest.approx(1.0)
    assert score("\\boxed{-3}", "-3") == pytest.approx(CORRECT_SCORE)
    assert score("\\boxed{3}", "-3") == 0.0


def test_missing_format_keeps_correctness_and_reasoning() -> None:
    response = f"{REASONING} So the answer is 1/2."
    assert not has_required_format(response)
    assert score(response) == pytest.approx(CORRECT_SCORE + REASONING_SCORE)


@pytest.mark.parametrize(
    "response",
    [
        "\\boxed{1/2}",  # no reasoning block
        "<think></think> \\boxed{1/2}",  # empty reasoning block
        "<think>a</think> the answer is 1/2",  # no boxed answer after the block
        "Some preamble <think>a</think> \\boxed{1/2}",  # block not first
        "<think>a</think><think>b</think> \\boxed{1/2}",  # two blocks
    ],
)
def test_format_violations_lose_the_format_points(response: str) -> None:
    assert not has_required_format(response)
    assert score(response) == pytest.approx(CORRECT_SCORE)


def test_missing_reasoning_loses_the_reasoning_points() -> None:
    assert score("<think>1/4 + 1/4 = 1/2</think> \\boxed{1/2}") == pytest.approx(CORRECT_SCORE + FORMAT_SCORE)


@pytest.mark.parametrize(
    "reasoning, ordered",
    [
        ("Step 1: add. Step 2: reduce, therefore 1/2.", True),
        ("First add the quarters, then reduce, so 1/2.", True),
        ("Step 2: reduce. Step 1: add, therefore 1/2.", False),  # out of order
        ("Step 1: add, therefore 1/2.", False),  # one step only
        ("Step 1: add. Step 2: reduce to 1/2.", False),  # no logic keyword
        ("Step 1: add. Step 3: reduce, thus 1/2.", False),  # a step skipped
    ],
)
def test_ordered_chain_of_thought(reasoning: str, ordered: bool) -> None:
    assert has_ordered_reasoning(f"<think>{reasoning}</think> \\boxed{{1/2}}") is ordered


def test_only_the_text_after_the_reasoning_is_the_answer() -> None:
    # 1/2 appears in the reasoning, the final answer is wrong
    assert score(f"<think>{REASONING}</think> \\boxed{{3/4}}") == 0.0


def test_empty_and_garbage_responses_score_zero() -> None:
    assert score("") == 0.0
    assert score("\u0005\u0019 in{}. boxed") == 0.0


def test_scores_the_same_outside_the_main_thread() -> None:
    """verl's reward loop calls reward functions from executor threads (no SIGALRM there)."""
    response = f"<think>{REASONING}</think> \\boxed{{0.5}}"
    results: list[float] = []
    thread = threading.Thread(target=lambda: results.append(score(response)))
    thread.start()
    thread.join()
    assert results == [pytest.approx(1.0)]
