"""Named models shipped with the twin, and loading of a user's config.json."""

from __future__ import annotations

from functools import lru_cache
from importlib import resources
from pathlib import Path

from twin.catalog.config import ModelConfig, parse_config
from twin.catalog.inventory import Inventory, build_inventory, value_model
from twin.errors import TwinError
from twin.fileio import parse_mapping, read_mapping

# Catalog name -> HuggingFace repository the architecture fields were taken from
# (verbatim copies listed in ../shared/reference/models.md).
CATALOG_SOURCES: dict[str, str] = {
    "deepseek-r1": "deepseek-ai/DeepSeek-R1",
    "deepseek-v3": "deepseek-ai/DeepSeek-V3",
    "qwen2.5-1.5b": "Qwen/Qwen2.5-1.5B-Instruct",
    "qwen2.5-7b": "Qwen/Qwen2.5-7B-Instruct",
    "qwen2.5-32b": "Qwen/Qwen2.5-32B-Instruct",
    "qwen3-8b": "Qwen/Qwen3-8B",
    "qwen3-32b": "Qwen/Qwen3-32B",
    "qwen3-30b-a3b": "Qwen/Qwen3-30B-A3B",
    "qwen3-235b-a22b": "Qwen/Qwen3-235B-A22B",
    "llama2-7b": "meta-llama/Llama-2-7b-hf",
    "llama2-70b": "meta-llama/Llama-2-70b-hf",
    # not in models.md: the architecture fields as Megatron runs it (slime's scripts/models/moonlight.sh: 27 layers,
    # hidden 2048, dense FFN 11264, 64 experts of 1408 top-6, 2 shared, MLA with KV rank 512 and no query LoRA,
    # vocabulary 163840 untied), written in the HuggingFace fields; its count is tested by hand
    "moonlight-16b-a3b": "moonshotai/Moonlight-16B-A3B-Instruct",
    # not in models.md: the architecture fields of its config.json (24 layers, hidden 896, 14 query and 2 KV heads,
    # FFN 4864, tied embeddings; the model card's 0.49B parameters); its count is tested by hand
    "qwen2.5-0.5b": "Qwen/Qwen2.5-0.5B-Instruct",
    # the project's own CPU test models: executor.cpu.assets.make_tiny_model writes these architectures
    "tiny": "ascend-rl-twin/tiny (executor/cpu/assets.py)",
    "tiny-moe": "ascend-rl-twin/tiny-moe (executor/cpu/assets.py)",
    "tiny-deepseek": "ascend-rl-twin/tiny-deepseek (executor/cpu/assets.py)",
}


def catalog_names() -> list[str]:
    return sorted(CATALOG_SOURCES)


def raw_config(model: str) -> tuple[dict, str]:
    """(the HuggingFace config.json dict, a label) of a catalog name, a config.json path or its directory."""
    if model in CATALOG_SOURCES:
        text = resources.files("twin.catalog").joinpath("configs", f"{model}.json").read_text()
        return parse_mapping(text, model, "json"), model
    path = Path(model)
    if path.is_dir():
        path = path / "config.json"
    if path.suffix == ".json" or path.exists():
        return read_mapping(path, f"model config {path}", "json"), path.parent.name or str(path)
    raise TwinError(f"unknown model {model!r}; known models: {', '.join(catalog_names())} (or a config.json path)")


@lru_cache(maxsize=64)
def _load_catalog(name: str) -> ModelConfig:
    return parse_config(*raw_config(name))


def load_config(model: str) -> ModelConfig:
    """A catalog name, a path to a config.json, or a directory holding one."""
    if model in CATALOG_SOURCES:
        return _load_catalog(model)
    return parse_config(*raw_config(model))


@lru_cache(maxsize=64)
def _inventory(cfg: ModelConfig) -> Inventory:
    return build_inventory(cfg)


def load_model(model: str | ModelConfig) -> Inventory:
    """The tensor inventory of a catalog model or a config.json (cached)."""
    cfg = model if isinstance(model, ModelConfig) else load_config(model)
    return _inventory(cfg)


@lru_cache(maxsize=64)
def _value_inventory(cfg: ModelConfig) -> Inventory:
    return value_model(_inventory(cfg))


def load_value_model(model: str | ModelConfig) -> Inventory:
    """The inventory of the critic PPO trains from a catalog model or a config.json (cached: one object per model,
    which the cost models' tables are keyed on)."""
    cfg = model if isinstance(model, ModelConfig) else load_config(model)
    return _value_inventory(cfg)
