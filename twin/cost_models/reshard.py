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
  traffic as all_gather) and streamed to the rollout in buckets of update_weights_bucket_megabytes. From a
  Megatron trainer mbridge exports the routed experts one local expert at a time (gathered over the EP
  group), so a rank stages EP experts, not the layer's stacked set.

`transfers` yields the exact list; `reshard_stats` aggregates it per device and per link tier without
listing it. Tensors with the same shape and sharding are held at the same positions of their pipeline
stage, so each such class is expanded once for all its stages, vectorised over devices, and what a device
receives is summed over the stages in closed form.
"""

from __future__ import annotations

import bisect
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal, NamedTuple

import numpy as np

from twin.catalog.inventory import Block, Inventory, TensorSpec, block_intersection, block_is_contiguous, block_numel
from twin.cost_models.placement import Placement
from twin.cost_models.static import tensor_table
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
    return chunk_bytes(pl.inv)


def chunk_bytes(inv: Inventory) -> int:
    largest = tensor_table(inv).largest_expert_bytes
    return largest if largest else DENSE_CHUNK_BYTES


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
    rounds: np.ndarray  # transfer rounds of each device: chunks received (directed), tensors exported (gathers)
    sent_rounds: np.ndarray  # directed: chunks each device sends; gathers: zeros
    transfers: int  # number of block transfers (before chunking)
    tier_bytes: dict[str, np.ndarray]  # tier -> per device, the larger of bytes sent and received on it

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
    def collective_rounds(self) -> int:
        """Collective calls of the transfer, every device taking part in each: directed, all-to-all-v rounds that
        carry at most one chunk into and one out of a device, so the busiest sender or receiver sets their number
        (Konig; executor/reshard/schedule.py packs them so); gathers, one per tensor exported."""
        sent = int(self.sent_rounds.max()) if len(self.sent_rounds) else 0
        return max(self.rounds_max, sent)

    @property
    def extra_bytes_max(self) -> int:
        return int(self.extra_bytes.max()) if len(self.extra_bytes) else 0


TRASH = 4  # a fifth row of the per-tier port sums: what lands there is no flow (a receiver's own block)


class _Arrays:
    """Per-device numpy views of the cluster's locality, for vectorised tier look-ups (tier 0 everywhere
    without a cluster), and the tier of flows between two training stages where it depends on them only."""

    def __init__(self, pl: Placement, cluster: Cluster | None) -> None:
        n = pl.devices
        self.size = pl.stage_size
        n_stages = n // pl.stage_size
        self.tier_names: list[str] = []
        self.cluster = cluster is not None
        if cluster is None:
            self.stage_tiers: np.ndarray | None = np.zeros((n_stages, n_stages), dtype=np.int64)
            np.fill_diagonal(self.stage_tiers, TRASH)
            return
        if n > cluster.devices:
            cluster.locality(n - 1)  # raises: the placement has more devices than the cluster
        loc = cluster.locality_array[:n]
        self.card, self.node, self.pod = loc[:, 0], loc[:, 1], loc[:, 2]
        kind = cluster.kind
        self.tier_names = [kind.chip_tier or kind.node_tier, kind.node_tier, kind.pod_tier or kind.scaleout_tier,
                           kind.scaleout_tier]
        self.has_chip = kind.chip_tier is not None
        self.has_pod = kind.pod_tier is not None
        # a card lies in one node and a node in one pod: sharing a card implies sharing its node and pod, and
        # a code of pod, node and card bit fields (card lowest) differs first in the outermost field not shared
        self.nested = _within(self.card, self.node) and _within(self.node, self.pod)
        card_bits = int(self.card.max()).bit_length()
        pod_shift = card_bits + int(self.node.max()).bit_length()
        self.code = (self.pod << pod_shift) | (self.node << card_bits) | self.card
        self.levels = np.array([1, 1 << card_bits, 1 << pod_shift], dtype=np.int64)  # card, node, pod differ
        self.by_level = np.array([0 if self.has_chip else 1, 1, 2 if self.has_pod else 3, 3], dtype=np.int64)
        self.stage_tiers = self._stage_tiers(n_stages)

    def tiers(self, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
        """Index into tier_names of the slowest tier between each (src, dst) pair (Cluster.pair_tier)."""
        if not self.cluster:
            return np.zeros(np.broadcast_shapes(src.shape, dst.shape), dtype=np.int64)
        if self.nested:  # the highest of card, node, pod fields where the pair's codes differ decides its tier
            return self.by_level[np.searchsorted(self.levels, self.code[src] ^ self.code[dst], side="right")]
        out = np.full(np.broadcast_shapes(src.shape, dst.shape), 3)
        if self.has_pod:
            out = np.where(self.pod[src] == self.pod[dst], 2, out)
        out = np.where(self.node[src] == self.node[dst], 1, out)
        if self.has_chip:
            out = np.where(self.card[src] == self.card[dst], 0, out)
        return out

    def _stage_tiers(self, n_stages: int) -> np.ndarray | None:
        """[s, r]: the tier of every flow from training stage s to stage r != s (TRASH on the diagonal), when it
        depends on the two stages only: no node holds devices of two stages, and two stages lie in one pod or
        in different pods. None otherwise."""
        first = np.arange(n_stages) * self.size
        last = first + self.size - 1
        monotone = all(bool((np.diff(x) >= 0).all()) for x in (self.card, self.node, self.pod))
        if not (self.nested and monotone) or (self.node[first[1:]] == self.node[last[:-1]]).any():
            return None
        lo, hi = self.pod[first], self.pod[last]
        apart = hi[:, None] < lo[None, :]  # stage s lies wholly before stage r's pods
        together = (lo == hi)[:, None] & (lo == hi)[None, :] & (lo[:, None] == lo[None, :])
        if not (apart | apart.T | together | np.eye(n_stages, dtype=bool)).all():
            return None
        out = self.tiers(np.repeat(first, n_stages).reshape(n_stages, n_stages), first)
        np.fill_diagonal(out, TRASH)
        return out


def _within(inner: np.ndarray, outer: np.ndarray) -> bool:
    """True when every `inner` domain lies inside one `outer` domain."""
    outer_of = np.zeros(int(inner.max()) + 1, dtype=outer.dtype)
    outer_of[inner] = outer
    return bool((outer_of[inner] == outer).all())


def _class_key(t: TensorSpec) -> tuple:
    """Tensors with equal keys are cut the same way inside their pipeline stage (same shape and sharding): their
    holders sit at the same positions of each stage, so they move alike up to the stage they start from."""
    return (t.shape, t.dtype_bytes, t.shard, t.group == "embedding")


class _Group(NamedTuple):
    """Devices that need the same rollout blocks of a tensor, with their place in the training layout."""

    dsts: np.ndarray
    local: np.ndarray  # position inside a training pipeline stage
    stage: np.ndarray  # training pipeline stage
    rep: int  # one of them: its rollout blocks are the group's


def _group(dsts: np.ndarray, stage_size: int) -> _Group:
    return _Group(dsts, dsts % stage_size, dsts // stage_size, int(dsts[0]))


def _groups(signature: np.ndarray, stage_size: int) -> list[_Group]:
    """The devices of each rollout signature value (ascending, as `signature == v` selects them)."""
    order = np.argsort(signature, kind="stable")
    _, starts = np.unique(signature[order], return_index=True)
    return [_group(dsts, stage_size) for dsts in np.split(order, starts[1:])]


class _Holder(NamedTuple):
    """One training block of a tensor class, by position inside the pipeline stage that holds it."""

    block: Block
    mask: np.ndarray  # position -> holds the block
    lut: np.ndarray  # replica code -> position of the holder with that code


def _local_holders(pl: Placement, t: TensorSpec, codes: np.ndarray, cut_by: dict[bool, np.ndarray]) -> list[_Holder]:
    """The training blocks of `t`, each with the positions of its stage that hold it. Megatron cuts a tensor by
    one coordinate of the position (`cut_by`: the expert-TP and expert-partition rank for routed experts, else
    the TP rank), so the blocks of one position per value of it are all the blocks."""
    size = pl.stage_size
    base = pl.stage(t) * size
    found: dict[Block, list[np.ndarray]] = {}
    if pl.train.engine == "fsdp":
        for h in _holders(pl, t):
            found[h.block] = [np.fromiter(h.devices, dtype=np.int64)]
    else:
        by = cut_by[pl.code_kind(t) == "expert"]
        values, first = np.unique(by, return_index=True)
        for i in np.argsort(first):
            held = np.flatnonzero(by == values[i])
            for b in pl.train_blocks(t, base + int(first[i])):
                found.setdefault(b, []).append(held)
    out = []
    for b, parts in found.items():
        held = np.sort(np.concatenate(parts))
        mask = np.zeros(size, dtype=bool)
        mask[held] = True
        lut = np.full(int(codes.max()) + 1, -1, dtype=np.int64)
        lut[codes[base + held]] = held  # the replica codes of a block's holders are distinct in a valid layout
        out.append(_Holder(b, mask, lut))
    return out


def _cut_by(pl: Placement) -> dict[bool, np.ndarray]:
    """Per position inside a pipeline stage, the coordinate Megatron cuts expert (True) and other tensors by."""
    if pl.train.engine == "fsdp":
        return {}
    c = pl.train_coords[:pl.stage_size]
    part = pl.train.expert_partition
    return {True: np.array([x.etp * part + x.ep for x in c]), False: np.array([x.tp for x in c])}


class _Class:
    """The pipeline stages a tensor class occurs in, how many of its tensors each holds, and what the flows of
    one block from all of them to a device of each stage carry on each tier."""

    def __init__(self, pl: Placement, members: list[TensorSpec], stage_tiers: np.ndarray | None) -> None:
        per_stage = Counter(pl.stage(m) for m in members)
        stages = np.array(sorted(per_stage), dtype=np.int64)
        self.mult = np.array([per_stage[s] for s in stages], dtype=np.int64)[:, None]  # (k, 1)
        self.offsets = stages[:, None] * pl.stage_size  # (k, 1): first device of each stage
        self.on_stage = stages[:, None]
        self.mult_at = np.zeros(pl.devices // pl.stage_size, dtype=np.int64)  # per stage, 0 where absent
        self.mult_at[stages] = self.mult[:, 0]
        self.total = len(members)
        if stage_tiers is not None:
            self.tiers_to = stage_tiers[stages]  # (k, stages): tier from each of the class's stages to each stage
            n_stages = len(self.mult_at)
            self.by_tier = np.zeros((n_stages, TRASH + 1), dtype=np.int64)  # per receiving stage: blocks per tier
            np.add.at(self.by_tier, (np.broadcast_to(np.arange(n_stages), self.tiers_to.shape), self.tiers_to),
                      self.mult)


class _Totals:
    """Per-device and per-tier sums of the flows added so far. What a receiver gets is summed per receiver; its
    ports per tier too where the tier of a flow depends on the stages only (`stage_tiers`)."""

    def __init__(self, pl: Placement, cluster: Cluster | None) -> None:
        n = self.n = pl.devices
        self.received = np.zeros(n, dtype=np.int64)
        self.rounds = np.zeros(n, dtype=np.int64)  # directed: chunks received; gathers: tensors gathered
        self.sent_rounds = np.zeros(n, dtype=np.int64)  # directed: chunks sent
        self.staged_in = np.zeros(n, dtype=np.int64)  # largest receive staging buffer
        self.packed_out = np.zeros(n, dtype=np.int64)  # largest send buffer that needs packing
        self.arrays = _Arrays(pl, cluster)
        self.port_in = np.zeros((TRASH + 1) * n, dtype=np.int64)  # tier x device, flattened
        self.port_out = np.zeros((TRASH + 1) * n, dtype=np.int64)
        self.count = 0

    def receive(self, dsts: np.ndarray, copies: np.ndarray, piece: int, rounds: int, staged: int) -> None:
        """Distinct devices `dsts` each receive `copies` blocks of `piece` bytes (`rounds` rounds per block)."""
        self.received[dsts] += copies * piece
        self.count += int(copies.sum())
        if rounds:
            self.rounds[dsts] += copies * rounds
        got = dsts[copies > 0]
        self.staged_in[got] = np.maximum(self.staged_in[got], staged)

    def from_stages(self, cls: _Class, x: np.ndarray, dsts: np.ndarray, stage: np.ndarray, own: np.ndarray,
                    piece: int, packed: int, chunks: int = 0) -> None:
        """Distinct devices `dsts` (of training stages `stage`) each get the class's block of `piece` bytes from
        position `x` of every stage of the class, except from itself (`own`: it holds it). `packed`: the send
        buffer each sender packs (0: none); `chunks`: the chunks each block is cut into (directed; 0: not counted)."""
        n = self.n
        src = cls.offsets + x  # (k, m)
        nbytes = cls.mult * piece  # (k, 1)
        own_flow = own & (cls.on_stage == stage)  # (k, m)
        if self.arrays.stage_tiers is not None:
            # the flows from other stages by the stages' tier; those from the receiver's own stage land in TRASH
            np.add.at(self.port_out, cls.tiers_to[:, stage] * n + src, nbytes)
            self.port_in.reshape(TRASH + 1, n)[:, dsts] += cls.by_tier[stage].T * piece
            same = (cls.mult_at[stage] > 0) & ~own  # from another device of the receiver's own stage
            if same.any():
                j = np.flatnonzero(same)
                sender, to, w = stage[j] * self.arrays.size + x[j], dsts[j], cls.mult_at[stage[j]] * piece
                tier = self.arrays.tiers(sender, to) * n
                np.add.at(self.port_out, tier + sender, w)
                self.port_in[tier + to] += w
        else:
            tier = np.where(own_flow, TRASH, self.arrays.tiers(src, dsts)) * n
            np.add.at(self.port_out, tier + src, nbytes)
            np.add.at(self.port_in, tier + dsts, nbytes)
        if chunks:
            np.add.at(self.sent_rounds, src[~own_flow], np.broadcast_to(cls.mult * chunks, src.shape)[~own_flow])
        if packed:
            senders = src[~own_flow] if own.any() else src
            self.packed_out[senders] = np.maximum(self.packed_out[senders], packed)

    def from_own_stage(self, src: np.ndarray, dsts: np.ndarray, nbytes: int) -> None:
        """Distinct devices `dsts` each get `nbytes` from `src` (one sender each)."""
        tier = self.arrays.tiers(src, dsts) * self.n
        np.add.at(self.port_out, tier + src, nbytes)
        self.port_in[tier + dsts] += nbytes

    def stats(self, method: str) -> ReshardStats:
        tiers: dict[str, int] = defaultdict(int)
        into: dict[str, np.ndarray] = {}
        out_of: dict[str, np.ndarray] = {}
        port_in, port_out = self.port_in.reshape(TRASH + 1, self.n), self.port_out.reshape(TRASH + 1, self.n)
        for i, name in enumerate(self.arrays.tier_names):
            if total := int(port_in[i].sum()):
                tiers[name] += total
                into[name] = into.get(name, 0) + port_in[i]
                out_of[name] = out_of.get(name, 0) + port_out[i]
        ports = {name: np.maximum(into[name], out_of[name]) for name in into}
        # directed: a device sends one chunk and receives one in the same all-to-all-v round
        return ReshardStats(method=method, received=self.received, sent=port_out[:TRASH].sum(axis=0),
                            bytes_per_tier=dict(tiers), extra_bytes=self.staged_in + self.packed_out,
                            rounds=self.rounds, sent_rounds=self.sent_rounds, transfers=self.count, tier_bytes=ports)


def _gather_staging(pl: Placement, t: TensorSpec, method: ReshardMethod) -> int:
    """Bytes a rank holds at once while a gather method exports `t`: the full tensor (the recipes' all_gather
    gathers a layer's whole expert set), except under verl's bucketed sync from Megatron, where mbridge's
    `export_weights` all-gathers one local expert over the EP group at a time (EP experts of the layer), and
    the tensors are copied into a bucket of VERL_BUCKET_BYTES before the rollout loads them."""
    if method != "verl_bucketed":
        return t.nbytes
    exported = t.nbytes
    if pl.train.engine == "megatron" and t.shard.ep_dim is not None:
        exported = t.nbytes // t.num_experts * min(t.num_experts, pl.train.ep)
    return exported + VERL_BUCKET_BYTES


def reshard_stats(pl: Placement, cluster: Cluster | None, method: ReshardMethod) -> ReshardStats:
    """Aggregate the exact transfer list of `method` per device and per tier, vectorised over devices and over
    the pipeline stages a tensor class occurs in.

    The same sources, blocks and sizes as `transfers`; tests compare the two. A receiver takes a block from
    the device at its own position in the tensor's stage when that one holds it, else from the holder with its
    replica key (directed: in the tensor's stage; gathers: in its own stage, which got it by the PP broadcast).
    """
    size = pl.stage_size
    totals = _Totals(pl, cluster)
    chunk = directed_chunk_bytes(pl)
    classes: dict[tuple, list[TensorSpec]] = defaultdict(list)
    for t in pl.tensors:
        classes[_class_key(t)].append(t)
    directed = method == "directed"
    groups = {kind: _groups(sig, size) for kind, sig in pl.rollout_signature.items()} if directed else {}
    everyone = _group(np.arange(pl.devices), size)
    cut_by = _cut_by(pl)
    for members in classes.values():
        t = members[0]
        cls = _Class(pl, members, totals.arrays.stage_tiers)
        codes = pl.replica_codes[pl.code_kind(t)]
        holders = _local_holders(pl, t, codes, cut_by)
        index = _HolderIndex(holders, t)
        if directed:
            kind = "expert" if t.shard.ep_dim is not None else "other"
            todo = [(g, pl.rollout_blocks(t, g.rep)) for g in groups[kind]]
        else:
            todo = [(everyone, [h.block for h in holders])]
        for g, needed in todo:
            g_codes = codes[g.dsts]
            g_mult = cls.mult_at[g.stage]  # the class's tensors in each receiver's own stage
            for nb in needed:
                for i in index.overlapping(nb):
                    h = holders[i]
                    sub = block_intersection(nb, h.block)
                    if sub is None:
                        continue
                    piece = block_numel(sub) * t.dtype_bytes
                    peer_holds = h.mask[g.local]  # the device at the receiver's position in each stage
                    own = peer_holds & (g_mult > 0)  # the receiver holds it itself
                    copies = cls.total - np.where(own, g_mult, 0)
                    if directed:
                        step, chunks = min(piece, chunk), -(-piece // chunk)
                        totals.receive(g.dsts, copies, piece, chunks, step)
                        x = np.where(peer_holds, g.local, h.lut[g_codes])
                        totals.from_stages(cls, x, g.dsts, g.stage, own, piece,
                                           step if needs_packing(sub, h.block) else 0, chunks)
                        continue
                    totals.receive(g.dsts, copies, piece, 0, _gather_staging(pl, t, method))
                    moving = np.flatnonzero(peer_holds)
                    if moving.size:
                        totals.from_stages(cls, g.local[moving], g.dsts[moving], g.stage[moving], own[moving],
                                           piece, 0)
                    fixed = np.flatnonzero(~peer_holds)  # served in its own stage, which got it by the broadcast
                    if fixed.size:
                        src = g.stage[fixed] * size + h.lut[g_codes[fixed]]
                        totals.from_own_stage(src, g.dsts[fixed], cls.total * piece)
        if not directed:  # every rank exports (and its rollout loads) every full tensor, one at a time
            totals.rounds += len(members)
    return totals.stats(method)


class _HolderIndex:
    """Finds the holder blocks that can overlap a needed block, by their range on the expert axis (or on
    the TP axis for other tensors), instead of trying every holder."""

    def __init__(self, holders: list[_Holder], t: TensorSpec) -> None:
        dim = t.shard.ep_dim if t.shard.ep_dim is not None else t.shard.tp_dim
        self.dim = dim
        if dim is None:
            self.order = list(range(len(holders)))
            return
        self.order = sorted(range(len(holders)), key=lambda i: holders[i].block[dim][0])
        self.starts = [holders[i].block[dim][0] for i in self.order]
        self.longest = max(h.block[dim][1] - h.block[dim][0] for h in holders)

    def overlapping(self, block: Block) -> list[int]:
        if self.dim is None:
            return self.order
        lo, hi = block[self.dim]
        first = bisect.bisect_left(self.starts, lo - self.longest + 1)
        last = bisect.bisect_left(self.starts, hi)
        return self.order[first:last]
