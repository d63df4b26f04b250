"""The weight reshard from the training layout to the rollout layout: who sends which bytes to whom.

Three methods (DESIGN 4.3):
- `all_gather`, the recipes' old path: every tensor is broadcast over PP from its stage, then gathered
  over TP and over the expert partition, so every device materialises every full tensor (the full
  expert set of a layer included) and keeps its own rollout shard.
- `directed`, the recipes' path: every block a rollout rank needs and its device does not hold is sent
  once, only to that rank, by the holder at the same position (same CP/DP, or expert-DP) of the
  tensor's stage: TP peers inside a stage, PP peers across stages, an all-to-all-v for the experts.
  Transfers run in chunks of at most one routed expert's largest projection (64 MiB for dense models),
  so a device stages one chunk at a time.
- `verl_bucketed`, current verl's checkpoint engine: full tensors are exported on every rank (the same
  traffic as all_gather) and streamed to the rollout in buckets of update_weights_bucket_megabytes.

`transfers` yields the exact list; `reshard_stats` aggregates it per device and per link tier. Tensors of
one pipeline stage with the same shape and sharding move the same way, so each such class is expanded
once and counted as often as it occurs.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Literal, NamedTuple

import numpy as np

from twin.catalog.inventory import Block, TensorSpec, block_intersection, block_is_contiguous, block_numel
from twin.cost_models.placement import Placement
from twin.topology.routing import Cluster

ReshardMethod = Literal["all_gather", "directed", "verl_bucketed"]
RESHARD_METHODS: tuple[ReshardMethod, ...] = ("all_gather", "directed", "verl_bucketed")
VERL_BUCKET_BYTES = 2048 << 20  # verl 0.9.1 rollout.checkpoint_engine.update_weights_bucket_megabytes
DENSE_CHUNK_BYTES = 64 << 20


class Transfer(NamedTuple):
    """One block of one tensor sent from one device to another."""

    src: int
    dst: int
    tensor: str
    block: Block
    nbytes: int


def directed_chunk_bytes(pl: Placement) -> int:
    """Largest single-expert projection (MoE), else 64 MiB: the directed method's staging unit."""
    experts = [t.nbytes // t.num_experts for t in pl.tensors if t.shard.ep_dim is not None]
    return max(experts) if experts else DENSE_CHUNK_BYTES


class _Holders(NamedTuple):
    block: Block
    devices: frozenset[int]
    by_key: dict[tuple[int, ...], int]  # replica key -> the holder with that key


def _holders(pl: Placement, t: TensorSpec) -> list[_Holders]:
    """Every distinct training block of `t` with the devices that hold it."""
    stage = pl.stage(t)
    if pl.train.engine == "fsdp":
        devices = range(pl.devices)
    else:
        devices = range(stage * pl.stage_size, (stage + 1) * pl.stage_size)
    found: dict[Block, list[int]] = {}
    for d in devices:
        for b in pl.train_blocks(t, d):
            found.setdefault(b, []).append(d)
    return [_Holders(b, frozenset(hs), {pl.replica_key(t, h): h for h in hs}) for b, hs in found.items()]


def _source(pl: Placement, t: TensorSpec, stage: int, d: int, h: _Holders, method: str) -> int:
    peer = pl.pp_peer(d, stage)
    if peer in h.devices:
        return peer
    src = h.by_key[pl.replica_key(t, d)]
    if method == "directed" or stage == pl.device_stage(d):
        return src
    return pl.pp_peer(src, pl.device_stage(d))  # the peer in d's stage that received it by broadcast


def _tensor_transfers(pl: Placement, t: TensorSpec, method: str) -> Iterator[tuple[Transfer, Block]]:
    """Transfers of one tensor, each with the source's training block it is cut from."""
    holders = _holders(pl, t)
    stage = pl.stage(t)
    overlaps: dict[Block, list[tuple[_Holders, Block]]] = {}  # needed block -> (holder, intersection)
    if method != "directed":  # every device gathers the full tensor: exactly the holders' blocks
        overlaps = {h.block: [(h, h.block)] for h in holders}
    for d in range(pl.devices):
        needed = pl.rollout_blocks(t, d) if method == "directed" else list(overlaps)
        for nb in needed:
            if nb not in overlaps:
                overlaps[nb] = [(h, sub) for h in holders if (sub := block_intersection(nb, h.block)) is not None]
            for h, sub in overlaps[nb]:
                if d in h.devices:
                    continue
                src = _source(pl, t, stage, d, h, method)
                yield Transfer(src, d, t.name, sub, block_numel(sub) * t.dtype_bytes), h.block


def transfers(pl: Placement, method: ReshardMethod) -> Iterator[Transfer]:
    """The exact transfer list of `method`, tensor by tensor."""
    for t in pl.tensors:
        for tr, _ in _tensor_transfers(pl, t, method):
            yield tr


def needs_packing(sub: Block, held: Block) -> bool:
    """True when `sub` is not one contiguous run of the source's local shard `held` (a send buffer is packed)."""
    local = tuple((lo - h0, hi - h0) for (lo, hi), (h0, _) in zip(sub, held, strict=True))
    return not block_is_contiguous(local, tuple(h1 - h0 for h0, h1 in held))


@dataclass
class ReshardStats:
    """Per-device and per-tier figures of one method."""

    method: str
    received: np.ndarray  # bytes per device
    sent: np.ndarray
    bytes_per_tier: dict[str, int]
    extra_bytes: np.ndarray  # staging memory per device
    rounds: np.ndarray  # transfer rounds each device takes part in as a receiver
    transfers: int  # number of block transfers (before chunking)
    pair_bytes: dict[tuple[int, int], int] = field(default_factory=dict)  # (src, dst) -> bytes

    @property
    def bytes_total(self) -> int:
        return int(self.received.sum())

    @property
    def bytes_per_device_max(self) -> int:
        return int(self.received.max()) if len(self.received) else 0

    @property
    def rounds_max(self) -> int:
        return int(self.rounds.max()) if len(self.rounds) else 0

    @property
    def extra_bytes_max(self) -> int:
        return int(self.extra_bytes.max()) if len(self.extra_bytes) else 0


def _class_key(pl: Placement, t: TensorSpec) -> tuple:
    """Tensors with equal keys move identically (same stage, shape and sharding)."""
    return (pl.stage(t), t.shape, t.dtype_bytes, t.shard, t.group == "embedding")


def reshard_stats(pl: Placement, cluster: Cluster | None, method: ReshardMethod,
                  keep_pairs: bool = False) -> ReshardStats:
    """Aggregate the exact transfer list of `method` per device, per tier and per (src, dst) pair."""
    n = pl.devices
    received = [0] * n
    rounds = [0] * n  # directed: chunks received; gathers: tensors gathered
    sent = [0] * n
    staged_in = [0] * n  # largest receive staging buffer
    packed_out = [0] * n  # largest send buffer that needs packing
    tiers: dict[str, int] = defaultdict(int)
    pairs: dict[tuple[int, int], int] = defaultdict(int)
    chunk = directed_chunk_bytes(pl)
    classes: dict[tuple, list[TensorSpec]] = defaultdict(list)
    for t in pl.tensors:
        classes[_class_key(pl, t)].append(t)
    count = 0
    for members in classes.values():
        rep, mult = members[0], len(members)
        packing: dict[tuple[Block, Block], bool] = {}
        gathered: set[int] = set()
        for tr, held in _tensor_transfers(pl, rep, method):
            received[tr.dst] += tr.nbytes * mult
            sent[tr.src] += tr.nbytes * mult
            count += mult
            if cluster is not None:
                tiers[cluster.pair_tier(tr.src, tr.dst)] += tr.nbytes * mult
            if keep_pairs:
                pairs[(tr.src, tr.dst)] += tr.nbytes * mult
            if method == "directed":
                piece = min(tr.nbytes, chunk)
                rounds[tr.dst] += -(-tr.nbytes // chunk) * mult
                staged_in[tr.dst] = max(staged_in[tr.dst], piece)
                key = (tr.block, held)
                if key not in packing:
                    packing[key] = needs_packing(tr.block, held)
                if packing[key]:
                    packed_out[tr.src] = max(packed_out[tr.src], piece)
            else:
                staged = rep.nbytes + (VERL_BUCKET_BYTES if method == "verl_bucketed" else 0)
                staged_in[tr.dst] = max(staged_in[tr.dst], staged)
                gathered.add(tr.dst)
        for d in gathered:
            rounds[d] += mult
    # directed: a device sends one chunk and receives one in the same all-to-all-v round
    return ReshardStats(method=method, received=np.array(received, dtype=np.int64),
                        sent=np.array(sent, dtype=np.int64), bytes_per_tier=dict(tiers),
                        extra_bytes=np.array(staged_in, dtype=np.int64) + np.array(packed_out, dtype=np.int64),
                        rounds=np.array(rounds, dtype=np.int64), transfers=count, pair_bytes=dict(pairs))
