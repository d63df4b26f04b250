"""The Ascend recipe optimizations (DESIGN section 6): ids, what each does, how the executor applies it.

The ids are part of the scenario and plan formats. The twin models the effect of each; the executor
applies each (executor/npu_opt/, one module per id). `EXECUTOR_SUPPORT` says which layouts the executor's
implementation runs today: `twin plan` marks a plan whose layout one of them refuses, and `executor run`
refuses such a plan before anything starts, both from `executor_refusals` (the twin does not import the
executor, DESIGN section 2, so the facts live here).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal, get_args

from pydantic import BaseModel, ConfigDict

if TYPE_CHECKING:
    from twin.catalog.config import ModelConfig
    from twin.layout.models import Layout

OptimizationId = Literal[
    "skip_old_log_prob",
    "directed_reshard",
    "no_sleep_mode",
    "late_kv_cache_init",
    "dp_group_ports",
    "vllm_ascend_patch_first",
    "chunked_prefill",
    "hccl_eos_sync",
    "graph_mode",
    "d2d_tensor_cache",
    "math_reward",
]


class OptimizationInfo(BaseModel):
    model_config = ConfigDict(frozen=True)

    id: OptimizationId
    summary: str
    mechanism: str  # how verl gets it: config, env, patch, native
    twin_effect: str  # what the twin changes when it is on


OPTIMIZATIONS: dict[str, OptimizationInfo] = {
    o.id: o
    for o in (
        OptimizationInfo(
            id="skip_old_log_prob",
            summary="on-policy GRPO reuses the rollout's log-probs instead of a second forward",
            mechanism="config: algorithm.rollout_correction.bypass_mode + rollout.calculate_log_probs",
            twin_effect="old_log_prob stage takes 0 s",
        ),
        OptimizationInfo(
            id="directed_reshard",
            summary="experts sent by all-to-all-v only to the rollout rank that needs them; TP all-gather "
            "before the PP all-to-all",
            mechanism="patch of the weight-sync path (checkpoint engine)",
            twin_effect="reshard method 'directed' instead of the baseline",
        ),
        OptimizationInfo(
            id="no_sleep_mode",
            summary="vLLM sleep/wake_up replaced by explicit onload/offload of weights and init/free of "
            "the KV cache",
            mechanism="config + patch",
            twin_effect="no sleep-mode copies of the rollout weights; transitions move weights once",
        ),
        OptimizationInfo(
            id="late_kv_cache_init",
            summary="KV cache allocated after reshard and after the training weights are offloaded",
            mechanism="patch",
            twin_effect="the KV cache does not coexist with training weights in the transition peak",
        ),
        OptimizationInfo(
            id="dp_group_ports",
            summary="VLLM_DP_MASTER_IP/PORT per DP group",
            mechanism="env per worker",
            twin_effect="none (correctness on multi-node rollout)",
        ),
        OptimizationInfo(
            id="vllm_ascend_patch_first",
            summary="import the vllm-ascend patch before vllm",
            mechanism="worker setup hook",
            twin_effect="none (correctness)",
        ),
        OptimizationInfo(
            id="chunked_prefill",
            summary="max_num_batched_tokens 1024 with enable_chunked_prefill",
            mechanism="config",
            twin_effect="prefill runs in chunks of max_num_batched_tokens mixed with decode",
        ),
        OptimizationInfo(
            id="hccl_eos_sync",
            summary="DP end-of-sequence sync on HCCL instead of gloo",
            mechanism="patch",
            twin_effect="per-decode-step DP sync costs the HCCL latency instead of gloo's",
        ),
        OptimizationInfo(
            id="graph_mode",
            summary="TorchAir/ACL graph decode, HCCL_OP_EXPANSION_MODE=AIV, TASK_QUEUE_ENABLE=2",
            mechanism="config + env",
            twin_effect="decode launch overhead and host pre/post-processing of graph mode",
        ),
        OptimizationInfo(
            id="d2d_tensor_cache",
            summary="task inputs handed device-to-device instead of serialised through Ray one worker at "
            "a time",
            mechanism="native where verl has it, else patch",
            twin_effect="task-dispatch skew before each worker task shrinks",
        ),
        OptimizationInfo(
            id="math_reward",
            summary="math_verify correctness 0.7 + format 0.2 + reasoning steps 0.1; 0 when wrong",
            mechanism="custom reward function",
            twin_effect="reward stage cost of rule-based scoring",
        ),
    )
}

RECIPE_OPTIMIZATIONS: tuple[OptimizationId, ...] = get_args(OptimizationId)


class ExecutorSupport(BaseModel):
    """The layouts (and models) the executor's implementation of one optimization runs; None: any."""

    model_config = ConfigDict(frozen=True)

    train_engines: tuple[Literal["megatron", "fsdp"], ...] | None = None
    rollout_tp_max: int | None = None
    megatron_model_types: tuple[str, ...] | None = None  # the model types whose Megatron shards it reads; None: any
    rollout_graph_shapes: tuple[Literal["multi", "single"], ...] | None = None  # the captured shapes it builds
    where: str  # the executor code that enforces the limit at run time


