"""The tiny model, its tokenizer and the maths dataset: deterministic, offline, checkable by the reward."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pandas as pd
import pytest

from executor.cpu.assets import DATA_SOURCE, VOCAB_MULTIPLE, make_math_dataset, make_tiny_model
from executor.cpu.math_problems import KINDS, make_problems
from executor.reward import PROMPT_INSTRUCTION, compute_score
from twin.catalog.registry import load_config, load_model


def _digests(directory: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(directory.iterdir())}


def test_same_seed_same_bytes_other_seed_other_weights(tiny_model: Path, tmp_path: Path) -> None:
    again = make_tiny_model(tmp_path / "again", seed=0)
    other = make_tiny_model(tmp_path / "other", seed=1)
    assert _digests(again) == _digests(tiny_model)
    assert _digests(other)["model.safetensors"] != _digests(tiny_model)["model.safetensors"]
    assert _digests(other)["tokenizer.json"] == _digests(tiny_model)["tokenizer.json"]


def test_model_files_load_as_qwen2_in_transformers_and_the_twin(tiny_model: Path) -> None:
    from transformers import AutoModelForCausalLM

    config = json.loads((tiny_model / "config.json").read_text())
    assert config["model_type"] == "qwen2"
    twin_config = load_config(str(tiny_model))
    assert twin_config.model_type == "qwen2" and twin_config.num_layers == config["num_hidden_layers"]
    model = AutoModelForCausalLM.from_pretrained(tiny_model)
    assert model.config.vocab_size == config["vocab_size"]


@pytest.mark.parametrize(("name", "architecture"), [("tiny-moe", "Qwen3MoeForCausalLM"),
                                                    ("tiny-deepseek", "DeepseekV3ForCausalLM")])
def test_each_moe_model_is_the_twins_in_transformers_and_the_twin(tmp_path: Path, name: str, architecture: str) -> None:
    from transformers import AutoModelForCausalLM

    model_dir = make_tiny_model(tmp_path / name, seed=0, model=name)
    mine, catalog = load_config(str(model_dir)), load_config(name)
    assert mine.model_dump(exclude={"name"}) == catalog.model_dump(exclude={"name"})
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    assert type(model).__name__ == architecture
    # every checkpoint tensor: DeepSeek-V3's expert-score correction bias is a buffer in transformers, not a parameter
    assert sum(x.numel() for x in model.state_dict().values()) == load_model(name).total_params()


def test_an_unknown_tiny_model_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown tiny model"):
        make_tiny_model(tmp_path / "x", model="tiny-llama")


def test_tokenizer_newline_is_one_token_and_chat_template_is_chatml(tiny_model: Path) -> None:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    assert len(tokenizer.encode("\n", add_special_tokens=False)) == 1
    rows = json.loads((tiny_model / "config.json").read_text())["vocab_size"]  # every row a token
    assert len(tokenizer) == rows and rows % VOCAB_MULTIPLE == 0
    assert tokenizer.convert_ids_to_tokens(rows - 1).startswith("<|reserved_")
    assert tokenizer.eos_token == "<|im_end|>" and tokenizer.pad_token == "<|endoftext|>"
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": "What is 2 + 3?"}], add_generation_prompt=True, tokenize=False
    )
    assert text == "<|im_start|>user\nWhat is 2 + 3?<|im_end|>\n<|im_start|>assistant\n"
    sample = "<think>Step 1: 12 + 7 = 19.</think> \\boxed{\\frac{3}{4}}\n"
    assert tokenizer.decode(tokenizer.encode(sample, add_special_tokens=False)) == sample


def test_dataset_rows_are_verl_rl_format_and_fit_the_prompt_length(tiny_model: Path, tmp_path: Path) -> None:
    from transformers import AutoTokenizer

    train, test = make_math_dataset(tmp_path, n_train=30, n_test=6, seed=3)
    train_df, test_df = pd.read_parquet(train), pd.read_parquet(test)
    assert (len(train_df), len(test_df)) == (30, 6)
    row = train_df.iloc[0]
    (message,) = row["prompt"]
    assert row["data_source"] == DATA_SOURCE
    assert message["role"] == "user" and PROMPT_INSTRUCTION in message["content"]
    assert row["reward_model"]["style"] == "rule" and row["extra_info"]["split"] == "train"
    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    lengths = [
        len(tokenizer.apply_chat_template(list(p), add_generation_prompt=True, tokenize=True)["input_ids"])
        for p in pd.concat([train_df, test_df])["prompt"]
    ]
    assert max(lengths) <= 64
    again, _ = make_math_dataset(tmp_path / "again", n_train=30, n_test=6, seed=3)
    assert pd.read_parquet(again).equals(train_df)


def test_every_kind_of_ground_truth_is_checkable_by_the_reward() -> None:
    problems = make_problems(120, seed=11)
    assert {p.kind for p in problems} == set(KINDS)
    for problem in problems:
        assert compute_score(DATA_SOURCE, problem.solution, problem.ground_truth) == pytest.approx(1.0), problem


def test_dataset_kinds_can_be_restricted(tmp_path: Path) -> None:
    train, _ = make_math_dataset(tmp_path, n_train=10, n_test=1, kinds=("identity",))
    assert set(pd.read_parquet(train)["extra_info"].map(lambda e: e["kind"])) == {"identity"}
    with pytest.raises(ValueError, match="kinds"):
        make_math_dataset(tmp_path, n_train=1, n_test=1, kinds=("calculus",))
