"""Where every tensor block lives: in the training layout and in the rollout layout.

Training (Megatron/MindSpeed): a tensor lives on the pipeline stage of its layer (embedding on the first,
final norm and head on the last); TP-split tensors by TP rank, routed experts by expert partition and
expert-TP rank, replicated over DP/CP (experts over expert-DP). The vocabulary is not padded
(`TRAIN_VOCAB_MULTIPLE`): the TP size divides it (a layout rule). FSDP: every tensor split along dimension 0
over all ranks (FSDP2 Shard(0), torch.chunk sizes).
Rollout (vLLM): every rank holds every layer; TP splits as in training, the vocabulary padded to a
multiple of 64; with expert parallelism each EP rank holds whole experts, otherwise experts are TP-split;
shared experts are TP-split unless the engine keeps them whole (twin/layout/engine.py).
DeepSeek's MTP layer is neither trained nor loaded by the rollout here, and a tied head is stored once.
"""

from __future__ import annotations

from functools import cached_property

import numpy as np

from twin.catalog.inventory import Block, Inventory, TensorSpec
from twin.layout.models import RolloutLayout, TrainLayout
from twin.layout.ranks import RolloutCoord, TrainCoord, rollout_coord, train_coord

TRAIN_VOCAB_MULTIPLE = 1
"""The training engines pad the vocabulary to a multiple of this: 1, no padding. verl's FSDP engine trains the
HuggingFace model as it is. verl's Megatron engine builds the model with mbridge as
`AutoBridge.from_config(hf_config, dtype=...)` (verl 0.9.1 verl/workers/engine/megatron/transformer_impl.py:331,
the vanilla_mbridge path executor/cpu/launch.py selects), leaving make_vocab_size_divisible_by None, so mbridge
keeps padded_vocab_size = vocab_size (mbridge 0.15.1 mbridge/core/llm_bridge.py:180-187), not Megatron-LM's
128 x TP default. Megatron-core then splits the rows over TP and asserts that TP divides them (0.16.1
megatron/core/tensor_parallel/utils.py:118, VocabUtility; layers.py:842, the output layer): twin/layout/rules.py
rejects the other layouts."""
VLLM_VOCAB_MULTIPLE = 64  # vLLM's DEFAULT_VOCAB_PADDING_SIZE


class Placement:
    """Training and rollout placement of one model's tensors on `devices` devices."""

    def __init__(self, inv: Inventory, train: TrainLayout, rollout: RolloutLayout, devices: int) -> None:
        self.inv = inv
        self.train = train
        self.rollout = rollout
        self.devices = devices
        self.tensors: list[TensorSpec] = [
            t for t in inv.tensors if not t.mtp and not (inv.tied_head and t.group == "head")
        ]
        self.stage_size = devices // train.pp if train.engine == "megatron" else devices

    @cached_property
    def train_coords(self) -> list[TrainCoord]:
        return [train_coord(self.train, self.devices, r) for r in range(self.devices)]

    @cached_property
    def rollout_coords(self) -> list[RolloutCoord]:
        return [rollout_coord(self.rollout, r) for r in range(self.devices)]

    @cached_property
    def _layer_stage(self) -> dict[int, int]:
        out = {}
        layer = 0
        for stage, count in enumerate(self.train.stage_layers(self.inv.config.num_layers)):
            for _ in range(count):
                out[layer] = stage
                layer += 1
        return out

    def stage(self, t: TensorSpec) -> int:
        """Pipeline stage that holds `t` in training."""
        if self.train.engine == "fsdp":
            return 0
        if t.layer is not None:
            return self._layer_stage.get(t.layer, self.train.pp - 1)
        return 0 if t.group == "embedding" else self.train.pp - 1

    def device_stage(self, d: int) -> int:
        return d // self.stage_size

    def train_blocks(self, t: TensorSpec, d: int) -> list[Block]:
        """Blocks of `t` device `d` holds in the training layout (empty off its stage)."""
        lay = self.train
        if lay.engine == "fsdp":
            return _dim0_chunk(t, self.devices, d)
        if self.device_stage(d) != self.stage(t):
            return []
        c = self.train_coords[d]
        if t.shard.ep_dim is not None:
            return t.shard_blocks(tp=lay.expert_tp, tp_rank=c.etp, ep=lay.expert_partition, ep_rank=c.ep)
        return t.shard_blocks(tp=lay.tp, tp_rank=c.tp, vocab_multiple=TRAIN_VOCAB_MULTIPLE)

    def rollout_blocks(self, t: TensorSpec, d: int) -> list[Block]:
        """Blocks of `t` device `d` needs in the rollout layout."""
        lay = self.rollout
        c = self.rollout_coords[d]
        if t.shard.ep_dim is not None and lay.ep > 1:
            return t.shard_blocks(ep=lay.ep, ep_rank=c.ep)
        if lay.shared_experts_whole and t.group == "shared_expert":
            return t.shard_blocks()
        return t.shard_blocks(tp=lay.tp, tp_rank=c.tp, vocab_multiple=VLLM_VOCAB_MULTIPLE)

    def replica_key(self, t: TensorSpec, d: int) -> tuple[int, ...]:
        """What tells apart the training replicas of the block `d` would be served from."""
        c = self.train_coords[d]
        if self.train.engine == "fsdp":
            return ()
        if t.shard.ep_dim is not None:
            return (c.edp,)
        if t.shard.tp_dim is None:
            return (c.tp, c.cp, c.dp)
        return (c.cp, c.dp)

    @cached_property
    def replica_codes(self) -> dict[str, np.ndarray]:
        """Per device, an integer code of `replica_key` for each kind of tensor (vectorised lookups)."""
        c = self.train_coords
        tp = np.array([x.tp for x in c])
        cp = np.array([x.cp for x in c])
        dp = np.array([x.dp for x in c])
        edp = np.array([x.edp for x in c])
        if self.train.engine == "fsdp":
            zero = np.zeros(self.devices, dtype=np.int64)
            return {"expert": zero, "split": zero, "replicated": zero}
        return {"expert": edp, "split": cp + self.train.cp * dp,
                "replicated": tp + self.train.tp * (cp + self.train.cp * dp)}

    @staticmethod
    def code_kind(t: TensorSpec) -> str:
        if t.shard.ep_dim is not None:
            return "expert"
        return "replicated" if t.shard.tp_dim is None else "split"

    @cached_property
    def rollout_signature(self) -> dict[str, np.ndarray]:
        """Per device, what decides its rollout blocks: the EP rank for experts, else the TP rank."""
        c = self.rollout_coords
        return {"expert": np.array([x.ep if self.rollout.ep > 1 else x.tp for x in c]),
                "other": np.array([x.tp for x in c])}

    def pp_peer(self, d: int, stage: int) -> int:
        """The device at `d`'s position inside pipeline stage `stage`."""
        return stage * self.stage_size + d % self.stage_size


def _dim0_chunk(t: TensorSpec, world: int, rank: int) -> list[Block]:
    rows = t.shape[0]
    per = -(-rows // world)
    start, stop = min(rank * per, rows), min((rank + 1) * per, rows)
    if stop <= start:
        return []
    return [((start, stop), *((0, n) for n in t.shape[1:]))]