EXECUTOR_SUPPORT: dict[str, ExecutorSupport] = {
    # executor/npu_opt/directed_reshard_backend.py: verl's FSDP2 trainer and verl's Megatron trainer (both ran in the
    # CPU loop into vLLM TP2, TP-split blocks loaded by executor/reshard/vllm_blocks.py; the Megatron MoE trainer with
    # EP2 into vLLM replicas holding every expert).
    # From Megatron it reads the model types whose mbridge bridges executor/reshard/megatron_blocks.py traces
    # (executor/reshard/megatron_source.py SUPPORTED, the same list), DeepSeek-V3's included (MLA, shared experts,
    # dense first layers; its MTP layer is not moved: vLLM without speculative decoding loads none), and MindSpeed's
    # moe_tp_extend_ep (its grouped-MLP experts read whole and numbered over TP x EP:
    # executor/reshard/megatron_blocks.py grouped_expert_views; run on CPU as megatron-core's legacy GroupedMLP)
    "directed_reshard": ExecutorSupport(
        train_engines=("fsdp", "megatron"), rollout_tp_max=None,
        megatron_model_types=("qwen2", "qwen3", "llama", "qwen3_moe", "deepseek_v3"),
        where="executor/npu_opt/directed_reshard_backend.py (DirectedCheckpointEngine)"),
    # executor/npu_opt/graph_mode.py turns enforce_eager off: vLLM-Ascend captures its ACL graphs at vLLM's capture
    # sizes, several of them; a single shape at max_num_seqs (TorchAir GE compiled once, as published runs had it)
    # is a layout the twin prices for those runs, not one the executor builds
    "graph_mode": ExecutorSupport(
        rollout_graph_shapes=("multi",),
        where="executor/npu_opt/registry.py (apply_all: graph_mode captures at vLLM's capture sizes)"),
}


def executor_refusals(opt_id: str, layout: Layout, config: ModelConfig) -> list[str]:
    """Why the executor cannot run optimization `opt_id` with `layout` on model `config` (empty when it can)."""
    support = EXECUTOR_SUPPORT.get(opt_id)
    if support is None:
        return []
    train = layout.train
    reasons = []
    if support.train_engines is not None and train.engine not in support.train_engines:
        reasons.append(f"its weight sync reads {'/'.join(support.train_engines)} training shards only, the layout "
                       f"trains with {train.engine}")
    if support.rollout_tp_max is not None and layout.rollout.tp > support.rollout_tp_max:
        reasons.append(f"it feeds rollout TP <= {support.rollout_tp_max} only, the layout's rollout has "
                       f"TP{layout.rollout.tp}")
    shapes = support.rollout_graph_shapes
    if shapes is not None and layout.rollout.graph_shapes not in shapes:  # a single shape needs graph mode
        reasons.append(f"it captures decode graphs at several batch sizes (vLLM's capture sizes), the layout's "
                       f"rollout has a {layout.rollout.graph_shapes} shape")
    types = support.megatron_model_types
    if train.engine == "megatron" and types is not None and config.model_type not in types:
        reasons.append(f"its Megatron reader traces mbridge's bridges of {', '.join(types)} models only, not "
                       f"{config.model_type} (ran: dense, Qwen3-MoE and DeepSeek-V3 models in the CPU loop and "
                       "executor check-reshard)")
    return [*reasons, f"enforced in {support.where}"] if reasons else []
