"""Rollout layout -> verl's vLLM rollout overrides (TP/EP/DP per replica and engine arguments)."""

from __future__ import annotations

from executor.errors import ExecutorError
from executor.verl_config.overrides import OverrideSet
from twin.layout.models import RolloutLayout

ROLLOUT = "actor_rollout_ref.rollout"


def replica_dp(rollout: RolloutLayout) -> int:
    """vLLM data-parallel ranks inside one replica (verl's `data_parallel_size`).

    The plan counts DP over all devices; with expert parallelism one vLLM instance spans `ep` devices,
    i.e. ep / tp DP ranks (verl requires expert_parallel_size = tp x dp); without, each TP group is a replica.
    """
    if rollout.ep == 1:
        return 1
    if rollout.ep % rollout.tp:
        raise ExecutorError(f"rollout EP{rollout.ep} is not a multiple of rollout TP{rollout.tp}")
    return rollout.ep // rollout.tp


def rollout_overrides(o: OverrideSet, rollout: RolloutLayout, max_model_len: int) -> None:
    """Set the vLLM rollout: name, parallelism and engine arguments."""
    o.set(f"{ROLLOUT}.name", "vllm")
    o.set(f"{ROLLOUT}.tensor_model_parallel_size", rollout.tp)
    o.set(f"{ROLLOUT}.data_parallel_size", replica_dp(rollout))
    o.set(f"{ROLLOUT}.expert_parallel_size", rollout.ep)
    o.set(f"{ROLLOUT}.max_num_seqs", rollout.max_num_seqs)
    o.set(f"{ROLLOUT}.max_num_batched_tokens", rollout.max_num_batched_tokens)
    o.set(f"{ROLLOUT}.enable_chunked_prefill", rollout.enable_chunked_prefill)
    o.set(f"{ROLLOUT}.gpu_memory_utilization", rollout.gpu_memory_utilization)
    o.set(f"{ROLLOUT}.enforce_eager", not rollout.graph_mode)
    o.set(f"{ROLLOUT}.max_model_len", max_model_len)
