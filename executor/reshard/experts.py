"""Routed experts one by one (the HF checkpoint, mbridge) and fused (the twin's inventory, vLLM's FusedMoE).

A checkpoint on disk names each expert's projections (`model.layers.N.mlp.experts.E.gate_proj.weight`, up,
down); the twin's inventory keeps one tensor per layer and projection with the expert index on dimension 0
(`...mlp.experts.gate_up_proj` [E, 2 x I, H] with gate rows before up rows, `...mlp.experts.down_proj`
[E, H, I]), which is also how vLLM's FusedMoE stores its local experts (w13 = gate then up, w2). These
functions translate tensors, names and blocks between the two, exactly: a block of one expert's projection
is the fused block with that expert's index and the projection's row offset.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from twin.catalog.inventory import Block

if TYPE_CHECKING:
    import torch

PER_EXPERT = re.compile(r"^(?P<prefix>.+\.mlp\.experts)\.(?P<expert>\d+)\.(?P<proj>gate_proj|up_proj|down_proj)"
                        r"\.weight$")
FUSED = {"gate_proj": "gate_up_proj", "up_proj": "gate_up_proj", "down_proj": "down_proj"}


def fused_place(name: str, shapes: dict[str, tuple[int, ...]]) -> tuple[str, int, int] | None:
    """(fused name, expert, row offset in the fused tensor's dimension 1) of a per-expert HF name; None for
    any other name. `shapes` holds the per-expert shapes (the gate's rows give up's offset)."""
    m = PER_EXPERT.match(name)
    if m is None:
        return None
    prefix, expert, proj = m["prefix"], int(m["expert"]), m["proj"]
    offset = shapes[f"{prefix}.{expert}.gate_proj.weight"][0] if proj == "up_proj" else 0
    return f"{prefix}.{FUSED[proj]}", expert, offset


def fuse_block(block: Block, expert: int, offset: int) -> Block:
    """A block of one expert's projection as a block of the fused tensor."""
    (r0, r1), *rest = block
    return ((expert, expert + 1), (r0 + offset, r1 + offset), *rest)


def fuse_tensors(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A checkpoint's tensors with every layer's per-expert projections stacked into the fused tensors."""
    import torch

    shapes = {n: tuple(x.shape) for n, x in tensors.items()}
    parts: dict[str, dict[int, list[tuple[int, torch.Tensor]]]] = {}
    out = {}
    for name, x in tensors.items():
        place = fused_place(name, shapes)
        if place is None:
            out[name] = x
            continue
        fused, expert, offset = place
        parts.setdefault(fused, {}).setdefault(expert, []).append((offset, x))
    for fused, experts in parts.items():
        if sorted(experts) != list(range(len(experts))):
            raise ValueError(f"{fused}: the checkpoint's experts are not 0..{len(experts) - 1}")
        out[fused] = torch.stack([torch.cat([x for _, x in sorted(experts[e], key=lambda p: p[0])])
                                  for e in range(len(experts))])
    return out


def expert_parts(name: str, shape: tuple[int, ...]) -> list[tuple[str, int, int, int]]:
    """(checkpoint name, expert, first row, row stop) of each one-expert projection a fused expert tensor holds,
    rows along its dimension 1; [] for any other tensor."""
    prefix, _, last = name.rpartition(".")
    if not prefix.endswith(".mlp.experts") or last not in ("gate_up_proj", "down_proj"):
        return []
    if last == "down_proj":
        return [(f"{prefix}.{e}.down_proj.weight", e, 0, shape[1]) for e in range(shape[0])]
    inter = shape[1] // 2
    return [(f"{prefix}.{e}.{proj}.weight", e, i * inter, (i + 1) * inter)
            for e in range(shape[0]) for i, proj in enumerate(("gate_proj", "up_proj"))]


def split_shapes(shapes: dict[str, tuple[int, ...]]) -> dict[str, tuple[int, ...]]:
    """The checkpoint names and shapes of the one-expert projections of the fused expert tensors in `shapes`."""
    return {hf: (stop - start, *shape[2:]) for name, shape in shapes.items()
            for hf, _, start, stop in expert_parts(name, shape)}


def split_tensors(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The inverse of `fuse_tensors`: fused expert tensors written one expert and projection at a time."""
    out = {}
    for name, x in tensors.items():
        parts = expert_parts(name, tuple(x.shape))
        if not parts:
            out[name] = x
        for hf, e, start, stop in parts:
            out[hf] = x[e, start:stop].contiguous()
    return out


def fuse_shards(shards: dict[str, dict[Block, torch.Tensor]], shapes: dict[str, tuple[int, ...]],
                ) -> dict[str, dict[Block, torch.Tensor]]:
    """Per-expert blocks (an engine's shards under checkpoint names) as blocks of the fused tensors: the
    blocks of consecutive experts that cover the same rows and columns are stacked into one, and then gate and
    up blocks that meet (whole projections, no expert TP) are joined into one."""
    import torch

    out: dict[str, dict[Block, torch.Tensor]] = {}
    runs: dict[tuple[str, Block], dict[int, torch.Tensor]] = {}
    for name, blocks in shards.items():
        place = fused_place(name, shapes)
        if place is None:
            out[name] = blocks
            continue
        fused, expert, offset = place
        for block, x in blocks.items():
            runs.setdefault((fused, fuse_block(block, expert, offset)[1:]), {})[expert] = x
    for (fused, rest), by_expert in runs.items():
        experts = sorted(by_expert)
        start = 0
        for i in range(1, len(experts) + 1):
            if i == len(experts) or experts[i] != experts[i - 1] + 1:
                run = experts[start:i]
                out.setdefault(fused, {})[((run[0], run[-1] + 1), *rest)] = torch.stack([by_expert[e] for e in run])
                start = i
    return {name: _join_rows(blocks) if name in {f for f, _ in runs} else blocks for name, blocks in out.items()}


def _join_rows(blocks: dict[Block, torch.Tensor]) -> dict[Block, torch.Tensor]:
    """Blocks of a fused tensor with the rows of one following the other's (same experts and columns) as one."""
    import torch

    out: dict[Block, torch.Tensor] = {}
    for block, x in sorted(blocks.items(), key=lambda item: (item[0][0], item[0][2:], item[0][1])):
        last = next(reversed(out), None)
        if last is not None and last[0] == block[0] and last[2:] == block[2:] and last[1][1] == block[1][0]:
            joined = torch.cat([out.pop(last), x], dim=1)
            out[(last[0], (last[1][0], block[1][1]), *block[2:])] = joined
        else:
            out[block] = x
    return out
