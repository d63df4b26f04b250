"""The trainer's weight export as verl's weight sync walks it, one parameter at a time: the host work it takes
(shared by the colocated reshard, twin.cost_models.transition, and the disaggregated sync,
twin.cost_models.weight_sync) and the HuggingFace tensors it yields.

verl's Megatron exporter (mbridge 0.15 `Bridge.export_weights`, verl 0.9's Megatron weight sync) walks the names of
every pipeline stage's parameters (gathered over the PP group), this rank's routed experts only (an all-gather over
the EP group brings the other experts' copies); for every parameter it makes three object collectives over the PP
group (broadcast_str_from_megatron_pp: an all_gather_object and a broadcast_object_list; broadcast_from_megatron_pp:
an all_gather_object of the tensor's spec; mbridge/core/util.py), also on a one-rank group, and converts what it
gathered into HuggingFace tensors. The recipes' directed path (cann-recipes-train's per_tensor_generator) moves the
parameters of every stage's first min(stage layers) layers, routed experts excepted, in rounds all stages run at
once (calibration-cases.md C4), the rest one by one. FSDP's export makes no object collectives; the directed path
reads an FSDP2 trainer's shards from its state dict, tensor by tensor (executor/npu_opt/directed_reshard_backend.py
`fsdp_shards`), host work measured on the CPU host only (`fsdp_shard_read_us`; a profile without it leaves it out).
"""

from __future__ import annotations

from twin.cost_models.static import TensorTable
from twin.layout.models import TrainLayout
from twin.profile import Profile

# mbridge's export_weights (verl 0.9's Megatron weight sync) per parameter: broadcast_str_from_megatron_pp (an
# all_gather_object, then a broadcast_object_list) and broadcast_from_megatron_pp (an all_gather_object of the
# tensor's spec) over the PP group (mbridge/core/util.py)
VERL_OBJECT_COLLECTIVES_PER_PARAM = 3
# torch.distributed's all_gather_object and broadcast_object_list: two collectives each (the pickled sizes, then
# the padded payload), each read back on the host before the next can start (torch/distributed/distributed_c10d.py)
HOST_SYNCS_PER_OBJECT_COLLECTIVE = 2


def object_collectives(table: TensorTable, lay: TrainLayout, recipe_path: bool) -> float:
    """Object collectives over the PP group in one Megatron export (none for FSDP)."""
    if lay.engine != "megatron":
        return 0.0
    if not recipe_path:
        return float(table.walked_parameters(lay).sum()) * VERL_OBJECT_COLLECTIVES_PER_PARAM
    if lay.pp == 1:
        return 0.0  # one stage: the recipe generator's PP exchange is not read for PP 1, and none is counted
    return table.recipe_object_collectives(lay)


def object_collective_s(lay: TrainLayout, profile: Profile) -> float:
    """One object collective's host time: its two host-read collectives across the PP group's ranks, or over a
    one-rank group, where the collectives are local but each still copies to the device and reads back."""
    if lay.pp > 1:
        return HOST_SYNCS_PER_OBJECT_COLLECTIVE * profile["host_sync_collective_ms"] * 1e-3
    return profile["object_collective_local_us"] * 1e-6


def hf_tensor_count(table: TensorTable) -> int:
    """HuggingFace tensors the model's export yields: its checkpoint entries."""
    return int(table.entries_per_row.sum())


FSDP_SHARD_READ_TERM = "fsdp_shard_read_us"


def export_host_s(table: TensorTable, lay: TrainLayout, recipe_path: bool, profile: Profile) -> float:
    """Host time of one export: its object collectives, and under verl's Megatron exporter the conversion of every
    HuggingFace tensor it yields (the recipes' directed path moves Megatron's blocks without converting them); the
    directed path's read of an FSDP2 trainer's shards, a tensor at a time, where the profile measured it."""
    if lay.engine != "megatron":
        if not recipe_path or FSDP_SHARD_READ_TERM not in profile.params:
            return 0.0
        return len(table.numel) * profile[FSDP_SHARD_READ_TERM] * 1e-6
    objects = object_collectives(table, lay, recipe_path) * object_collective_s(lay, profile)
    convert = 0.0 if recipe_path else hf_tensor_count(table) * profile["export_tensor_host_us"] * 1e-6
    return objects + convert
