"""Costs of the RL driver around the workers: task dispatch and the framework time of every worker-group
call, reward and advantage computation, and verl's framework time per call and per response.

The last are what `calibration run overhead` times with verl's own code on the host it runs on (the `cpu`
kind's profile carries them): the rollout's agent-loop path per response (agent loop, routed server call,
reward loop, TransferQueue writes), and the driver stages that are TransferQueue traffic and Python around
the models: bypass-mode old_log_prob, the advantage stage, and update_actor beyond its passes and optimizer
step. A profile fitted where no such job ran does not carry them, and no stage gets them.
"""

from __future__ import annotations

from twin.cost_models.memory import GB
from twin.layout.models import TrainLayout
from twin.profile import Profile
from twin.scenario import Scenario

LOG_PROB_INPUT_BYTES_PER_TOKEN = 24  # input_ids, attention_mask, position_ids (int64)
UPDATE_INPUT_BYTES_PER_TOKEN = 48  # the above + old/ref log-probs, advantages (fp32), response mask (int64)


def dispatch_seconds(sc: Scenario, pf: Profile, lay: TrainLayout, devices: int, bytes_per_token: int) -> float:
    """Task-dispatch skew before a worker-group call: inputs serialised through Ray one worker at a time,
    handed device-to-device with the TensorCache (d2d_tensor_cache), or pulled by every worker at once from
    MindSpeed-RL's TransferDock (`Software.parallel_pull`: one worker's share at Ray's rate)."""
    if sc.has("d2d_tensor_cache"):
        return pf["dispatch_d2d_s"] + pf["worker_call_s"]
    wl = sc.workload
    dp = lay.dp(devices)  # every rank of a replica (its TP, PP and CP or Ulysses ranks) receives its inputs
    per_worker_gb = wl.responses * (wl.prompt_len.mean + wl.response_len.mean) * bytes_per_token / dp / GB
    workers_in_turn = 1 if sc.software.parallel_pull else devices
    ray = workers_in_turn * (pf["dispatch_ray_s_per_worker"] + per_worker_gb * pf["dispatch_ray_s_per_gb"])
    return ray + pf["worker_call_s"]


# the driver's advantage pass touches per token: the token-level scores, the response mask, the advantages
# and the returns (fp32 each), padded to the longest response (verl core_algos compute_grpo_outcome_advantage)
ADVANTAGE_BYTES_PER_TOKEN = 16


# (per call s, per response s) of each stage's framework terms in the profile
FRAMEWORK_TERMS = {
    "rollout": (None, "agent_loop_s_per_response"),
    "old_log_prob": ("bypass_log_prob_call_s", "bypass_log_prob_s_per_response"),
    "advantage": ("advantage_call_s", "advantage_s_per_response"),
    "update": ("update_call_s", "update_s_per_response"),
}


def carries(pf: Profile, stage: str) -> bool:
    """Whether the profile has the framework terms of `stage` (measured by the overhead job)."""
    return all(name is None or name in pf.params for name in FRAMEWORK_TERMS[stage])


def framework_seconds(pf: Profile, stage: str, responses: float) -> float:
    """verl's framework time of one call of `stage` over `responses` responses: its per-call term plus
    `responses` times its per-response term; 0 where the profile does not carry them."""
    if not carries(pf, stage):
        return 0.0
    call, per_response = FRAMEWORK_TERMS[stage]
    return (pf[call] if call else 0.0) + responses * pf[per_response]


def driver_seconds(sc: Scenario, pf: Profile) -> dict[str, float]:
    """Reward scoring of every generated response (every round of DAPO's dynamic sampling: its filter reads the
    rewards), and the advantage: a memory-bound pass of the driver over the padded (responses x longest response)
    score tensors of the kept batch.

    Where the profile carries the overhead job's terms, both are what verl's code measured: the reward runs
    inside the agent-loop path (its per-response term times verl's reward loop), so no separate reward stage,
    and the advantage is verl's stage method timed whole (TransferQueue reads and writes, padding, GRPO)."""
    wl = sc.workload
    n = wl.responses
    reward = 0.0 if carries(pf, "rollout") else wl.generated_responses * pf["reward_ms_per_response"] * 1e-3
    if carries(pf, "advantage"):
        return {"reward": reward, "advantage": framework_seconds(pf, "advantage", n)}
    padded = n * wl.response_len.max * ADVANTAGE_BYTES_PER_TOKEN
    return {"reward": reward, "advantage": padded / (pf["driver_memory_gbs"] * 1e9)}
