"""The weight sync of a disaggregated run: the trainer on its own devices sends its weights to rollout engines on
others (verl's fully async and one-step-off policies; calibration-cases.md C9).

Two ways, as `software.weight_sync` names them:
- `per_tensor` (verl <= 0.6's ParameterSynchronizer): every trainer and rollout rank joins one NCCL group; for each
  HuggingFace tensor the trainer's export yields, trainer rank 0 broadcasts it to the group, and each rollout rank
  hands it to its engine's load_weights, one call per tensor. The trainer exports the next tensor while the
  rollout loads the last, and the next broadcast waits for both.
- `checkpoint_engine`, in one of two engines:
  - verl >= 0.8 (the NCCL/HCCL backend of verl/checkpoint_engine/nccl_checkpoint_engine.py, 6f33c553b, 2026-01-06,
    after v0.7.0): the exported tensors are packed into buckets of `CHECKPOINT_BUCKET_BYTES` that trainer rank 0
    broadcasts to the rollout ranks (the other trainer ranks only walk the export); two send and two receive buffers
    let the next bucket fill while one is broadcast and the last is loaded, and the engine's load_weights takes the
    stream once;
  - verl 0.7 (the fully async recipe's own engine, recipe/fully_async_policy/checkpoint_engine.py and
    megatron_worker.py, cdd7d874f of 2025-12-18 to v0.7.0, the engine C9's figures were measured with; the
    scenario says so with `software.verl`): `recipe_checkpoint_engine` below, nothing overlapped.

Each tensor's export is the exporter's host work spread over the tensors it yields (twin.cost_models.export) plus
its device gathers (TP, expert parallel, the PP broadcast; FSDP's all-gather of the whole tensor) on the trainer's
tiers; a broadcast costs the collective model's time over the tiers its group spans; a load, the engine's host work
per entry and expert-mapping scan (as twin.cost_models.transition rollout_load_s counts them) and, per call,
`vllm_load_call_us` and the expert mapping the call rebuilds (benchmarks/vllm_load_weights_cpu.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from twin.cost_models.comm import collective_time, host_copy_time
from twin.cost_models.export import export_host_s, hf_tensor_count
from twin.cost_models.static import TensorTable
from twin.layout.models import RolloutLayout, TrainLayout
from twin.profile import Profile
from twin.topology.routing import Cluster

# verl's rollout.checkpoint_engine.update_weights_bucket_megabytes default, 2048 (verl 0.9.1
# trainer/config/rollout/rollout.yaml; workers/config/rollout.py CheckpointEngineConfig)
CHECKPOINT_BUCKET_BYTES = 2048 * 2**20
# the fully async recipe's async_training.checkpoint_engine.device_buffer_size_M default, 4096, with
# overlap_broadcast_and_consume False (verl cdd7d874f recipe/fully_async_policy/config/fully_async_ppo_*trainer.yaml)
RECIPE_BUCKET_BYTES = 4096 * 2**20
SYNC_METHODS = ("per_tensor", "checkpoint_engine")


@dataclass(frozen=True)
class SyncTensors:
    """The HuggingFace tensors of one export in the order it yields them, with each one's seconds on the trainer
    (its share of the export's host work and its device gathers) and on a rollout rank (its load, one entry)."""

    nbytes: np.ndarray
    export_s: np.ndarray
    load_s: np.ndarray


@dataclass(frozen=True)
class SyncTime:
    """Seconds of one disaggregated weight sync and what they are made of (sums over the whole sync; with the
    checkpoint engine the three overlap, so the total is less than their sum)."""

    method: str
    seconds: float
    export_s: float
    broadcast_s: float
    load_s: float
    tensors: int
    broadcasts: int


def sync_tensors(table: TensorTable, train: TrainLayout, trainer_devices: int, cluster: Cluster,
                 profile: Profile) -> SyncTensors:
    """Every HuggingFace tensor of one export (trainer ranks 0..trainer_devices-1 of `cluster`)."""
    per_row = table.entries_per_row
    row_bytes = (table.numel * table.dtype_bytes).astype(np.float64)
    tensor_bytes = row_bytes / per_row
    gathers = _gather_seconds(table, train, trainer_devices, cluster, profile)  # per row, the whole row
    host = export_host_s(table, train, False, profile) / hf_tensor_count(table)
    rows = np.repeat(np.arange(len(per_row)), per_row)
    load = profile["vllm_load_entry_us"] * 1e-6 + table.scanned_per_entry * profile["vllm_load_scan_ns"] * 1e-9
    return SyncTensors(nbytes=tensor_bytes[rows], export_s=(gathers / per_row)[rows] + host, load_s=load[rows])


def _gather_seconds(table: TensorTable, lay: TrainLayout, devices: int, cluster: Cluster,
                    profile: Profile) -> np.ndarray:
    """Per tensor row, the device gathers trainer rank 0 takes part in to export the whole row."""
    row_bytes = (table.numel * table.dtype_bytes).astype(np.float64)
    if lay.engine == "fsdp":
        # verl's FSDP actor holds its parameters in fp32 (twin.cost_models.memory TrainMemory.param_bytes): each
        # one's full_tensor() gathers 4 bytes an element over every trainer rank
        ranks = list(range(devices))
        return np.array([collective_time(cluster, profile, ranks, "all_gather", 4.0 * n) for n in table.numel])
    out = np.zeros(len(row_bytes))
    walks = table.walked_parameters(lay)
    tp_group = list(range(lay.tp))
    ep_group = [k * lay.expert_tp for k in range(lay.expert_partition)]
    etp_group = list(range(lay.expert_tp))
    pp_group = list(range(0, devices, devices // lay.pp))
    for i, b in enumerate(row_bytes):
        if walks[i] == 0:
            continue  # k, v, up: fused into q's and gate's parameters, gathered with them (at their partner's size)
        per_walk = b / walks[i]
        if table.expert[i]:
            # a walked parameter is one local expert's expert-TP shard: gathered over EP (the peers' experts),
            # then each of the EP experts over expert TP
            expert = per_walk / lay.expert_partition
            t = collective_time(cluster, profile, ep_group, "all_gather", per_walk / lay.expert_tp)
            t += lay.expert_partition * collective_time(cluster, profile, etp_group, "all_gather", expert)
            held = expert / lay.expert_tp
        else:
            split = lay.tp if table.split[i] else 1
            t = collective_time(cluster, profile, tp_group, "all_gather", per_walk) if split > 1 else 0.0
            held = per_walk / split
        t += collective_time(cluster, profile, pp_group, "broadcast", held)  # broadcast_from_megatron_pp
        out[i] = walks[i] * t
    return out


def sync_time(table: TensorTable, train: TrainLayout, trainer_devices: int, rollout: RolloutLayout,
              cluster: Cluster, profile: Profile, method: str, recipe_engine: bool = False) -> SyncTime:
    """Seconds of one weight sync from the trainer (devices 0..trainer_devices-1) to the rollout engines (the next
    rollout.devices devices) by `method`; `recipe_engine`: the checkpoint engine is verl 0.7's recipe engine."""
    ts = sync_tensors(table, train, trainer_devices, cluster, profile)
    rollout_ranks = list(range(trainer_devices, trainer_devices + rollout.devices))
    if method == "per_tensor":
        group = list(range(trainer_devices)) + rollout_ranks
        sizes, of_size = np.unique(ts.nbytes, return_inverse=True)  # an MoE model's experts share a few sizes
        bcast = np.array([_broadcast(cluster, profile, group, b) for b in sizes])[of_size]
        load = ts.load_s + load_call_s(table, profile)
        # the trainer exports tensor i+1 while the rollout loads tensor i; broadcast i+1 waits for both
        overlapped = np.maximum(ts.export_s[1:], load[:-1]).sum()
        seconds = float(ts.export_s[0] + bcast.sum() + overlapped + load[-1])
        return SyncTime(method, seconds, float(ts.export_s.sum()), float(bcast.sum()), float(load.sum()),
                        len(ts.nbytes), len(ts.nbytes))
    if method != "checkpoint_engine":
        raise ValueError(f"weight sync method {method!r} is not one of {', '.join(SYNC_METHODS)}")
    if recipe_engine:
        return recipe_checkpoint_engine(ts, table, trainer_devices, rollout_ranks, cluster, profile)
    buckets = _buckets(ts.nbytes)
    group = [0, *rollout_ranks]
    fill = np.bincount(buckets, weights=ts.export_s)
    size = np.bincount(buckets, weights=ts.nbytes)
    bcast = np.array([_broadcast(cluster, profile, group, b) for b in size])
    load = np.bincount(buckets, weights=ts.load_s)
    load[0] += load_call_s(table, profile)  # the engine's one load_weights call over the stream
    seconds = double_buffered(fill, bcast, load)
    return SyncTime(method, seconds, float(fill.sum()), float(bcast.sum()), float(load.sum()), len(ts.nbytes),
                    len(size))


def recipe_checkpoint_engine(ts: SyncTensors, table: TensorTable, trainer_devices: int, rollout_ranks: list[int],
                             cluster: Cluster, profile: Profile) -> SyncTime:
    """verl 0.7's fully async recipe engine as its code runs at its defaults, one phase after another:
    - every trainer rank walks the whole export (its gathers are collective) and copies the tensors whose index
      modulo the trainer ranks is its rank to host memory (cache_actor_weights_to_cpu);
    - each rank packs its tensors, in order, into buckets of RECIPE_BUCKET_BYTES (register_checkpoint);
    - round k: every rank copies its bucket k to the device, then the ranks broadcast theirs in turn to the group of
      every trainer and rollout rank, and the rollout ranks hand each to load_weights (one call a bucket) before the
      next broadcast, which, being collective, waits for them (update_checkpoint without
      overlap_broadcast_and_consume).

    The export's seconds include its copy to host, the broadcasts' the copies to the device. Not counted: the pinned
    host buffers' allocation and the host-side copy into them (no source for a GPU host's page-locking rate)."""
    owner = np.arange(len(ts.nbytes)) % trainer_devices
    group = list(range(trainer_devices)) + rollout_ranks
    shares = [ts.nbytes[owner == rank] for rank in range(trainer_devices)]
    export = float(ts.export_s.sum()) + host_copy_time(cluster, profile, float(max(s.sum() for s in shares)))
    sizes = [np.bincount(_buckets(share, RECIPE_BUCKET_BYTES), weights=share) for share in shares]  # per rank
    rounds = max(len(s) for s in sizes)
    to_device = sum(max(host_copy_time(cluster, profile, float(s[k])) for s in sizes if k < len(s))
                    for k in range(rounds))
    buckets = [float(b) for s in sizes for b in s]
    bcast = sum(_broadcast(cluster, profile, group, b) for b in buckets)
    load = float(ts.load_s.sum()) + len(buckets) * load_call_s(table, profile)  # every entry once, a call a bucket
    return SyncTime("checkpoint_engine", export + to_device + bcast + load, export, to_device + bcast, load,
                    len(ts.nbytes), len(buckets))


def load_call_s(table: TensorTable, profile: Profile) -> float:
    """The fixed host cost of one load_weights call: the call, and in an MoE model the expert mapping it rebuilds
    (three entries per expert: FusedMoE.make_expert_params_mapping)."""
    return profile["vllm_load_call_us"] * 1e-6 + table.expert_mapping * profile["vllm_load_call_mapping_ns"] * 1e-9


def _broadcast(cluster: Cluster, profile: Profile, group: list[int], nbytes: float) -> float:
    return collective_time(cluster, profile, group, "broadcast", nbytes)


def _buckets(nbytes: np.ndarray, capacity: float = CHECKPOINT_BUCKET_BYTES) -> np.ndarray:
    """The bucket of every tensor, filled in order: a tensor that would overflow the bucket starts the next (a
    tensor larger than a bucket goes in chunks; here it takes a bucket of its own)."""
    out = np.empty(len(nbytes), dtype=np.int64)
    bucket, used = 0, 0.0
    for i, b in enumerate(nbytes):
        if used and used + b > capacity:
            bucket, used = bucket + 1, 0.0
        out[i], used = bucket, used + b
    return out


def double_buffered(fill: np.ndarray, bcast: np.ndarray, load: np.ndarray) -> float:
    """End of a three-stage pipeline over buckets with two buffers on each side: bucket k fills once its sender
    buffer is free (bucket k-2 broadcast), is broadcast after its fill and bucket k-1's broadcast once its receive
    buffer is free (bucket k-2 loaded), and is loaded after its broadcast and bucket k-1's load."""
    n = len(fill)
    filled, sent, loaded = np.zeros(n), np.zeros(n), np.zeros(n)
    for k in range(n):
        start = max(filled[k - 1] if k else 0.0, sent[k - 2] if k >= 2 else 0.0)
        filled[k] = start + fill[k]
        sent[k] = max(filled[k], sent[k - 1] if k else 0.0, loaded[k - 2] if k >= 2 else 0.0) + bcast[k]
        loaded[k] = max(sent[k], loaded[k - 1] if k else 0.0) + load[k]
    return float(loaded[-1]) if n else 0.0
