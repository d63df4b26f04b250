"""The tiny model and maths dataset of the CPU target, made offline and deterministically.

`make_tiny_model` writes a Qwen2-architecture model (config.json, random float32 weights as
safetensors, generation_config.json) with a small byte-level BPE tokenizer trained here with the
`tokenizers` library: Qwen's pre-tokenizer split (digits one by one, "\\n" alone, so "\\n" is exactly
one token, as verl's Qwen token builder requires), ChatML special tokens and chat template.
`make_math_dataset` writes verl-format parquet files of `math_problems` whose prompts ask for the
format the MATH reward (`executor.reward`) scores.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from executor.cpu.math_problems import KINDS, Problem, make_problems
from executor.reward import PROMPT_INSTRUCTION

DATA_SOURCE = "ascend-rl-twin/tiny-math"
"""data_source of every row: unknown to verl's built-in scorers, so only the custom reward can score it."""

SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
EOS_TOKEN, PAD_TOKEN = "<|im_end|>", "<|endoftext|>"
CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
# Qwen2's pre-tokenizer split: words, single digits, punctuation runs, newlines apart.
SPLIT_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
VOCAB_SIZE = 512
VOCAB_MULTIPLE = 256
"""The tokenizer is filled up with reserved special tokens to a multiple of this (as Qwen reserves extra tokens),
and the model has one row per token (512). verl's Megatron engine splits the rows over TP unpadded, as the plan's
placement holds them (twin/cost_models/placement.py TRAIN_VOCAB_MULTIPLE), and Megatron asserts that TP divides
them: a multiple of 256 lets every power-of-two TP up to 256 do so, the CPU loop's TP2 with room. Rows beyond
the tokenizer instead would not do: vLLM samples and scores the tokenizer's ids only, and the rollout's and the
trainer's log-probs then differ by about 4e-3 (measured on the FSDP2 loop; 2e-6 with every row a token)."""
RESERVED_TOKEN = "<|reserved_{}|>"
TOKENIZER_CORPUS = (2000, 1234)
"""(problems, seed) of the tokenizer's training corpus; independent of the model seed."""

MODEL_SHAPE = {
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 512,
}
MOE_SHAPE = {
    "head_dim": 32,
    "moe_intermediate_size": 128,
    "num_experts": 4,
    "num_experts_per_tok": 2,
    "norm_topk_prob": True,
    "decoder_sparse_step": 1,
    "mlp_only_layers": [],
}
"""The MoE variant (`tiny-moe`, Qwen3-MoE architecture): every layer's MLP is 4 routed experts, top-2, as the
recipes' MoE models route; the same attention, vocabulary and tokenizer as the dense one."""
TINY_MODELS = ("tiny", "tiny-moe")  # the twin's catalog names of what make_tiny_model writes


def _tokenizer_corpus() -> list[str]:
    problems = make_problems(*TOKENIZER_CORPUS)
    roles = "system user assistant 0 1 2 3 4 5 6 7 8 9 \n"
    return [roles, *(f"{p.question} {PROMPT_INSTRUCTION}\n{p.solution}\n" for p in problems)]


def build_tokenizer():
    """A byte-level BPE `PreTrainedTokenizerFast` with ChatML specials (deterministic)."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(SPLIT_PATTERN), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    backend.train_from_iterator(_tokenizer_corpus(), trainer)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, eos_token=EOS_TOKEN, pad_token=PAD_TOKEN)
    reserved = -len(tokenizer) % VOCAB_MULTIPLE
    tokenizer.add_special_tokens({"additional_special_tokens": [RESERVED_TOKEN.format(i) for i in range(reserved)]})
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def make_tiny_model(out_dir: Path, seed: int = 0, model: str = "tiny") -> Path:
    """Write the tiny model `model` (one of TINY_MODELS: Qwen2, or Qwen3-MoE) and its tokenizer to `out_dir`
    (same bytes for the same seed)."""
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM, Qwen3MoeConfig, Qwen3MoeForCausalLM

    if model not in TINY_MODELS:
        raise ValueError(f"unknown tiny model {model!r}; choose one of {', '.join(TINY_MODELS)}")
    moe = model == "tiny-moe"
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer()
    tokenizer.save_pretrained(out_dir)
    eos_id, pad_id = tokenizer.convert_tokens_to_ids([EOS_TOKEN, PAD_TOKEN])
    config = (Qwen3MoeConfig if moe else Qwen2Config)(
        vocab_size=len(tokenizer),
        tie_word_embeddings=False,
        bos_token_id=None,
        eos_token_id=eos_id,
        pad_token_id=pad_id,
        dtype="float32",
        **MODEL_SHAPE,
        **(MOE_SHAPE if moe else {}),
    )
    torch.manual_seed(seed)
    model = (Qwen3MoeForCausalLM if moe else Qwen2ForCausalLM)(config)
    model.save_pretrained(out_dir, safe_serialization=True)
    GenerationConfig(eos_token_id=eos_id, pad_token_id=pad_id).save_pretrained(out_dir)
    return out_dir


def _row(problem: Problem, split: str, index: int) -> dict:
    return {
        "data_source": DATA_SOURCE,
        "prompt": [{"role": "user", "content": f"{problem.question} {PROMPT_INSTRUCTION}"}],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": problem.ground_truth},
        "extra_info": {"split": split, "index": index, "kind": problem.kind, "question": problem.question},
    }


def make_math_dataset(
    out_dir: Path, n_train: int, n_test: int, seed: int = 0, *, kinds: Sequence[str] = KINDS
) -> tuple[Path, Path]:
    """Write train.parquet and test.parquet (verl's RL format) to `out_dir`; returns their paths."""
    import pandas as pd

    if n_train < 1 or n_test < 1:
        raise ValueError(f"need at least one train and one test problem, got {n_train} and {n_test}")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    problems = make_problems(n_train + n_test, seed, kinds)
    paths = []
    for split, chunk in (("train", problems[:n_train]), ("test", problems[n_train:])):
        path = out_dir / f"{split}.parquet"
        pd.DataFrame([_row(p, split, i) for i, p in enumerate(chunk)]).to_parquet(path, index=False)
        paths.append(path)
    return paths[0], paths[1]
