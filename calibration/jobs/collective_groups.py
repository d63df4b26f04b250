"""Which ranks form each group of a partition, and the uneven all_to_all splits (shared by the job and its workers)."""

from __future__ import annotations

from calibration.measurements import GroupInfo


def blocks(group: GroupInfo) -> list[list[int]]:
    """Every group of the partition, as lists of global ranks."""
    world, size = group.world_size, group.group_size
    if group.layout == "contiguous":
        return [list(range(i * size, (i + 1) * size)) for i in range(world // size)]
    stride = world // size
    return [list(range(i, world, stride)) for i in range(stride)]


def uneven_splits(rank: int, n: int, unit: int) -> list[int]:
    """Elements rank `rank` sends to (and, by symmetry, receives from) each rank of its group."""
    return [unit * (1 + (rank + j) % n) for j in range(n)]
