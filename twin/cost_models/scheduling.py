"""Costs of the RL driver around the workers: task dispatch and the framework time of every worker-group
call, reward and advantage computation, and verl's framework time per call and per response.

The last are what `calibration run overhead` times with verl's own code on the host it runs on (the `cpu`
kind's profile carries them): the rollout's agent-loop path per response (agent loop, routed server call,
reward loop, TransferQueue writes), and the driver stages that are TransferQueue traffic and Python around
the models: bypass-mode old_log_prob, the advantage stage, and update_actor beyond its passes and optimizer
step. A profile fitted where no such job ran does not carry them, and no stage gets them.
"""

from __future__ import annotations

from typing import Literal

from twin.cost_models.memory import GB
from twin.layout.models import TrainLayout
from twin.profile import Profile
from twin.scenario import Scenario

# verl's threaded puts of the replicas' shares (#3495, 04726dbf1): 28.85 s -> 19.86 s for a 6400 x 20480 batch
PARALLEL_PUT_SPEEDUP = 28.85 / 19.86
# MindSpeed-RL's consumers pull only their columns from the TransferDock, at the samples' own lengths, per token:
# input_ids, attention_mask, position_ids (int64) for a forward pass (log-probs, a critic's values); and old/ref
# log-probs, advantages (fp32), the response mask (int64) for the update; values and returns (fp32) and the response
# mask for the critic's update
PULLED_BYTES_PER_TOKEN = {"old_log_prob": 24, "ref": 24, "values": 24, "update_critic": 40, "update": 48}
# what each trainer call hands back to verl's driver per response token (fp32): the old-policy pass its log-probs
# and entropies, the reference pass its log-probs, the critic its values, the updates metrics only
OUTPUT_BYTES_PER_TOKEN = {"old_log_prob": 8, "ref": 4, "values": 4, "update_critic": 0, "update": 0}
Call = Literal["old_log_prob", "ref", "values", "update_critic", "update"]
UPDATES = ("update_critic", "update")  # the calls that train (PPO's critic first)


def dispatched_bytes_per_sequence(sc: Scenario, call: Call) -> float:
    """Bytes a trainer call carries per sequence. verl's driver hands the workers its whole batch (trainer/ppo/
    ray_trainer.py fit, verl 0.4-0.6), every sequence padded to the configured limits (prompts left-padded to
    prompt_length by RLHFDataset, responses right-padded to response_length by the rollout: verl 0.9.1
    experimental/agent_loop/agent_loop.py `_postprocess`), whatever was generated: input_ids, attention_mask and
    position_ids over prompt + response, prompts, and responses and response_mask over the response (int64); the
    rollout's own log-probs where it returns them (fp32, `software.rollout_log_probs`); from the reference pass on the
    old policy's log-probs where that pass ran; after the reference pass its log-probs (a KL loss); at the updates the
    scores, rewards, advantages and returns (fp32), and a critic's values (PPO). MindSpeed-RL's consumers pull their
    own columns at the samples' lengths (`PULLED_BYTES_PER_TOKEN`; mindspeed_rl/trainer/utils/transfer_dock.py
    `_put`, `get_experience`)."""
    wl = sc.workload
    if sc.software.parallel_pull:
        return (wl.prompt_len.mean + wl.response_len.mean) * PULLED_BYTES_PER_TOKEN[call]
    prompt, response = wl.prompt_len.max, wl.response_len.max
    per_response_token = 8 + 8 + (4 if sc.software.rollout_log_probs else 0)
    if call != "old_log_prob" and not sc.has("skip_old_log_prob"):
        per_response_token += 4
    if call in ("values", *UPDATES) and wl.use_kl_loss:
        per_response_token += 4
    if call in UPDATES:
        per_response_token += 16 + (4 if wl.has_critic else 0)
    return float(24 * (prompt + response) + 8 * prompt + per_response_token * response)


def dispatch_path(sc: Scenario) -> Literal["tensor_cache", "transfer_dock", "put_once", "per_task"]:
    """How a trainer call's inputs reach the workers: device to device with the TensorCache (d2d_tensor_cache),
    pulled by each worker from MindSpeed-RL's TransferDock (`Software.parallel_pull`), put into Ray's object store
    once (verl >= 0.6: `Software.puts_inputs_once`) or serialised into every worker's task (earlier verl)."""
    if sc.has("d2d_tensor_cache"):
        return "tensor_cache"
    if sc.software.parallel_pull:
        return "transfer_dock"
    return "put_once" if sc.software.puts_inputs_once else "per_task"


