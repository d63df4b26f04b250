"""Device rank <-> parallel coordinates, in Megatron's and in vLLM's default orders.

Megatron-core orders dense ranks 'tp-cp-ep-dp-pp' (TP fastest, PP slowest; the dense generator uses
EP = 1) and expert ranks 'tp-ep-dp-pp' with TP = expert TP and DP = expert DP, both inside one pipeline
stage. With MindSpeed's moe_tp_extend_ep the expert partition is TP x EP with no expert TP.
vLLM lays a world out as DP x PP x TP (TP fastest); with expert parallelism one instance's EP group is
its DP x TP ranks flattened.
"""

from __future__ import annotations

from typing import NamedTuple

from twin.layout.models import RolloutLayout, TrainLayout


class TrainCoord(NamedTuple):
    tp: int
    cp: int
    dp: int
    pp: int
    etp: int  # rank inside the expert-TP group
    ep: int  # index of the expert partition the rank holds
    edp: int  # expert data-parallel replica


class RolloutCoord(NamedTuple):
    tp: int
    dp: int  # global attention-DP rank
    instance: int  # vLLM engine instance
    ep: int  # rank in the instance's EP group (0 when EP is off)


def train_coord(lay: TrainLayout, devices: int, rank: int) -> TrainCoord:
    tp, cp = lay.tp, lay.cp
    dp = lay.dp(devices)
    tp_r = rank % tp
    cp_r = (rank // tp) % cp
    dp_r = (rank // (tp * cp)) % dp
    pp_r = rank // (tp * cp * dp)
    local = rank % (tp * cp * dp)
    etp, part = lay.expert_tp, lay.expert_partition
    return TrainCoord(tp=tp_r, cp=cp_r, dp=dp_r, pp=pp_r, etp=local % etp, ep=(local // etp) % part,
                      edp=local // (etp * part))


def train_rank(lay: TrainLayout, devices: int, tp: int, cp: int, dp: int, pp: int) -> int:
    return tp + lay.tp * (cp + lay.cp * (dp + lay.dp(devices) * pp))


def rollout_coord(lay: RolloutLayout, rank: int) -> RolloutCoord:
    size = lay.instance_size
    return RolloutCoord(tp=rank % lay.tp, dp=rank // lay.tp, instance=rank // size,
                        ep=rank % size if lay.ep > 1 else 0)


def train_group(lay: TrainLayout, devices: int, dim: str, rank: int = 0) -> list[int]:
    """The ranks of `rank`'s group along one dimension: tp, cp, dp, pp, ep (expert partition) or etp."""
    c = train_coord(lay, devices, rank)
    stage_size = devices // lay.pp
    base = c.pp * stage_size
    etp, part = lay.expert_tp, lay.expert_partition
    if dim == "ep":
        return [base + c.etp + etp * (j + part * c.edp) for j in range(part)]
    if dim == "etp":
        return [base + i + etp * (c.ep + part * c.edp) for i in range(etp)]
    size = {"tp": lay.tp, "cp": lay.cp, "dp": lay.dp(devices), "pp": lay.pp}[dim]
    coords = {"tp": c.tp, "cp": c.cp, "dp": c.dp, "pp": c.pp}
    return [train_rank(lay, devices, **{**coords, dim: i}) for i in range(size)]


def rollout_group(lay: RolloutLayout, dim: str, rank: int = 0) -> list[int]:
    """The ranks of `rank`'s rollout group: tp (its TP group) or ep (its engine instance)."""
    if dim == "tp":
        first = rank - rank % lay.tp
        return list(range(first, first + lay.tp))
    size = lay.instance_size
    first = rank - rank % size
    return list(range(first, first + size))
