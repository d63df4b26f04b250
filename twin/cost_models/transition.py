"""Time of the transitions between training and rollout: the weight reshard and the host offloads."""

from __future__ import annotations

import math

import numpy as np

from twin.cost_models.comm import host_copy_time, tier_bandwidth, world_round_s
from twin.cost_models.efficiency import memory_seconds
from twin.cost_models.export import export_host_s
from twin.cost_models.memory import GB, RolloutMemory, TrainMemory
from twin.cost_models.reshard import ReshardStats, chunk_bytes
from twin.cost_models.static import tensor_table
from twin.profile import Profile
from twin.scenario import Scenario
from twin.topology.clusters import sleep_frees_memory
from twin.topology.routing import Cluster


def local_copy_s(rm: RolloutMemory, cluster: Cluster, profile: Profile) -> float:
    """The rollout engine's weights are their own tensors: every rank copies its rollout shard into them,
    received or already on the device (read and written once)."""
    return float(memory_seconds(cluster.kind, profile, 2.0 * rm.weight_bytes))


# verl 0.9.1's colocated sync beyond the hand-over, one replica's calls in the order it makes them, from its code
# (workers/engine_workers.py update_weights, workers/rollout/vllm_rollout/vllm_rollout.py ServerAdapter.update_weights,
# vllm_async_server.py, trainer/ppo/v1/trainer_colocate_async.py on_step_end): from the trainer rank, a Ray call to
# the rollout server actor (collective_rpc) that the engine core passes to its TP workers (update_weights_from_ipc),
# then, once its future returns, clear_kv_cache (a server call awaiting the engine core's reset_prefix_cache,
# reset_mm_cache and reset_encoder_cache) and set_global_steps; from the driver, resume_generation_replicas
# (resume_engine_generation, awaiting the engine's resume_generation, and open_submission_gate). Where sleep mode
# frees the weights the sync first resumes them: a server call (wake_up), its wake-up through the engine core and a
# collective to the workers.
SYNC_CALLS = ("server", "collective", "server", "engine", "engine", "engine", "server", "server", "engine", "server")
WAKE_UP_CALLS = ("server", "engine", "collective")
# the processes each kind of call reaches: the server actor, vLLM's engine core, the engine core and its TP workers
CALL_REACHES = {"server": {"server"}, "engine": {"engine core"}, "collective": {"engine core", "TP workers"}}
# a call's round trip after its processes idled (the sync comes seconds after the last decode step), and within a
# millisecond of the call before it (benchmarks/verl_sync_rpcs_cpu.py: at 20 ms idle a call already costs most of
# its idle round trip)
IDLE_COST = {"server": "ray_actor_call_ms", "engine": "vllm_engine_call_ms", "collective": "vllm_collective_rpc_ms"}
AT_ONCE_COST = {"server": "ray_actor_call_at_once_ms", "engine": "vllm_engine_call_at_once_ms",
                "collective": "vllm_collective_rpc_at_once_ms"}


def sync_calls_s(profile: Profile, scenario: Scenario) -> float:
    """The framework calls of one colocated sync where verl makes it through the rollout's server actor
    (`Software.syncs_through_server`): the driver's worker-group call to the trainer ranks, which the driver's
    update_weights timer holds, and the calls `SYNC_CALLS` (after `WAKE_UP_CALLS` where sleep mode frees memory)
    at their measured round trips (benchmarks/verl_sync_rpcs_cpu.py): a call that reaches a process no call of this
    sync has reached yet pays the round trip after idle, every later one the round trip of a call made at once after
    the one before (each follows the previous one's return in the same coroutine). Earlier verl syncs inside the
    worker-group call that wakes the rollout (an offload moment): none here."""
    if not scenario.software.syncs_through_server:
        return 0.0
    reached: set[str] = set()
    total_ms = 0.0
    for kind in (WAKE_UP_CALLS if sleep_frees_memory(scenario) else ()) + SYNC_CALLS:
        total_ms += profile[AT_ONCE_COST[kind] if CALL_REACHES[kind] <= reached else IDLE_COST[kind]]
        reached |= CALL_REACHES[kind]
    return profile["worker_call_s"] + total_ms * 1e-3