def dispatch_seconds(sc: Scenario, pf: Profile, lay: TrainLayout, devices: int, call: Call) -> float:
    """Task-dispatch skew before a worker-group call: inputs serialised through Ray one worker at a time (verl
    before 0.6), each replica's share put once on threads and a Ray call to every worker (verl >= 0.6:
    `Software.puts_inputs_once`, at the put rate `benchmarks/verl_driver_batch_cpu.py` measures), handed
    device-to-device with the TensorCache (d2d_tensor_cache), or pulled by every worker at once from MindSpeed-RL's
    TransferDock (`Software.parallel_pull`: one worker's share at Ray's rate)."""
    path = dispatch_path(sc)
    if path == "tensor_cache":
        return pf["dispatch_d2d_s"] + pf["worker_call_s"]
    dp = lay.dp(devices)  # every rank of a replica (its TP, PP and CP or Ulysses ranks) receives its inputs
    total_gb = sc.workload.responses * dispatched_bytes_per_sequence(sc, call) / GB
    if path == "put_once":
        ray = total_gb * pf["driver_put_s_per_gb"] / PARALLEL_PUT_SPEEDUP + devices * pf["ray_actor_call_ms"] * 1e-3
    else:  # one replica's share at Ray's rate: pulled by all workers at once, or serialised for each in turn
        share = pf["dispatch_ray_s_per_worker"] + total_gb / dp * pf["dispatch_ray_s_per_gb"]
        ray = share if path == "transfer_dock" else devices * share
    return ray + pf["worker_call_s"]


def collect_seconds(sc: Scenario, pf: Profile, call: Call) -> float:
    """verl >= 0.6's driver after a trainer call: the workers' outputs fetched and concatenated (ray.get,
    DataProto.concat; padded to the response limit) and, after the old-policy pass, the entropies averaged
    (core_algos.agg_loss) and, where the rollout returned log-probs, compared with the trainer's
    (utils/debug/metrics.py calculate_debug_metrics) on the padded (responses x response limit) tensors, at the
    rates `benchmarks/verl_driver_batch_cpu.py` measures. Earlier verl's whole call is what C3's Ray dispatch terms
    hold; the TensorCache and MindSpeed-RL's TransferDock keep outputs off the driver."""
    if dispatch_path(sc) != "put_once":
        return 0.0
    elements = sc.workload.responses * sc.workload.response_len.max
    t = elements * OUTPUT_BYTES_PER_TOKEN[call] / GB * pf["driver_get_s_per_gb"]
    if call == "old_log_prob":
        per_element_ns = pf["driver_entropy_ns_per_element"]
        if sc.software.rollout_log_probs:
            per_element_ns += pf["driver_debug_ns_per_element"]
        t += elements * per_element_ns * 1e-9
    return t


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


# what the rollout's agent-loop path shares with the engine: the host's cores it keeps busy alone, the share of its
# time before it hands its last request over, and the host's cores (twin.cost_models.host_sharing), measured by the
# overhead job beside its per-response term
HOST_TERMS = ("agent_loop_busy_cores", "agent_loop_arrival_share", "host_cores")


def carries(pf: Profile, stage: str) -> bool:
    """Whether the profile has the framework terms of `stage` (measured by the overhead job)."""
    names = (*FRAMEWORK_TERMS[stage], *(HOST_TERMS if stage == "rollout" else ()))
    return all(name is None or name in pf.params for name in names)


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
    and the advantage is verl's stage method timed whole (TransferQueue reads and writes, padding, GRPO). PPO's
    advantage adds GAE's loop (`gae_seconds`) to either."""
    wl = sc.workload
    n = wl.responses
    reward = 0.0 if carries(pf, "rollout") else reward_seconds(sc, pf)
    gae = gae_seconds(sc, pf) if wl.has_critic else 0.0
    if carries(pf, "advantage"):
        return {"reward": reward, "advantage": framework_seconds(pf, "advantage", n) + gae}
    padded = n * wl.response_len.max * ADVANTAGE_BYTES_PER_TOKEN
    return {"reward": reward, "advantage": padded / (pf["driver_memory_gbs"] * 1e9) + gae}


def reward_seconds(sc: Scenario, pf: Profile) -> float:
    """verl's reward manager on the driver: every generated response (every round of DAPO's dynamic sampling)
    decoded and its text scored, one after another, work that grows with the response's tokens
    (`reward_us_per_token` of each)."""
    wl = sc.workload
    return wl.generated_responses * wl.response_len.mean * pf["reward_us_per_token"] * 1e-6


def gae_seconds(sc: Scenario, pf: Profile) -> float:
    """PPO's GAE on the driver (verl core_algos.compute_gae_advantage_return): a backward loop over the response
    limit's positions, each a few operations on one column of the (responses x limit) tensors, at the per-position
    and per-element rates `benchmarks/gae_driver_cpu.py` measures."""
    wl = sc.workload
    return wl.response_len.max * (pf["gae_us_per_position"] * 1e-6 + wl.responses * pf["gae_ns_per_element"] * 1e-9)
