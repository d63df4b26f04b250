"""The KV-cached sampling loop: filtering, stopping, and log-probs equal to a full forward pass."""

from __future__ import annotations

import pytest
import torch

from executor.cpu.sampling import SamplingParams, filter_logits, generate, next_token


@pytest.fixture(scope="module")
def model(tiny_model):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(tiny_model, attn_implementation="sdpa").eval()


def test_top_k_keeps_the_k_largest() -> None:
    logits = torch.tensor([0.0, 3.0, 1.0, 2.0])
    kept = torch.isfinite(filter_logits(logits, top_k=2, top_p=1.0))
    assert kept.tolist() == [False, True, False, True]


def test_top_p_keeps_the_smallest_nucleus() -> None:
    probs = torch.tensor([0.1, 0.5, 0.15, 0.25])
    kept = torch.isfinite(filter_logits(probs.log(), top_k=-1, top_p=0.7))
    assert kept.tolist() == [False, True, False, True]  # 0.5 + 0.25 reach 0.7
    assert torch.isfinite(filter_logits(probs.log(), top_k=-1, top_p=0.01)).sum() == 1


def test_greedy_picks_the_argmax_and_reports_its_log_prob() -> None:
    logits = torch.tensor([0.0, 2.0, 1.0])
    token, log_prob = next_token(logits, SamplingParams(max_new_tokens=1, temperature=0), None)
    assert token == 1
    assert log_prob == pytest.approx(float(torch.log_softmax(logits, -1)[1]))


def test_log_probs_are_temperature_scaled_and_unfiltered() -> None:
    logits = torch.tensor([0.0, 2.0, 1.0, -1.0])
    params = SamplingParams(max_new_tokens=1, temperature=0.5, top_k=1)
    token, log_prob = next_token(logits, params, torch.Generator().manual_seed(0))
    assert token == 1  # top_k=1 leaves one candidate
    assert log_prob == pytest.approx(float(torch.log_softmax(logits / 0.5, -1)[1]))


@pytest.mark.parametrize("temperature, top_k, top_p", [(1.0, -1, 1.0), (0.7, 20, 0.9), (0.0, -1, 1.0)])
def test_cached_log_probs_match_a_full_forward(model, temperature: float, top_k: int, top_p: float) -> None:
    prompt = [1, 5, 9, 40, 77, 3, 12]
    params = SamplingParams(max_new_tokens=12, temperature=temperature, top_k=top_k, top_p=top_p, logprobs=True)
    out = generate(model, prompt, params, eos_token_ids=[], generator=torch.Generator().manual_seed(3))
    assert len(out.token_ids) == 12 and out.finish_reason == "length"
    with torch.no_grad():
        logits = model(torch.tensor([prompt + out.token_ids])).logits[0].float()
    scale = temperature if temperature > 0 else 1.0
    full = torch.log_softmax(logits / scale, dim=-1)
    expected = [float(full[len(prompt) - 1 + i, t]) for i, t in enumerate(out.token_ids)]
    assert max(abs(a - b) for a, b in zip(out.log_probs, expected, strict=True)) < 1e-5


def test_stops_at_eos_unless_ignored(model) -> None:
    prompt = [1, 5, 9]
    first = generate(model, prompt, SamplingParams(max_new_tokens=1, temperature=0), []).token_ids[0]
    stopped = generate(model, prompt, SamplingParams(max_new_tokens=8, temperature=0), [first])
    assert stopped.token_ids == [first] and stopped.finish_reason == "stop"
    assert stopped.log_probs is None
    ignored = generate(model, prompt, SamplingParams(max_new_tokens=8, temperature=0, ignore_eos=True), [first])
    assert len(ignored.token_ids) == 8 and ignored.finish_reason == "length"


def test_abort_returns_what_was_generated(model) -> None:
    calls = []

    def abort_after_three() -> bool:
        calls.append(1)
        return len(calls) > 3

    out = generate(model, [1, 2, 3], SamplingParams(max_new_tokens=10, logprobs=True), [], None, abort_after_three)
    assert out.finish_reason == "aborted" and len(out.token_ids) == 3 and len(out.log_probs) == 3


def test_invalid_params_are_rejected() -> None:
    with pytest.raises(ValueError):
        SamplingParams(max_new_tokens=0)
    with pytest.raises(ValueError):
        SamplingParams(max_new_tokens=1, top_p=0.0)
    with pytest.raises(ValueError):
        SamplingParams(max_new_tokens=1, temperature=-1.0)