def reshard_parts(stats: ReshardStats, cluster: Cluster, profile: Profile, rm: RolloutMemory, tm: TrainMemory,
                  scenario: Scenario) -> dict[str, float]:
    """The reshard's time by part, seconds: `transfer` (concurrent flows share each device's port on each tier, so
    it lasts as long as the busiest port, send or receive, any tier, ports of different tiers in parallel), `rounds`
    (the fixed cost of its collective rounds, `round_s`), `transfer_host` (the executor's own work around them,
    `transfer_host_s`), `export` (the trainer's export loop), `local_copy` (into the engine), `handover` (verl's
    hand-over of the entries to the engine), `load` (the engine's host work loading them) and `calls` (the framework
    calls around them, `sync_calls_s`)."""
    worst = 0.0
    for tier, per_device in stats.tier_bytes.items():
        busiest = float(per_device.max())
        worst = max(worst, busiest / tier_bandwidth(cluster, profile, tier, busiest))
    return {"transfer": worst, "rounds": stats.collective_rounds * round_s(stats.method, cluster, profile),
            "transfer_host": transfer_host_s(stats, rm, profile),
            "export": export_loop_s(tm, stats.method, profile), "local_copy": local_copy_s(rm, cluster, profile),
            "handover": handover_s(rm, profile, scenario), "load": rollout_load_s(rm, profile),
            "calls": sync_calls_s(profile, scenario)}


def reshard_time(stats: ReshardStats, cluster: Cluster, profile: Profile, rm: RolloutMemory,
                 tm: TrainMemory, scenario: Scenario) -> float:
    """The one reshard-time formula (closed form, simulation and planner): the sum of `reshard_parts`."""
    return sum(reshard_parts(stats, cluster, profile, rm, tm, scenario).values())


# the directed transfer's host work, measured on the CPU host only (benchmarks/gloo_a2a_chain_cpu.py); a profile
# without them leaves it out (on the NPU hosts the same Python runs beside rounds of tens of milliseconds)
TRANSFER_HOST_TERMS = ("directed_round_host_us", "directed_round_drift_us", "directed_tensor_setup_us")


def transfer_host_s(stats: ReshardStats, rm: RolloutMemory, profile: Profile) -> float:
    """The executor's own work in the directed transfer (executor/npu_opt/directed_reshard_transfer.py), where the
    profile carries its terms: before the rounds, each rollout tensor allocated and filled with the blocks the rank
    holds (one a tensor of the inventory: TP and contiguous EP shards give each rank one block of each it holds);
    around each all-to-all-v round, the rank finding its pieces, packing, unpacking and counting; and in each round,
    beyond the collective's own cost (timed after a barrier), the ranks' drift: each does its own work between
    rounds, so they enter and leave a round apart and the first waits for the last. 0 for the gathers."""
    if stats.method != "directed" or not all(t in profile.params for t in TRANSFER_HOST_TERMS):
        return 0.0
    tensors = len(tensor_table(rm.inv).numel)
    per_round = profile["directed_round_host_us"] + profile["directed_round_drift_us"]
    return (stats.collective_rounds * per_round + tensors * profile["directed_tensor_setup_us"]) * 1e-6


def round_s(method: str, cluster: Cluster, profile: Profile) -> float:
    """The fixed cost of one transfer round, from the collective model over every device (the reshard's process
    group): an all-to-all-v round of the directed method (its base and per-peer latency), a near-empty
    all-gather per tensor a gather method exports (its latency steps on each tier)."""
    return world_round_s(cluster, profile, "all_to_all" if method == "directed" else "all_gather")


def handover_s(rm: RolloutMemory, profile: Profile, scenario: Scenario) -> float:
    """verl's colocated hand-over of the synced weights to the rollout engine on the same device (its ServerAdapter
    sends them through BucketedWeightSender to the vLLM worker's BucketedWeightReceiver: a ZMQ socket pair and one
    IPC or shared-memory bucket): a fixed cost per sync and host work per entry handed over, the same entries the
    engine then loads (benchmarks/verl_weight_handover_cpu.py). MindSpeed-RL's ShardingManager writes the converted
    weights into the engine's parameter buckets in the same process (docs/features/resharding.md): no hand-over."""
    if scenario.software.framework != "verl":
        return 0.0
    entries, _ = tensor_table(rm.inv).rollout_load_work
    return handover_entries_s(entries, profile)


