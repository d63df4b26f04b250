"""Vectorised shard sizes of a whole inventory: the planner asks them for thousands of layouts.

`TensorTable` holds one numpy row per tensor of the inventory (MTP layers and a tied head excluded, as in
`Placement`) and computes, for a layout, the bytes every pipeline stage or rollout rank holds with the
same rules as `TensorSpec.shard_bytes` (tests compare the two tensor by tensor).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from twin.catalog.inventory import Inventory
from twin.cost_models.placement import TRAIN_VOCAB_MULTIPLE, VLLM_VOCAB_MULTIPLE
from twin.layout.models import RolloutLayout, TrainLayout

# the recipes' per-parameter path (cann-recipes-train verl_patches per_tensor_generator): the name and the tensor
# spec, one all_gather_object each; a parameter of the PP all-to-all path gathers its name only
RECIPE_OBJECT_COLLECTIVES_PER_PARAM = 2


@dataclass(frozen=True)
class StageBytes:
    """Per pipeline stage: bf16 weight bytes, non-expert and expert parameter counts of one device."""

    weight_bytes: np.ndarray
    dense_numel: np.ndarray
    expert_numel: np.ndarray
    has_head: np.ndarray  # bool per stage
    layers: np.ndarray


class TensorTable:
    """Columns: numel, dtype bytes, tp size of the split dim, units, chunks, style, expert count, layer."""

    def __init__(self, inv: Inventory) -> None:
        ts = [t for t in inv.tensors if not t.mtp and not (inv.tied_head and t.group == "head")]
        self.inv = inv
        self.numel = np.array([t.numel for t in ts], dtype=np.int64)
        self.dtype_bytes = np.array([t.dtype_bytes for t in ts], dtype=np.int64)
        self.split = np.array([t.shard.tp_dim is not None for t in ts])
        self.dim = np.array([t.shape[t.shard.tp_dim] if t.shard.tp_dim is not None else 1 for t in ts],
                            dtype=np.int64)
        self.units = np.array([t.shard.tp_units for t in ts], dtype=np.int64)
        self.chunks = np.array([t.shard.tp_chunks for t in ts], dtype=np.int64)
        self.vocab = np.array([t.shard.tp_style == "vocab" for t in ts])
        self.expert = np.array([t.shard.ep_dim is not None for t in ts])
        self.experts = np.array([t.num_experts for t in ts], dtype=np.int64)
        self.layer = np.array([t.layer if t.layer is not None else -1 for t in ts], dtype=np.int64)
        self.embedding = np.array([t.group == "embedding" for t in ts])
        self.head = np.array([t.group == "head" for t in ts])
        self.shared_expert = np.array([t.group == "shared_expert" for t in ts])
        self.matrix = np.array([len(t.shape) >= 2 for t in ts])
        self.rows = np.array([t.shape[0] for t in ts], dtype=np.int64)  # FSDP2 shards dimension 0
        # k, v and up projections live inside q's linear_qkv and gate's linear_fc1 in Megatron
        self.fused_in_megatron = np.array([t.shard.ep_dim is None and t.name.rsplit(".", 2)[-2]
                                           in ("k_proj", "v_proj", "up_proj") for t in ts])
        in_layer = self.layer >= 0
        # parameters of each decoder layer (an FSDP unit: twin.cost_models.training fsdp_unit_numel)
        self.layer_numel = np.bincount(self.layer[in_layer], weights=self.numel[in_layer])
        per_layer = np.bincount(self.layer[in_layer], weights=(self.numel * self.dtype_bytes)[in_layer])
        self.largest_layer_bytes = int(per_layer.max()) if per_layer.size else 0
        per_expert = (self.numel // self.experts * self.dtype_bytes)[self.expert]
        self.largest_expert_bytes = int(per_expert.max()) if per_expert.size else 0  # one expert's projection
        self._stage_memo: dict[tuple, StageBytes] = {}
        self._rollout_memo: dict[tuple[int, int, bool], tuple[int, int, int]] = {}
        self._stage_of_memo: dict[tuple, np.ndarray] = {}
        self._export_memo: dict[tuple, float] = {}
        self._walked_memo: dict[tuple, np.ndarray] = {}

    def _split_numel(self, tp: int, vocab_multiple: int, mask: np.ndarray) -> np.ndarray:
        """Elements per rank of the tensors in `mask` under `tp`-way TP (padding included for vocab)."""
        numel = self.numel.astype(np.float64)
        out = numel.copy()
        split = self.split & mask
        per_row = numel / self.dim
        chunk = self.dim // self.chunks
        unit = chunk // self.units
        if tp > 1:
            regular = split & ~self.vocab
            per_rank_units = np.where(self.units % tp == 0, self.units // tp, 1)
            out = np.where(regular, per_row * unit * per_rank_units * self.chunks, out)
        if tp > 1 or vocab_multiple > 1:
            vocab = split & self.vocab
            padded = -(-chunk // vocab_multiple) * vocab_multiple
            out = np.where(vocab, per_row * (padded // tp) * self.chunks, out)
        return out

    def train_stage_bytes(self, lay: TrainLayout, devices: int) -> StageBytes:
        """Weight bytes and parameter counts per pipeline stage of one training device (read-only arrays,
        computed once per parallel structure: the planner asks again for every memory knob)."""
        num_layers = self.inv.config.num_layers
        key = (lay.engine, devices) if lay.engine == "fsdp" else (
            lay.engine, lay.tp, lay.expert_tp, lay.expert_partition, lay.pp, tuple(lay.stage_layers(num_layers)))
        hit = self._stage_memo.get(key)
        if hit is None:
            hit = self._stage_memo[key] = self._train_stage_bytes(lay, devices)
            for column in (hit.weight_bytes, hit.dense_numel, hit.expert_numel, hit.has_head, hit.layers):
                column.setflags(write=False)
        return hit

    def _train_stage_bytes(self, lay: TrainLayout, devices: int) -> StageBytes:
        num_layers = self.inv.config.num_layers
        if lay.engine == "fsdp":
            rows = np.ceil(self.rows / devices)
            numel = rows * (self.numel / self.rows)
            stage = np.zeros(len(self.numel), dtype=np.int64)
            n_stages = 1
            layers = np.array([num_layers])
        else:
            numel = self._split_numel(lay.tp, TRAIN_VOCAB_MULTIPLE, ~self.expert)
            experts = self._split_numel(lay.expert_tp, 1, self.expert) / lay.expert_partition
            numel = np.where(self.expert, experts, numel)
            stage = self.stage_of(lay)
            n_stages = lay.pp
            layers = np.array(lay.stage_layers(num_layers))
        nbytes = numel * self.dtype_bytes
        weight = np.bincount(stage, weights=nbytes, minlength=n_stages)
        dense = np.bincount(stage, weights=np.where(self.expert, 0, numel), minlength=n_stages)
        expert = np.bincount(stage, weights=np.where(self.expert, numel, 0), minlength=n_stages)
        has_head = np.bincount(stage, weights=self.head, minlength=n_stages) > 0
        if self.inv.tied_head and lay.engine == "megatron" and lay.pp > 1:
            emb = self.embedding
            copy_numel = float(numel[emb].sum())
            weight[-1] += copy_numel * float(self.dtype_bytes[emb][0])
            dense[-1] += copy_numel
            has_head[-1] = True
        elif self.inv.tied_head:
            has_head[:] = has_head | (np.arange(n_stages) == n_stages - 1)
        return StageBytes(weight.astype(np.int64), dense, expert, has_head, layers)

    @cached_property
    def expert_mapping(self) -> int:
        """Entries of vLLM's expert mapping: three per expert (gate, up, down: FusedMoE.make_expert_params_mapping);
        none for a dense model."""
        return 3 * int(self.experts.max()) if self.expert.any() else 0

    @cached_property
    def entries_per_row(self) -> np.ndarray:
        """Checkpoint entries of every row: a routed-expert row one per expert and projection, as checkpoints name
        them (fused gate_up: two per expert), any other row one."""
        return np.where(self.expert, self.experts * self.chunks, 1)

    @cached_property
    def scanned_per_entry(self) -> np.ndarray:
        """Expert-mapping entries vLLM matches one checkpoint entry of every row against: an expert's entry halfway
        through the mapping on average, any other entry after all of it (benchmarks/vllm_load_weights_cpu.py)."""
        return np.where(self.expert, self.expert_mapping // 2, self.expert_mapping)

    @cached_property
    def rollout_load_work(self) -> tuple[int, int]:
        """(checkpoint entries, expert-mapping entries scanned) when a rollout engine's load_weights takes the whole
        model once, as a weight sync hands it over."""
        return int(self.entries_per_row.sum()), int((self.entries_per_row * self.scanned_per_entry).sum())

    def megatron_parameters(self, grouped_experts: bool) -> np.ndarray:
        """How many Megatron parameters every tensor is: none for a projection fused into another (q/k/v into
        linear_qkv, gate/up into linear_fc1), one otherwise, and for the routed experts two per layer in a grouped
        MLP (MindSpeed's grouped matmul, which its tp-extend-ep implies) or one per expert of each of the two
        (megatron-core's TEGroupedMLP and SequentialMLP: linear_fc1.weight<i>, linear_fc2.weight<i>)."""
        per_expert = 1 if grouped_experts else self.experts
        return np.where(self.fused_in_megatron, 0, np.where(self.expert, per_expert, 1))

    def walked_parameters(self, lay: TrainLayout) -> np.ndarray:
        """Per row, the Megatron parameters one rank's verl export walks (mbridge's export_weights): every stage's
        (their names are gathered over the PP group), of the routed experts only this rank's expert partition
        (grouped experts: the layer's two tensors), none for a projection fused into another. Read-only, once per
        expert layout."""
        key = (lay.grouped_experts, 1 if lay.grouped_experts else lay.expert_partition)
        hit = self._walked_memo.get(key)
        if hit is None:
            params = self.megatron_parameters(lay.grouped_experts).astype(np.float64)
            hit = params if lay.grouped_experts else np.where(self.expert, params / lay.expert_partition, params)
            hit.setflags(write=False)
            self._walked_memo[key] = hit
        return hit

    def recipe_object_collectives(self, lay: TrainLayout) -> float:
        """Object collectives over the PP group of the recipes' directed export (twin.cost_models.export), once per
        pipeline split and expert layout."""
        key = (lay.pp, tuple(lay.stage_layers(self.inv.config.num_layers)), lay.grouped_experts)
        hit = self._export_memo.get(key)
        if hit is None:
            params = self.megatron_parameters(lay.grouped_experts)
            batched = np.where(self.first_layers_of_stage(lay) & ~self.expert, params, 0)
            rounds = np.bincount(self.stage_of(lay), weights=batched, minlength=lay.pp)
            hit = float((params.sum() - rounds.sum()) * RECIPE_OBJECT_COLLECTIVES_PER_PARAM + rounds.max())
            self._export_memo[key] = hit
        return hit

    def first_layers_of_stage(self, lay: TrainLayout) -> np.ndarray:
        """Per tensor: whether it belongs to one of its stage's first min(stage layers) decoder layers."""
        sizes = lay.stage_layers(self.inv.config.num_layers)
        starts = np.concatenate(([0], np.cumsum(sizes)[:-1]))
        stage = _layer_stages(lay, self.inv.config.num_layers)
        layer = np.clip(self.layer, 0, None)
        return (self.layer >= 0) & (layer - starts[stage[layer]] < min(sizes))

    def stage_of(self, lay: TrainLayout) -> np.ndarray:
        """Pipeline stage of every tensor (embedding first, final norm and head last); read-only, once per split."""
        num_layers = self.inv.config.num_layers
        key = ("fsdp",) if lay.engine == "fsdp" else (lay.engine, lay.pp, tuple(lay.stage_layers(num_layers)))
        hit = self._stage_of_memo.get(key)
        if hit is None:
            if lay.engine == "fsdp":
                hit = np.zeros(len(self.numel), dtype=np.int64)
            else:
                layer_stage = _layer_stages(lay, num_layers)
                hit = np.where(self.layer >= 0, layer_stage[np.clip(self.layer, 0, num_layers - 1)],
                               np.where(self.embedding, 0, lay.pp - 1))
            hit.setflags(write=False)
            self._stage_of_memo[key] = hit
        return hit

    def forward_flops(self) -> tuple[np.ndarray, np.ndarray]:
        """(non-expert, routed-expert) forward FLOPs per token of every tensor (2 per weight used)."""
        moe = self.inv.config.moe
        used = self.matrix & ~self.embedding
        dense = np.where(used & ~self.expert, 2.0 * self.numel, 0.0)
        k = moe.experts_per_token if moe else 0
        expert = np.where(used & self.expert, 2.0 * self.numel / self.experts * k, 0.0)
        return dense, expert

    def _rollout_shard_bytes(self, lay: RolloutLayout) -> np.ndarray:
        split = ~self.expert & ~self.shared_expert if lay.shared_experts_whole else ~self.expert
        dense = self._split_numel(lay.tp, VLLM_VOCAB_MULTIPLE, split)
        experts = self.numel / lay.ep if lay.ep > 1 else self._split_numel(lay.tp, 1, self.expert)
        return np.where(self.expert, experts, dense) * self.dtype_bytes

    def _rollout_sums(self, lay: RolloutLayout) -> tuple[int, int, int]:
        """(non-expert, non-expert less the embedding, routed-expert) bytes of one rollout rank, once per TP/EP."""
        key = (lay.tp, lay.ep, lay.shared_experts_whole)
        hit = self._rollout_memo.get(key)
        if hit is None:
            nbytes = self._rollout_shard_bytes(lay)
            hit = self._rollout_memo[key] = (int(nbytes[~self.expert].sum()),
                                             int(nbytes[~self.expert & ~self.embedding].sum()),
                                             int(nbytes[self.expert].sum()))
        return hit

    def rollout_bytes(self, lay: RolloutLayout) -> tuple[int, int]:
        """(non-expert, routed-expert) weight bytes of one rollout rank."""
        dense, _, expert = self._rollout_sums(lay)
        return dense, expert

    def rollout_read_bytes(self, lay: RolloutLayout) -> tuple[int, int]:
        """(non-expert, routed-expert) bytes a decode step reads: the embedding is looked up, not read."""
        _, read, expert = self._rollout_sums(lay)
        return read, expert


def _layer_stages(lay: TrainLayout, num_layers: int) -> np.ndarray:
    out = np.empty(num_layers, dtype=np.int64)
    first = 0
    for s, count in enumerate(lay.stage_layers(num_layers)):
        out[first:first + count] = s
        first += count
    return out


_TABLES: dict[int, tuple[Inventory, TensorTable]] = {}


def tensor_table(inv: Inventory) -> TensorTable:
    """The table of `inv`, built once per inventory object."""
    hit = _TABLES.get(id(inv))
    if hit is None or hit[0] is not inv:
        hit = _TABLES[id(inv)] = (inv, TensorTable(inv))
    return hit[1]
