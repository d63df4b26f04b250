"""The tiny model and maths dataset of the CPU target, made offline and deterministically.

`make_tiny_model` writes a Qwen2-architecture model (config.json, random float32 weights as
safetensors, generation_config.json) with a small byte-level BPE tokenizer trained here with the
`tokenizers` library: Qwen's pre-tokenizer split (digits one by one, "\\n" alone, so "\\n" is exactly
one token, as verl's Qwen token builder requires), ChatML special tokens and chat template (DeepSeek's for the
DeepSeek-V3 variant).
`make_math_dataset` writes verl-format parquet files of `math_problems` whose prompts ask for the
format the MATH reward (`executor.reward`) scores.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from executor.cpu.math_problems import KINDS, Problem, make_problems
from executor.reward import PROMPT_INSTRUCTION

DATA_SOURCE = "ascend-rl-twin/tiny-math"
"""data_source of every row: unknown to verl's built-in scorers, so only the custom reward can score it."""


@dataclass(frozen=True)
class ChatFormat:
    """A model family's special tokens and chat template."""

    special: tuple[str, ...]
    eos: str
    pad: str
    template: str


CHATML = ChatFormat(
    special=("<|endoftext|>", "<|im_start|>", "<|im_end|>"), eos="<|im_end|>", pad="<|endoftext|>",
    template="{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
             "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
"""Qwen's."""
DEEPSEEK_CHAT = ChatFormat(
    special=("<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>", "<｜▁pad▁｜>"),
    eos="<｜end▁of▁sentence｜>", pad="<｜▁pad▁｜>",
    template="<｜begin▁of▁sentence｜>{% for message in messages %}{% if message['role'] == 'user' %}<｜User｜>"
             "{{ message['content'] }}{% else %}<｜Assistant｜>{{ message['content'] }}<｜end▁of▁sentence｜>{% endif %}"
             "{% endfor %}{% if add_generation_prompt %}<｜Assistant｜>{% endif %}")
"""DeepSeek-V3's tokens (fullwidth bars, lower one-eighth blocks) and turn layout, without R1's thinking prefix: verl
picks its rollout token builder by config.json model_type, and its DeepSeek builder requires DeepSeek's
end-of-sentence token (verl/utils/tokenizer/continuous_token.py `DeepSeekContinuousTokenBuilder`)."""
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
DEEPSEEK_SHAPE = {
    "num_key_value_heads": 4,  # MLA: every head has its keys and values (transformers repeats them by heads / this)
    "moe_intermediate_size": 128,
    "n_routed_experts": 4,
    "num_experts_per_tok": 2,
    "n_shared_experts": 1,
    "n_group": 1,
    "topk_group": 1,
    "topk_method": "noaux_tc",
    "scoring_func": "sigmoid",
    "norm_topk_prob": True,
    "routed_scaling_factor": 1.0,
    "first_k_dense_replace": 1,
    "q_lora_rank": 32,
    "kv_lora_rank": 512,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "v_head_dim": 128,
}
"""The DeepSeek-V3 variant (`tiny-deepseek`): multi-latent attention with a compressed query, a dense first layer,
then a sigmoid router with expert-score correction bias (DeepSeek-R1's `noaux_tc`) over 4 routed experts, top-2,
beside one shared expert. The latent is DeepSeek-V3's own size, 512 + 64 = 576: vLLM's CPU MLA kernel is built for
that size only (vllm/v1/attention/backends/mla/cpu_mla.py `get_supported_head_sizes`). The head dims are DeepSeek-V3's
too (128 nope + 64 rope for queries and keys, 128 for values); only the heads (4) and the hidden size are small."""
TINY_MODELS = {"tiny": ("Qwen2", {}, CHATML), "tiny-moe": ("Qwen3Moe", MOE_SHAPE, CHATML),
               "tiny-deepseek": ("DeepseekV3", DEEPSEEK_SHAPE, DEEPSEEK_CHAT)}
"""The twin's catalog names of what make_tiny_model writes: (transformers' architecture prefix, the shape beyond
MODEL_SHAPE, the chat format of its tokenizer)."""


def _tokenizer_corpus() -> list[str]:
    problems = make_problems(*TOKENIZER_CORPUS)
    roles = "system user assistant 0 1 2 3 4 5 6 7 8 9 \n"
    return [roles, *(f"{p.question} {PROMPT_INSTRUCTION}\n{p.solution}\n" for p in problems)]


def build_tokenizer(chat: ChatFormat = CHATML):
    """A byte-level BPE `PreTrainedTokenizerFast` with the special tokens and template of `chat` (deterministic)."""
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
        special_tokens=list(chat.special),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    backend.train_from_iterator(_tokenizer_corpus(), trainer)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, eos_token=chat.eos, pad_token=chat.pad)
    reserved = -len(tokenizer) % VOCAB_MULTIPLE
    tokenizer.add_special_tokens({"additional_special_tokens": [RESERVED_TOKEN.format(i) for i in range(reserved)]})
    tokenizer.chat_template = chat.template
    return tokenizer


def make_tiny_model(out_dir: Path, seed: int = 0, model: str = "tiny") -> Path:
    """Write the tiny model `model` (one of TINY_MODELS: Qwen2, Qwen3-MoE or DeepSeek-V3) and its tokenizer to
    `out_dir` (same bytes for the same seed)."""
    import torch
    import transformers
    from transformers import GenerationConfig

    if model not in TINY_MODELS:
        raise ValueError(f"unknown tiny model {model!r}; choose one of {', '.join(TINY_MODELS)}")
    architecture, shape, chat = TINY_MODELS[model]
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer(chat)
    tokenizer.save_pretrained(out_dir)
    eos_id, pad_id = tokenizer.convert_tokens_to_ids([chat.eos, chat.pad])
    config = getattr(transformers, f"{architecture}Config")(
        vocab_size=len(tokenizer),
        tie_word_embeddings=False,
        bos_token_id=None,
        eos_token_id=eos_id,
        pad_token_id=pad_id,
        dtype="float32",
        **{**MODEL_SHAPE, **shape},
    )
    torch.manual_seed(seed)
    weights = getattr(transformers, f"{architecture}ForCausalLM")(config)
    weights.save_pretrained(out_dir, safe_serialization=True)
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