def handover_entries_s(entries: int, profile: Profile) -> float:
    """verl's hand-over of `entries` checkpoint entries to an engine worker: its fixed cost per sync (the ZMQ pair,
    the bucket, the receiver's set-up in the worker; calibration decode job, `handover` points) and its host work
    per entry (benchmarks/verl_weight_handover_cpu.py)."""
    return profile["weight_handover_sync_ms"] * 1e-3 + entries * profile["weight_handover_entry_us"] * 1e-6


def rollout_load_s(rm: RolloutMemory, profile: Profile) -> float:
    """The rollout engine's load_weights over every checkpoint entry of the sync, on the host: a fixed cost per
    entry and the name matching against the expert mapping (the recipes' directed path hands every expert of every
    projection, most of them empty on a rank; verl's exporters name every expert too)."""
    return load_entries_s(*tensor_table(rm.inv).rollout_load_work, profile)


def load_entries_s(entries: int, scanned: int, profile: Profile) -> float:
    """vLLM's load_weights of `entries` checkpoint entries that scan `scanned` expert-mapping entries."""
    return entries * profile["vllm_load_entry_us"] * 1e-6 + scanned * profile["vllm_load_scan_ns"] * 1e-9


def export_loop_s(tm: TrainMemory, method: str, profile: Profile) -> float:
    """The host work of the trainer's weight export (twin.cost_models.export): the recipes' directed path or
    verl's exporter."""
    return export_host_s(tensor_table(tm.inv), tm.lay, method == "directed", profile)


def reshard_lower_bound(tm: TrainMemory, rm: RolloutMemory, method: str, cluster: Cluster,
                        profile: Profile, scenario: Scenario) -> float:
    """A lower bound of the reshard time of a layout pair without its transfer list (for the planner's
    screen): the local copy, the engine's load and the sync's framework calls, plus the transfer rounds every
    device must take part in.
    The gathers export every tensor; with the directed method a device receives at least one block of every
    tensor outside its own pipeline stage, and at least one chunk per chunk-size of what its rollout shard
    needs beyond the most its training shard can hold."""
    lat = round_s(method, cluster, profile)
    export = export_loop_s(tm, method, profile)
    table = tensor_table(tm.inv)
    if method == "directed":
        per_stage = np.bincount(table.stage_of(tm.lay), minlength=tm.n_stages)
        missing = max(0.0, rm.weight_bytes - float(tm.stages.weight_bytes.max()))
        rounds = max(int(per_stage.sum() - per_stage.max()), math.ceil(missing / chunk_bytes(tm.inv)))
    else:
        rounds = len(table.numel)
    return (local_copy_s(rm, cluster, profile) + rollout_load_s(rm, profile) + rounds * lat + export
            + sync_calls_s(profile, scenario))


def offload_moments(tm: TrainMemory, rm: RolloutMemory, scenario: Scenario, cluster: Cluster,
                    profile: Profile) -> dict[str, float]:
    """Seconds of host<->device copies and cache releases at each moment of the step where they happen."""
    train = train_offload_moments(tm, scenario, cluster, profile)
    rollout = rollout_offload_moments(rm, scenario, cluster, profile)
    critic = critic_offload_moments(tm.value_model, cluster, profile) if tm.value_model else {}
    return {moment: train.get(moment, 0.0) + rollout.get(moment, 0.0) + critic.get(moment, 0.0)
            for moment in OFFLOAD_MOMENTS}


OFFLOAD_MOMENTS = ("after_rollout", "log_prob_onload", "log_prob_offload", "ref_onload", "ref_offload",
                   "values_onload", "values_offload", "before_update_critic", "after_update_critic",
                   "before_update", "after_update", "before_reshard", "after_reshard")


def _release(profile: Profile, nbytes: float) -> float:
    """torch's empty_cache returning cached blocks to the device (ascend-hardware.md: 26 GB in about 4 s)."""
    return nbytes / GB * profile["empty_cache_s_per_gb"]


