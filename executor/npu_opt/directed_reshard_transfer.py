"""The recipes' weight reshard as real code: training shards in, this rank's rollout shards out.

`run_transfer` executes the twin's exact transfer list (`executor.reshard.schedule`) with
`torch.distributed.all_to_all_single` (uneven splits; gloo on CPU, HCCL on NPU), one round after another,
each rank sending at most one piece and receiving at most one per round.

- `directed`: each needed block goes once, only to the rank that needs it, in chunks of at most
  `directed_chunk_bytes`. Staging, allocated once: one receive buffer (the largest chunk this rank
  receives) and one pack buffer (the largest chunk it sends that is not one contiguous run of its shard).
- `all_gather`: tensor by tensor, every rank that lacks part of a tensor materialises the whole tensor
  in a gather buffer (its training blocks in slot order), receives into its slots (forwarding the ones
  it got by the pipeline broadcast), cuts its rollout shard out, and frees it.

Bytes are counted from the split sizes handed to torch.distributed; the staging peak from the buffers
actually allocated. torch is imported lazily.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from executor.reshard.blocks import as_bytes, flat_pieces, local_view, pack, unpack
from executor.reshard.schedule import Method, Piece, Schedule, Step, build_schedule, contains
from twin.catalog.inventory import Block, TensorSpec, block_intersection, block_numel
from twin.cost_models.placement import Placement

if TYPE_CHECKING:
    import torch

    from twin.plan import Plan

Shards = dict[str, dict[Block, "torch.Tensor"]]  # tensor name -> {training block: contiguous tensor}
RolloutShards = dict[str, list[tuple[Block, "torch.Tensor"]]]  # tensor name -> blocks as rollout_blocks lists them


@dataclass
class RankStats:
    """What one rank did in one transfer. `seconds` covers the rounds (exchange, packing, unpacking) after
    the rollout tensors are allocated and the blocks the rank already holds are copied in; `exchange_s` the part
    of it inside the all-to-all-v calls (the rest is this rank's own packing, unpacking and bookkeeping);
    `exchange_spans` each call's entry and exit on the host's monotonic clock (`time.perf_counter`, one clock for
    every process of a host), so that the ranks' calls of one round can be set side by side."""

    rank: int
    method: str
    sent_bytes: int
    received_bytes: int
    staging_peak_bytes: int
    rounds: int  # all-to-all-v calls
    receive_rounds: int  # directed: chunks received (the twin's `rounds`); all_gather: tensors gathered
    seconds: float
    exchange_s: float
    exchange_spans: list[tuple[float, float]]

    def as_dict(self) -> dict:
        return asdict(self)


def round_overlap(spans: list[list[tuple[float, float]]]) -> tuple[float, float]:
    """Summed over one transfer's all-to-all rounds (each rank's `RankStats.exchange_spans`, one host clock): how
    long the first rank to enter a round waited for the last, and how long every rank was inside it at once."""
    wait = both = 0.0
    for calls in zip(*spans, strict=True):
        enters, exits = [e for e, _ in calls], [x for _, x in calls]
        wait += max(enters) - min(enters)
        both += max(0.0, min(exits) - max(enters))
    return wait, both


@dataclass
class TransferResult:
    rollout: RolloutShards
    stats: RankStats


def placement_of(source: Placement | Plan) -> Placement:
    """A placement as is, or the one of a plan's model, layouts and devices."""
    if isinstance(source, Placement):
        return source
    from twin.catalog.registry import load_model

    lay = source.layout
    return Placement(load_model(source.scenario.model), lay.train, lay.rollout, source.predictions.devices)


def run_transfer(source: Placement | Plan, method: Method, rank: int, world: int, shards: Shards,
                 group: object | None = None, *, schedule: Schedule | None = None) -> TransferResult:
    """Move this rank's training `shards` so that it ends with exactly its rollout shards.

    Collective: every rank of `group` (default: the world) calls it with the same placement and method.
    """
    pl = placement_of(source)
    if pl.devices != world:
        raise ValueError(f"the placement is cut for {pl.devices} devices, the group has {world} ranks")
    device = _check_shards(pl, rank, shards)
    schedule = schedule or build_schedule(pl, method)
    if schedule.method != method:
        raise ValueError(f"schedule is for {schedule.method}, not {method}")
    run = _RankRun(pl, rank, world, shards, group, device)
    start = time.perf_counter()
    for step in schedule.steps:
        if step.tensor is None:
            run.directed_step(step)
        else:
            run.gather_step(step)
    run.finish()
    stats = RankStats(rank=rank, method=method, sent_bytes=run.sent, received_bytes=run.received,
                      staging_peak_bytes=run.staging_peak, rounds=run.rounds,
                      receive_rounds=run.receive_rounds, seconds=time.perf_counter() - start,
                      exchange_s=sum(end - start for start, end in run.exchange_spans),
                      exchange_spans=run.exchange_spans)
    return TransferResult(rollout=run.out, stats=stats)


def _check_shards(pl: Placement, rank: int, shards: Shards) -> torch.device:
    """The device of the shards; raises when they are not exactly the rank's training blocks."""
    import torch

    device = torch.device("cpu")
    for t in pl.tensors:
        want = set(pl.train_blocks(t, rank))
        have = shards.get(t.name, {})
        if set(have) != want:
            raise ValueError(f"rank {rank}: {t.name} shards cover {sorted(have)}, the layout gives {sorted(want)}")
        for b, x in have.items():
            shape = tuple(hi - lo for lo, hi in b)
            if tuple(x.shape) != shape or not x.is_contiguous() or x.dtype != _dtype(t):
                raise ValueError(f"rank {rank}: {t.name} block {b} needs a contiguous {_dtype(t)} tensor of "
                                 f"shape {shape}, got {x.dtype} {tuple(x.shape)}")
            device = x.device
    return device


def _dtype(t: TensorSpec) -> torch.dtype:
    import torch

    return getattr(torch, t.dtype)


def _needs_pack(pieces: list[torch.Tensor]) -> bool:
    """A send is zero-copy only when it is one contiguous run of the shard."""
    return len(pieces) > 1 or not pieces[0].is_contiguous()


class _RankRun:
    """One rank's state through the steps: its rollout tensors, staging, and counted bytes."""

    def __init__(self, pl: Placement, rank: int, world: int, shards: Shards, group: object | None,
                 device: torch.device) -> None:
        import torch

        self.rank, self.world, self.shards, self.group, self.device = rank, world, shards, group, device
        self.empty = torch.empty(0, dtype=torch.uint8, device=device)
        self.sent = self.received = self.rounds = self.receive_rounds = 0
        self.exchange_spans: list[tuple[float, float]] = []
        self.staging_live = self.staging_peak = 0
        self.out: RolloutShards = {}
        self.filled: dict[tuple[str, int], int] = {}
        for t in pl.tensors:
            needed = pl.rollout_blocks(t, rank)
            if not needed:
                continue
            self.out[t.name] = [(nb, torch.empty(tuple(hi - lo for lo, hi in nb), dtype=_dtype(t), device=device))
                                for nb in needed]
            for i, (nb, _) in enumerate(self.out[t.name]):
                self.filled[(t.name, i)] = 0
                for hb, held in shards.get(t.name, {}).items():
                    if (inter := block_intersection(nb, hb)) is not None:
                        self._fill(t.name, i, inter, local_view(held, hb, inter))

    # staging buffers, counted as they are allocated and freed
    def _alloc(self, nbytes: int) -> torch.Tensor:
        import torch

        self.staging_live += nbytes
        self.staging_peak = max(self.staging_peak, self.staging_live)
        return torch.empty(nbytes, dtype=torch.uint8, device=self.device)

    def _free(self, nbytes: int) -> None:
        self.staging_live -= nbytes

    def _fill(self, name: str, index: int, region: Block, data: torch.Tensor) -> None:
        nb, x = self.out[name][index]
        local_view(x, nb, region).copy_(data)
        self.filled[(name, index)] += block_numel(region)

    def _exchange(self, out: torch.Tensor, src: int | None, inp: torch.Tensor, dst: int | None) -> None:
        """One all-to-all-v round: at most one payload in, at most one out."""
        import torch.distributed as dist

        in_splits, out_splits = [0] * self.world, [0] * self.world
        if dst is not None:
            in_splits[dst] = inp.numel()
        if src is not None:
            out_splits[src] = out.numel()
        start = time.perf_counter()
        dist.all_to_all_single(out, inp, out_splits, in_splits, group=self.group)
        self.exchange_spans.append((start, time.perf_counter()))
        self.sent += inp.numel() if dst is not None else 0
        self.received += out.numel() if src is not None else 0
        self.rounds += 1

    def _mine(self, round_: list[Piece]) -> tuple[Piece | None, Piece | None]:
        send = next((p for p in round_ if p.src == self.rank), None)
        recv = next((p for p in round_ if p.dst == self.rank), None)
        return send, recv

    def _shard_pieces(self, p: Piece) -> list[torch.Tensor]:
        """The regions of this rank's training shard that make up piece `p`."""
        hb, held = next((b, x) for b, x in self.shards[p.tensor].items() if contains(b, p.block))
        return flat_pieces(local_view(held, hb, p.block), p.start, p.stop)

    def directed_step(self, step: Step) -> None:
        sends = [p for r in step.rounds for p in r if p.src == self.rank]
        packed = [p.nbytes for p in sends if _needs_pack(self._shard_pieces(p))]
        recv_cap = max((p.nbytes for r in step.rounds for p in r if p.dst == self.rank), default=0)
        recv_buf, pack_buf = self._alloc(recv_cap), self._alloc(max(packed, default=0))
        for round_ in step.rounds:
            send, recv = self._mine(round_)
            inp = self.empty
            if send is not None:
                pieces = self._shard_pieces(send)
                inp = pack(pieces, pack_buf) if _needs_pack(pieces) else as_bytes(pieces[0])
            out = recv_buf[:recv.nbytes] if recv is not None else self.empty
            self._exchange(out, recv.src if recv else None, inp, send.dst if send else None)
            if recv is not None:
                self._receive(recv, out)
        self._free(recv_buf.numel() + pack_buf.numel())

    def _receive(self, p: Piece, data: torch.Tensor) -> None:
        index, (nb, x) = next((i, o) for i, o in enumerate(self.out[p.tensor]) if contains(o[0], p.block))
        unpack(data, flat_pieces(local_view(x, nb, p.block), p.start, p.stop))
        self.filled[(p.tensor, index)] += p.stop - p.start
        self.receive_rounds += 1

    def gather_step(self, step: Step) -> None:
        t = step.tensor
        assert t is not None
        receives = any(p.dst == self.rank for r in step.rounds for p in r)
        buf = self._alloc(t.nbytes) if receives else self.empty
        self.receive_rounds += receives
        offsets, pos = {}, 0
        for b in step.slots:
            offsets[b] = pos
            pos += block_numel(b) * t.dtype_bytes
        got: dict[Block, torch.Tensor] = {}
        for round_ in step.rounds:
            send, recv = self._mine(round_)
            inp = self.empty
            if send is not None:
                own = self.shards.get(t.name, {}).get(send.block)
                inp = as_bytes(own if own is not None else got[send.block])
            out = buf[offsets[recv.block]:offsets[recv.block] + recv.nbytes] if recv is not None else self.empty
            self._exchange(out, recv.src if recv else None, inp, send.dst if send else None)
            if recv is not None:
                got[recv.block] = out.view(_dtype(t)).view(tuple(hi - lo for lo, hi in recv.block))
        for b, x in got.items():
            for i, (nb, _) in enumerate(self.out.get(t.name, [])):
                if (inter := block_intersection(nb, b)) is not None:
                    self._fill(t.name, i, inter, local_view(x, b, inter))
        self._free(buf.numel())

    def finish(self) -> None:
        for (name, i), n in self.filled.items():
            nb = self.out[name][i][0]
            if n != block_numel(nb):
                raise RuntimeError(f"rank {self.rank}: {name} block {nb} assembled {n} of {block_numel(nb)} elements")
        if self.device.type != "cpu":
            import torch

            getattr(torch, self.device.type).synchronize()
