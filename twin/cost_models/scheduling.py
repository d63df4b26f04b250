"""Costs of the RL driver around the workers: task dispatch and the framework time of every worker-group
call, reward and advantage computation."""

from __future__ import annotations

from twin.cost_models.memory import GB
from twin.layout.models import TrainLayout
from twin.profile import Profile
from twin.scenario import Scenario

LOG_PROB_INPUT_BYTES_PER_TOKEN = 24  # input_ids, attention_mask, position_ids (int64)
UPDATE_INPUT_BYTES_PER_TOKEN = 48  # the above + old/ref log-probs, advantages (fp32), response mask (int64)


def dispatch_seconds(sc: Scenario, pf: Profile, lay: TrainLayout, devices: int, bytes_per_token: int) -> float:
    """Task-dispatch skew before a worker-group call: inputs serialised through Ray one worker at a time,
    or handed device-to-device with the TensorCache (d2d_tensor_cache)."""
    if sc.has("d2d_tensor_cache"):
        return pf["dispatch_d2d_s"] + pf["worker_call_s"]
    wl = sc.workload
    dp = lay.dp(devices) if lay.engine == "megatron" else devices
    per_worker_gb = wl.responses * (wl.prompt_len.mean + wl.response_len.mean) * bytes_per_token / dp / GB
    ray = devices * (pf["dispatch_ray_s_per_worker"] + per_worker_gb * pf["dispatch_ray_s_per_gb"])
    return ray + pf["worker_call_s"]


# the driver's advantage pass touches per token: the token-level scores, the response mask, the advantages
# and the returns (fp32 each), padded to the longest response (verl core_algos compute_grpo_outcome_advantage)
ADVANTAGE_BYTES_PER_TOKEN = 16


def driver_seconds(sc: Scenario, pf: Profile) -> dict[str, float]:
    """Reward scoring of every response, and the advantage: a memory-bound pass of the driver over the
    padded (responses x longest response) score tensors."""
    wl = sc.workload
    n = wl.responses
    padded = n * wl.response_len.max * ADVANTAGE_BYTES_PER_TOKEN
    return {"reward": n * pf["reward_ms_per_response"] * 1e-3, "advantage": padded / (pf["driver_memory_gbs"] * 1e9)}
