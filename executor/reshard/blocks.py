"""Block regions of tensors as torch views, and their row-major element ranges as flat byte buffers."""

from __future__ import annotations

from typing import TYPE_CHECKING

from twin.catalog.inventory import Block

if TYPE_CHECKING:
    import torch


def local_view(tensor: torch.Tensor, held: Block, sub: Block) -> torch.Tensor:
    """The part `sub` (full-tensor coordinates) of `tensor`, which stores the block `held`."""
    return tensor[tuple(slice(lo - h0, hi - h0) for (lo, hi), (h0, _) in zip(sub, held, strict=True))]


def flat_pieces(view: torch.Tensor, start: int, stop: int) -> list[torch.Tensor]:
    """Regular views whose row-major concatenation is elements [start, stop) of `view`.

    At most two partial rows per dimension plus one run of whole rows: O(ndim) views, each one copy.
    """
    if start >= stop:
        return []
    if view.is_contiguous() or view.dim() == 1:
        return [view.reshape(-1)[start:stop] if view.is_contiguous() else view[start:stop]]
    inner = view[0].numel()
    first, last = start // inner, (stop - 1) // inner
    if first == last:
        return flat_pieces(view[first], start - first * inner, stop - first * inner)
    head, tail = [], []
    if start > first * inner:
        head = flat_pieces(view[first], start - first * inner, inner)
        first += 1
    if stop < (last + 1) * inner:
        tail = flat_pieces(view[last], 0, stop - last * inner)
    else:
        last += 1
    return [*head, *([view[first:last]] if last > first else []), *tail]


def as_bytes(tensor: torch.Tensor) -> torch.Tensor:
    """A contiguous tensor's storage as a flat uint8 view (never a copy: raises when not contiguous)."""
    import torch

    return tensor.view(-1).view(torch.uint8)


def pack(pieces: list[torch.Tensor], out: torch.Tensor) -> torch.Tensor:
    """Copy `pieces` one after another into the uint8 buffer `out`; returns the filled part."""
    pos = 0
    for p in pieces:
        n = p.numel() * p.element_size()
        out[pos:pos + n].view(p.dtype).view(p.shape).copy_(p)
        pos += n
    return out[:pos]


def unpack(data: torch.Tensor, pieces: list[torch.Tensor]) -> None:
    """Copy the uint8 buffer `data` into `pieces`, in order (the inverse of `pack`)."""
    pos = 0
    for p in pieces:
        n = p.numel() * p.element_size()
        p.copy_(data[pos:pos + n].view(p.dtype).view(p.shape))
        pos += n
    if pos != data.numel():
        raise ValueError(f"received {data.numel()} bytes for a region of {pos}")
