"""The twin's exact transfer list, cut into chunks and packed into all-to-all-v rounds (pure Python).

`directed`: every transfer is cut into chunks of at most `directed_chunk_bytes` (row-major element
ranges of its block), so a receiver takes ceil(bytes / chunk) rounds per transfer, as the twin counts.
All chunks form one step. `all_gather`: one step per tensor, whole blocks, in phases: a block a source
got by the pipeline broadcast is forwarded only in a later phase than the one that brought it.
In every round each rank sends at most one piece and receives at most one: a bipartite edge colouring
(Konig), so a step takes as many rounds as its busiest sender or receiver has pieces.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Literal

from twin.catalog.inventory import Block, TensorSpec, block_intersection, block_numel
from twin.cost_models.placement import Placement
from twin.cost_models.reshard import Transfer, directed_chunk_bytes, transfers

Method = Literal["directed", "all_gather"]
METHODS: tuple[Method, ...] = ("directed", "all_gather")


@dataclass(frozen=True)
class Piece:
    """Elements [start, stop) (row-major inside `block`) of one transfer: one all-to-all-v payload."""

    src: int
    dst: int
    tensor: str
    block: Block
    start: int
    stop: int
    nbytes: int


@dataclass
class Step:
    """Rounds that share one staging set-up: all of `directed`, or one tensor of `all_gather`."""

    tensor: TensorSpec | None
    rounds: list[list[Piece]]
    slots: tuple[Block, ...] = ()  # all_gather: the tensor's distinct training blocks, in gather-buffer order


@dataclass
class Schedule:
    method: Method
    chunk_bytes: int | None  # directed only
    steps: list[Step] = field(default_factory=list)


def contains(outer: Block, inner: Block) -> bool:
    return block_intersection(outer, inner) == inner


def build_schedule(pl: Placement, method: Method) -> Schedule:
    """The rounds of `method` for placement `pl`, identical on every rank."""
    if method not in METHODS:
        raise ValueError(f"reshard method {method!r} is not one of {', '.join(METHODS)}")
    by_tensor: dict[str, list[Transfer]] = defaultdict(list)
    for tr in transfers(pl, method):
        by_tensor[tr.tensor].append(tr)
    if method == "directed":
        chunk = directed_chunk_bytes(pl)
        pieces = []
        for t in pl.tensors:
            if any(_phases(pl, t, by_tensor[t.name])):
                raise ValueError(f"{t.name}: a directed transfer is served from a block its source did not hold")
            pieces += [p for tr in by_tensor[t.name] for p in _chunks(tr, chunk // t.dtype_bytes)]
        return Schedule(method, chunk, [Step(None, _rounds(pieces))] if pieces else [])
    steps = []
    for t in pl.tensors:
        trs = by_tensor[t.name]
        if not trs:
            continue
        phases = _phases(pl, t, trs)
        rounds = []
        for phase in sorted(set(phases)):
            rounds += _rounds([_whole(tr) for tr, ph in zip(trs, phases, strict=True) if ph == phase])
        steps.append(Step(t, rounds, holder_blocks(pl, t)))
    return Schedule(method, None, steps)


def holder_blocks(pl: Placement, t: TensorSpec) -> tuple[Block, ...]:
    """The distinct training blocks of `t`, in device order."""
    seen: dict[Block, None] = {}
    for d in range(pl.devices):
        for b in pl.train_blocks(t, d):
            seen.setdefault(b, None)
    return tuple(seen)


def _whole(tr: Transfer) -> Piece:
    return Piece(tr.src, tr.dst, tr.tensor, tr.block, 0, block_numel(tr.block), tr.nbytes)


def _chunks(tr: Transfer, elems: int) -> list[Piece]:
    n = block_numel(tr.block)
    size = tr.nbytes // n
    return [Piece(tr.src, tr.dst, tr.tensor, tr.block, a, min(n, a + elems), (min(n, a + elems) - a) * size)
            for a in range(0, n, elems)]


def _phases(pl: Placement, t: TensorSpec, trs: list[Transfer]) -> list[int]:
    """0 for a transfer its source serves from its training shard, else 1 + the phase that brought it."""
    phases: list[int | None] = [None] * len(trs)
    got: dict[int, list[tuple[Block, int]]] = defaultdict(list)  # device -> (block received, phase)
    while None in phases:
        progress = False
        for i, tr in enumerate(trs):
            if phases[i] is not None:
                continue
            if any(contains(b, tr.block) for b in pl.train_blocks(t, tr.src)):
                phases[i] = 0
            else:
                phases[i] = next((ph + 1 for b, ph in got[tr.src] if contains(b, tr.block)), None)
            if phases[i] is not None:
                got[tr.dst].append((tr.block, phases[i]))
                progress = True
        if not progress:
            raise ValueError(f"{t.name}: a transfer's source never gets the block it must send")
    return [p for p in phases if p is not None]


def _rounds(pieces: list[Piece]) -> list[list[Piece]]:
    """Colour the pieces so that no rank sends or receives two in one round, with max-degree colours."""
    out_at: dict[int, dict[int, int]] = defaultdict(dict)  # src -> round -> piece index
    in_at: dict[int, dict[int, int]] = defaultdict(dict)  # dst -> round -> piece index
    colour = [0] * len(pieces)
    for i, p in enumerate(pieces):
        a, b = _free(out_at[p.src]), _free(in_at[p.dst])
        if a in in_at[p.dst] and b not in out_at[p.src]:
            a = b
        elif a in in_at[p.dst]:
            _swap_path(pieces, colour, out_at, in_at, p.dst, a, b)
        colour[i] = a
        out_at[p.src][a] = i
        in_at[p.dst][a] = i
    rounds: list[list[Piece]] = [[] for _ in range(max(colour, default=-1) + 1)]
    for i, c in enumerate(colour):
        rounds[c].append(pieces[i])
    return rounds


def _free(used: dict[int, int]) -> int:
    c = 0
    while c in used:
        c += 1
    return c


def _swap_path(pieces: list[Piece], colour: list[int], out_at: dict[int, dict[int, int]],
               in_at: dict[int, dict[int, int]], dst: int, a: int, b: int) -> None:
    """Swap colours a and b along the a/b path that starts at receiver `dst` with its a-piece (Kempe chain)."""
    path = []
    node, at_receiver, want = dst, True, a
    while (i := (in_at if at_receiver else out_at)[node].get(want)) is not None:
        path.append(i)
        node = pieces[i].src if at_receiver else pieces[i].dst
        at_receiver, want = not at_receiver, b if want == a else a
    for i in path:
        del out_at[pieces[i].src][colour[i]], in_at[pieces[i].dst][colour[i]]
    for i in path:
        colour[i] = b if colour[i] == a else a
        out_at[pieces[i].src][colour[i]] = i
        in_at[pieces[i].dst][colour[i]] = i
