"""Supervised warm start of the tiny model, so that its sampled answers are sometimes right.

A randomly initialised model answers every problem wrongly: all GRPO rewards are 0, every advantage
is 0 and so is the policy gradient. A few hundred teacher-forced steps on "\\boxed{answer}" responses
to easy problems (kind "identity") make its samples right a good part of the time, so the RL steps
that follow see real, varying rewards. Runs on one thread: fastest for a model this small (several
threads oversubscribe a busy host badly) and the same result on any host for a seed.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path

from executor.cpu.math_problems import Problem
from executor.reward import PROMPT_INSTRUCTION

BATCH_SIZE = 32
LEARNING_RATE = 3e-3


def _examples(tokenizer, problems: Sequence[Problem]) -> list[tuple[list[int], list[int]]]:
    """(prompt ids as the dataset renders them, response ids ending in EOS) per problem."""
    examples = []
    for problem in problems:
        messages = [{"role": "user", "content": f"{problem.question} {PROMPT_INSTRUCTION}"}]
        prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)["input_ids"]
        response = tokenizer.encode(f"\\boxed{{{problem.ground_truth}}}", add_special_tokens=False)
        examples.append((list(prompt), [*response, tokenizer.eos_token_id]))
    return examples


def warm_start(model_dir: Path, problems: Sequence[Problem], steps: int = 200, seed: int = 0) -> float:
    """Train the model in `model_dir` in place on `problems`; returns the last batch's loss."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if steps < 1 or not problems:
        raise ValueError(f"need steps >= 1 and some problems, got steps={steps}, {len(problems)} problems")
    model_dir = Path(model_dir)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, attn_implementation="sdpa", dtype=torch.float32)
    examples = _examples(tokenizer, problems)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        loss = _train(model, tokenizer, examples, steps, seed)
    finally:
        torch.set_num_threads(threads)
    model.save_pretrained(model_dir, safe_serialization=True)
    return loss


def _train(model, tokenizer, examples: list[tuple[list[int], list[int]]], steps: int, seed: int) -> float:
    import torch

    torch.manual_seed(seed)
    rng = random.Random(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=LEARNING_RATE)
    model.train()
    loss = torch.tensor(float("nan"))
    for _ in range(steps):
        batch = [rng.choice(examples) for _ in range(BATCH_SIZE)]
        length = max(len(p) + len(r) for p, r in batch)
        input_ids = torch.full((BATCH_SIZE, length), tokenizer.pad_token_id)
        labels = torch.full((BATCH_SIZE, length), -100)
        attention_mask = torch.zeros((BATCH_SIZE, length), dtype=torch.long)
        for row, (prompt, response) in enumerate(batch):
            ids = prompt + response
            input_ids[row, : len(ids)] = torch.tensor(ids)
            attention_mask[row, : len(ids)] = 1
            labels[row, len(prompt) : len(ids)] = torch.tensor(response)
        loss = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return loss.item()
