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

# verl's threaded puts of the replicas' shares (#3495, 04726dbf1): 28.85 s -> 19.86 s for a 6400 x 20480 batch
PARALLEL_PUT_SPEEDUP = 28.85 / 19.86
LOG_PROB_INPUT_BYTES_PER_TOKEN = 24  # input_ids, attention_mask, position_ids (int64)
UPDATE_INPUT_BYTES_PER_TOKEN = 48  # the above + old/ref log-probs, advantages (fp32), response mask (int64)


def dispatched_tokens_per_sequence(sc: Scenario) -> float:
    """Tokens of one sequence in the tensors a worker-group call carries. verl's driver holds every sequence
    padded to the configured limits: prompts left-padded to prompt_length (RLHFDataset) and responses
    right-padded to response_length (verl 0.9.1 experimental/agent_loop/agent_loop.py `_postprocess`, as its
    earlier vLLM rollout did), so a call ships (prompt max + response max) tokens a sequence whatever was
    generated. MindSpeed-RL's TransferDock stores each sample's tensors at its own length and pads only the
    batch a worker pulls (mindspeed_rl/trainer/utils/transfer_dock.py `_put`, `get_experience`): the means."""
    wl = sc.workload
    if sc.software.parallel_pull:
        return wl.prompt_len.mean + wl.response_len.mean
    return float(wl.prompt_len.max + wl.response_len.max)


def dispatch_seconds(sc: Scenario, pf: Profile, lay: TrainLayout, devices: int, bytes_per_token: int) -> float:
    """Task-dispatch skew before a worker-group call: inputs serialised through Ray one worker at a time (verl
    before 0.6), each replica's share put once on threads and a Ray call to every worker (verl >= 0.6:
    `Software.puts_inputs_once`), handed device-to-device with the TensorCache (d2d_tensor_cache), or pulled by
    every worker at once from MindSpeed-RL's TransferDock (`Software.parallel_pull`: one worker's share at Ray's
    rate)."""
    if sc.has("d2d_tensor_cache"):
        return pf["dispatch_d2d_s"] + pf["worker_call_s"]
    wl = sc.workload
    dp = lay.dp(devices)  # every rank of a replica (its TP, PP and CP or Ulysses ranks) receives its inputs
    per_worker_gb = wl.responses * dispatched_tokens_per_sequence(sc) * bytes_per_token / dp / GB
    share = pf["dispatch_ray_s_per_worker"] + per_worker_gb * pf["dispatch_ray_s_per_gb"]
    if sc.software.parallel_pull:
        ray = share
    elif sc.software.puts_inputs_once:  # each replica's share serialised once, then a Ray call per worker
        ray = dp * share / PARALLEL_PUT_SPEEDUP + devices * pf["ray_actor_call_ms"] * 1e-3
    else:
        ray = devices * share
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
