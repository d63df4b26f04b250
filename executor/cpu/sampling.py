"""KV-cached autoregressive sampling with a transformers causal LM, one request at a time.

The log-prob of each sampled token is taken from the full-vocabulary log-softmax of the logits
divided by the temperature, before top-k/top-p filtering: the quantity verl's trainer recomputes
for the same tokens (it scales by the rollout temperature too), so the two agree to rounding.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import torch

FinishReason = Literal["stop", "length", "aborted"]


@dataclass(frozen=True)
class SamplingParams:
    """What one request asks for. temperature 0 means greedy decoding."""

    max_new_tokens: int
    temperature: float = 1.0
    top_k: int = -1
    top_p: float = 1.0
    logprobs: bool = False
    ignore_eos: bool = False

    def __post_init__(self) -> None:
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")


@dataclass(frozen=True)
class Generation:
    """Sampled tokens, their log-probs (when asked for) and why generation ended."""

    token_ids: list[int]
    log_probs: list[float] | None
    finish_reason: FinishReason


def filter_logits(logits: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    """Logits with every token outside the top-k and the top-p nucleus set to -inf (last dim)."""
    if 0 < top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
        probs = torch.softmax(sorted_logits, dim=-1)
        # drop a token when the tokens ranked above it already hold top_p of the mass
        drop_sorted = (torch.cumsum(probs, dim=-1) - probs) >= top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return logits


def next_token(logits: torch.Tensor, params: SamplingParams, generator: torch.Generator | None) -> tuple[int, float]:
    """Choose the next token from 1-D float32 logits; returns it and its log-prob."""
    scale = params.temperature if params.temperature > 0 else 1.0
    log_probs = torch.log_softmax(logits / scale, dim=-1)
    if params.temperature == 0:
        token = int(torch.argmax(logits))
    else:
        probs = torch.softmax(filter_logits(logits / scale, params.top_k, params.top_p), dim=-1)
        token = int(torch.multinomial(probs, 1, generator=generator))
    return token, float(log_probs[token])


@torch.no_grad()
def generate(
    model: torch.nn.Module,
    prompt_ids: Sequence[int],
    params: SamplingParams,
    eos_token_ids: Sequence[int],
    generator: torch.Generator | None = None,
    should_abort: Callable[[], bool] = lambda: False,
) -> Generation:
    """Sample up to `params.max_new_tokens` tokens after `prompt_ids`, reusing the KV cache."""
    if not prompt_ids:
        raise ValueError("empty prompt")
    device = next(model.parameters()).device
    input_ids = torch.tensor([list(prompt_ids)], dtype=torch.long, device=device)
    past = None
    tokens: list[int] = []
    log_probs: list[float] = []
    stop = set() if params.ignore_eos else set(eos_token_ids)
    while len(tokens) < params.max_new_tokens:
        if should_abort():
            return Generation(tokens, log_probs if params.logprobs else None, "aborted")
        out = model(input_ids=input_ids, past_key_values=past, use_cache=True, logits_to_keep=1)
        past = out.past_key_values
        token, log_prob = next_token(out.logits[0, -1].float(), params, generator)
        tokens.append(token)
        log_probs.append(log_prob)
        if token in stop:
            return Generation(tokens, log_probs if params.logprobs else None, "stop")
        input_ids = torch.tensor([[token]], dtype=torch.long, device=device)
    return Generation(tokens, log_probs if params.logprobs else None, "length")