def train_offload_moments(tm: TrainMemory, scenario: Scenario, cluster: Cluster, profile: Profile
                          ) -> dict[str, float]:
    """The training side's share of the offload moments: its own state's copies and cache releases."""
    stage = tm.heaviest_stage
    # the actor's parameters as it holds them (fp32 under verl's FSDP), the reference model's in bf16; gradients and
    # optimizer state
    offloaded, rest = tm.offloaded_between_phases(stage)
    ref = tm.weight_bytes(stage) if tm.lay.offload.param and tm.has_ref else 0.0
    before_update = offloaded + rest
    # the ref pass and update_actor end with empty_cache (cann-recipes-train megatron_workers: compute_ref_log_prob
    # and update_actor offload, then empty_cache()): it returns what they offloaded and their cached activations
    ref_pass = tm.has_ref
    # verl's old-policy pass loads the offloaded actor weights and offloads them after it, emptying the cache
    # (verl/workers/engine/base.py BaseEngineCtx in eval mode; offload_megatron_model_to_cpu, offload_fsdp_model_to_cpu)
    # MindSpeed-RL offloads the training state for the rollout only (docs/features/offload.md)
    actor_pass = not scenario.has("skip_old_log_prob") and scenario.software.framework == "verl"
    # verl offloads the weights with the rest after update_actor, loads them again for the weight sync and offloads
    # them after it, emptying the cache (engine_workers.py update_weights); the recipes keep them for the sync
    round_trip = 0.0 if scenario.software.keeps_weights_for_sync else offloaded
    after_update = rest + round_trip
    forward = tm.log_prob_activation_bytes(stage)
    log_prob = _around(cluster, profile, offloaded if actor_pass else 0.0, forward, actor_pass and offloaded > 0)
    ref_moves = _around(cluster, profile, ref, forward, ref_pass)
    return {
        "log_prob_onload": log_prob[0],
        "log_prob_offload": log_prob[1],
        "ref_onload": ref_moves[0],
        "ref_offload": ref_moves[1],
        "before_update": host_copy_time(cluster, profile, before_update),
        "after_update": host_copy_time(cluster, profile, after_update)
        + _release(profile, after_update + tm.update_activation_bytes(stage)),
        "before_reshard": host_copy_time(cluster, profile, round_trip),
        "after_reshard": host_copy_time(cluster, profile, offloaded) + _release(profile, round_trip),
    }


def critic_offload_moments(cm: TrainMemory, cluster: Cluster, profile: Profile) -> dict[str, float]:
    """PPO's critic moves its own state as verl's workers move a trained model's (workers/engine/base.py BaseEngineCtx:
    what the layout offloads is loaded on entering a call and offloaded on leaving it, emptying the cache): its
    parameters around compute_values, all of its offloaded state around update_critic."""
    stage = cm.heaviest_stage
    weights, rest = cm.offloaded_between_phases(stage)
    values = _around(cluster, profile, weights, cm.log_prob_activation_bytes(stage), weights > 0)
    update = _around(cluster, profile, weights + rest, cm.update_activation_bytes(stage), True)
    return {"values_onload": values[0], "values_offload": values[1],
            "before_update_critic": update[0], "after_update_critic": update[1]}


def _around(cluster: Cluster, profile: Profile, moved: float, activations: float, release: bool
            ) -> tuple[float, float]:
    """(before, after) a worker call that loads `moved` bytes and offloads them after it, then, where `release`,
    empties the cache of them and of the call's `activations`."""
    copy = host_copy_time(cluster, profile, moved)
    return copy, copy + (_release(profile, moved + activations) if release else 0.0)


def rollout_offload_moments(rm: RolloutMemory, scenario: Scenario, cluster: Cluster, profile: Profile
                            ) -> dict[str, float]:
    """The rollout side's share: the engine's weights kept through sleep (no sleep mode) and its released cache;
    the rollout's sleep and its wake-up for the weight sync are worker-group calls of their own (where verl syncs
    through the rollout's server, the sync's call is in `sync_calls_s`)."""
    rollout_w = rm.weight_bytes if scenario.has("no_sleep_mode") else 0.0
    released = rm.kv_cache_bytes(rm.lay.gpu_memory_utilization) + rm.weight_bytes
    wake_call = 0.0 if scenario.software.syncs_through_server else profile["worker_call_s"]
    return {
        "after_rollout": host_copy_time(cluster, profile, rollout_w) + _release(profile, released)
        + profile["worker_call_s"],
        "before_reshard": host_copy_time(cluster, profile, rollout_w) + wake_call,
    }
