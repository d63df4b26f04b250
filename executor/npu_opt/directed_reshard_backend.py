"""verl checkpoint-engine backend `directed`: verl's colocated weight sync, fed by the directed reshard.

Imported in every verl process that reads `rollout.checkpoint_engine.custom_backend_module`
(workers/engine_workers.py ActorRolloutRefWorker.init_model; checkpoint_engine/base.py
CheckpointEngineManager.__init__). verl 0.9.1 loads the rollout in place from the trainer's weights only
for the backend named "naive" (base.py CheckpointEngineManager.update_weights, engine_workers.py
ActorRolloutRefWorker.update_weights); any other name takes its disaggregated path. So three pieces keep
verl's colocated sequence and change only where the weights come from:

- `DirectedCheckpointEngine`, registered under BACKEND with `CheckpointEngineRegistry.register`:
  `send_weights(shards)` runs the directed all-to-all-v from this rank's training shards, and
  `receive_weights()` yields this rank's rollout tensors;
- `DirectedCheckpointManager`, selected with `rollout.checkpoint_manager_class` (trainer/ppo/ray_trainer.py
  loads it with load_class_from_fqn): asks the trainer workers for the colocated sync with mode=BACKEND;
  verl 0.9.1's V1 trainer (trainer/ppo/v1/trainer_base.py, the default) ignores that class and forces its
  manager's backend to "naive", so its workers receive mode "naive";
- `colocated_update_weights`, the patch of ActorRolloutRefWorker.update_weights that
  executor.npu_opt.directed_reshard installs in the workers: for mode BACKEND, or "naive" in workers
  configured with BACKEND (the V1 trainer), it runs verl's own naive sequence with the engine's per-tensor
  export replaced by the directed reshard's output.

What it can feed, and what it refuses with a clear error at the first sync:
- training shards: FSDP2 engines (DTensor Shard(0) on dimension 0, the twin's FSDP placement) and Megatron
  engines built with mbridge (`vanilla_mbridge`): each local parameter's HF blocks are traced through the
  engine's own bridge (executor/reshard/megatron_blocks.py; dense models: mbridge names routed experts one
  by one, the plan's inventory fuses them, so an expert parameter is refused by name);
- rollout: verl's rollout adapters load named whole tensors, and vLLM's expert-parallel loader takes whole
  experts by global id and skips the ones another rank owns; a TP-split block of a dense tensor travels
  under a name carrying its block, and the block-aware patch of verl's vLLM worker extension
  (executor/reshard/vllm_blocks.py, installed by executor.npu_opt.directed_reshard) writes it into the
  rank's module. TP-split experts (rollout TP > 1 without EP) are refused.
Only the CPU parts (engine, shard source, the reshard over gloo) are exercised here; the colocated sync on
NPU is untested.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import ray
from verl.checkpoint_engine.base import CheckpointEngineManager, CheckpointEngineRegistry, ColocatedCheckpointEngine
from verl.utils.ray_utils import auto_await

from executor.errors import ExecutorError
from executor.npu_opt.directed_reshard_transfer import RolloutShards, Shards, run_transfer
from executor.npu_opt.worker_hook_env import SYNC_TIMINGS_ENV, append_line
from executor.reshard.schedule import Schedule, build_schedule
from twin.catalog.inventory import Block, TensorSpec
from twin.catalog.registry import load_model
from twin.cost_models.placement import Placement
from twin.layout.models import Layout
from twin.optimizations import executor_refusals

if TYPE_CHECKING:
    import torch

BACKEND = "directed"
logger = logging.getLogger(__name__)


@CheckpointEngineRegistry.register(BACKEND)
class DirectedCheckpointEngine(ColocatedCheckpointEngine):
    """Colocated engine whose weights are this rank's rollout shards, moved by the directed reshard.

    `model`, `layout` (a twin Layout as JSON) and `devices` come from
    `rollout.checkpoint_engine.engine_kwargs.directed`, which the executor sets from the plan.
    """

    def __init__(self, bucket_size: int, is_master: bool = False, model: str = "", layout: str = "",
                 devices: int = 0) -> None:
        super().__init__(bucket_size, is_master)
        if not (model and layout and devices):
            raise ExecutorError(f"checkpoint engine {BACKEND!r} needs engine_kwargs.{BACKEND}.model, layout and "
                                "devices (executor run sets them from the plan)")
        lay = Layout.model_validate_json(layout)
        inv = load_model(model)
        refusals = executor_refusals("directed_reshard", lay, inv.config)
        if refusals:  # `executor run` refuses such plans before launch; this guards hand-written configs
            raise ExecutorError(f"checkpoint engine {BACKEND!r}: " + "; ".join(refusals))
        self.placement = Placement(inv, lay.train, lay.rollout, int(devices))
        self._schedule: Schedule | None = None
        self.last_stats: dict[str, Any] = {}

    def send_weights(self, weights: Shards, global_steps: int | None = None) -> None:
        """Run the reshard (collective over the default process group) from this rank's training shards."""
        import torch.distributed as dist

        if self._schedule is None:
            self._schedule = build_schedule(self.placement, "directed")
        start = time.perf_counter()
        result = run_transfer(self.placement, "directed", dist.get_rank(), dist.get_world_size(), weights,
                              schedule=self._schedule)
        self.last_stats = {**result.stats.as_dict(), "transfer_s": time.perf_counter() - start}
        logger.info("directed reshard: rank %d sent %d B, received %d B in %d rounds", self.last_stats["rank"],
                    self.last_stats["sent_bytes"], self.last_stats["received_bytes"], self.last_stats["rounds"])
        self.weights = rollout_named_tensors(self.placement, result.rollout)


class DirectedCheckpointManager(CheckpointEngineManager):
    """The trainer's weight-sync driver: colocated sync through BACKEND, as verl does it for 'naive'."""

    @auto_await
    async def update_weights(self, global_steps: int | None = None) -> dict:
        ray.get(self.actor_wg.update_weights(global_steps=global_steps, mode=BACKEND))
        return {}


def colocated_update_weights(original: Callable) -> Callable:
    """Patch factory for ActorRolloutRefWorker.update_weights (keeps verl's dispatch attributes via wraps)."""

    @functools.wraps(original)
    async def update_weights(self: Any, global_steps: int | None = None, mode: str = "auto") -> Any:
        configured = self.config.rollout.checkpoint_engine.backend
        # verl 0.9.1's V1 trainer (trainer/ppo/v1/trainer_base.py, the default) builds its manager with backend
        # "naive" whatever the config says and ignores checkpoint_manager_class: its colocated "naive" call is
        # this backend's when the workers were configured with it
        effective = configured if mode == "auto" or (mode == "naive" and configured == BACKEND) else mode
        if effective != BACKEND:
            return await original(self, global_steps=global_steps, mode=mode)
        engine, ckpt = self.actor.engine, self.checkpoint_engine
        shards_s: list[float] = []

        def directed_export(**_: Any) -> tuple[Iterator[tuple[str, torch.Tensor]], None]:
            source = megatron_shards if hasattr(engine, "bridge") else fsdp_shards
            start = time.perf_counter()
            shards = source(engine, ckpt.placement)
            shards_s.append(time.perf_counter() - start)
            ckpt.send_weights(shards)
            return ckpt.receive_weights(), None

        engine.get_per_tensor_param = directed_export  # this call only: verl's naive sequence reads it once
        start = time.perf_counter()
        try:
            result = await original(self, global_steps=global_steps, mode="naive")
        finally:
            del engine.get_per_tensor_param
        record_sync({"step": global_steps, "worker_s": time.perf_counter() - start, "shards_s": sum(shards_s),
                     **ckpt.last_stats})
        return result

    return update_weights


def record_sync(timing: dict[str, Any]) -> None:
    """Append one weight sync's timings on this rank (the whole worker call, reading its training shards, the
    directed transfer, the bytes and rounds) as a JSON line to this process's file in the run's SYNC_TIMINGS_ENV
    directory, so that the run's sync can be compared part by part with the twin's; nothing where it is unset."""
    append_line(SYNC_TIMINGS_ENV, {"time": time.time(), **timing})


def fsdp_shards(engine: Any, pl: Placement) -> Shards:
    """This rank's training blocks from an FSDP2 engine: each parameter's local dimension-0 shard."""
    import torch
    import torch.distributed as dist
    from torch.distributed.tensor import DTensor
    from verl.utils.fsdp_utils import fsdp_version
    from verl.utils.model import convert_weight_keys

    module = getattr(engine, "module", None)
    if module is None or fsdp_version(module) != 2:
        raise ExecutorError(f"directed reshard: the trainer engine {type(engine).__name__} is neither FSDP2 nor "
                            "Megatron with mbridge; use backend naive")
    model = getattr(module, "_fsdp_wrapped_module", module)
    if hasattr(model, "peft_config"):
        raise ExecutorError("directed reshard: LoRA models are not supported, use backend naive")
    params = convert_weight_keys(module.state_dict(), model)
    rank, out = dist.get_rank(), {}
    device = _sync_device()
    for t in pl.tensors:
        if t.name not in params:
            raise ExecutorError(f"directed reshard: {t.name} of the plan's model is not in the trainer's state dict")
        p = params[t.name]
        local = p.to_local() if isinstance(p, DTensor) else p
        blocks = pl.train_blocks(t, rank)
        if blocks:
            out[t.name] = {blocks[0]: local.detach().to(device=device, dtype=getattr(torch, t.dtype)).contiguous()}
    return out


def megatron_shards(engine: Any, pl: Placement) -> Shards:
    """This rank's training blocks from verl's Megatron engine: every local parameter's HF blocks, traced through
    the engine's mbridge bridge (executor/reshard/megatron_blocks.py), in the plan's dtype; routed experts, which
    mbridge maps one by one (grouped-MLP experts, as MindSpeed's moe_tp_extend_ep builds them, are read whole, its
    TP x EP numbering when the plan says so), stacked into the blocks of the plan's fused expert tensors
    (executor/reshard/experts.py)."""
    import torch
    from verl.utils.megatron_utils import load_megatron_model_to_gpu, unwrap_model

    from executor.reshard.experts import fuse_shards, split_shapes
    from executor.reshard.megatron_blocks import (
        BlockTraceError,
        cut_hf_shards,
        grouped_expert_shards,
        grouped_expert_views,
        hf_sources,
        trace_hf_blocks,
    )

    if not getattr(engine, "vanilla_bridge", False):
        raise ExecutorError("directed reshard: the Megatron engine must use mbridge (vanilla_mbridge=True); "
                            "Megatron-Bridge's converters are not traced here, use backend naive")
    if getattr(engine, "peft_cls", None) is not None:
        raise ExecutorError("directed reshard: LoRA models are not supported, use backend naive")
    if getattr(engine, "_is_offload_param", False):
        load_megatron_model_to_gpu(engine.module, load_grad=False)  # as verl's own export does first
    shapes = {t.name: t.shape for t in pl.inv.tensors}
    shapes.update(split_shapes(shapes))
    device = _sync_device()
    out: Shards = {}
    for chunk in unwrap_model(engine.module):
        params = {n: p for n, p in chunk.state_dict(keep_vars=True).items() if "_extra_state" not in n}
        try:
            grouped = grouped_expert_views(engine.bridge, chunk, params, pl.train.moe_tp_extend_ep)
            params = {n: p for n, p in params.items() if n not in grouped}
            blocks = trace_hf_blocks(engine.bridge, params, hf_sources(engine.bridge, chunk), shapes)
        except BlockTraceError as exc:
            raise ExecutorError(f"directed reshard: {exc}") from None
        for name, found in {**cut_hf_shards(params, blocks), **grouped_expert_shards(grouped)}.items():
            out.setdefault(name, {}).update(found)
    out = fuse_shards(out, shapes)
    dtypes = {t.name: getattr(torch, t.dtype) for t in pl.tensors}
    return {n: {b: x.to(device=device, dtype=dtypes[n]).contiguous() for b, x in found.items()}
            for n, found in out.items() if n in dtypes}


def _sync_device() -> torch.device:
    """Where the reshard's buffers live: CPU over gloo or on verl's CPU platform, else this rank's device."""
    import torch
    import torch.distributed as dist
    from verl.utils.device import get_device_id, get_device_name

    name = get_device_name()
    if dist.get_backend() == "gloo" or name == "cpu":  # verl's CPU platform: backend "cpu:gloo", device id "cpu"
        return torch.device("cpu")
    return torch.device(name, get_device_id())


def rollout_named_tensors(pl: Placement, rollout: RolloutShards) -> Iterator[tuple[str, torch.Tensor]]:
    """(name, tensor) for verl's rollout adapters: whole tensors by name, experts one by one by global id, and a
    TP-split block under `block_name` (executor/reshard/vllm_blocks.py), which the block-aware patch of verl's
    vLLM worker extension writes into the rank's modules (vLLM's load_weights would cut it again)."""
    from executor.reshard.vllm_blocks import block_name

    for t in pl.tensors:
        whole = tuple((0, n) for n in t.shape)
        for block, x in rollout.get(t.name, []):
            experts = _experts(t, block, x) if t.shard.ep_dim == 0 else None
            if block == whole and t.shard.ep_dim is None:
                yield t.name, x
            elif experts is not None:
                yield from experts
            elif t.shard.ep_dim is None:
                yield block_name(t.name, block), x
            else:
                raise ExecutorError(f"directed reshard: a rank of rollout {pl.rollout.short()} needs block {block} of "
                                    f"{t.name}: TP-split experts are not loaded by block here, use rollout EP")
    if pl.inv.tied_head:  # a TP-split tied head is the embedding's module in vLLM: loaded with it
        head = next(t for t in pl.inv.tensors if t.group == "head")
        embedding = next(t for t in pl.tensors if t.group == "embedding")
        whole = tuple((0, n) for n in embedding.shape)
        yield from ((head.name, x) for b, x in rollout.get(embedding.name, []) if b == whole)


def _experts(t: TensorSpec, block: Block, x: torch.Tensor) -> Iterator[tuple[str, torch.Tensor]] | None:
    """The one-expert projections a block of a fused expert tensor holds, under their checkpoint names (as verl's
    unfuse_moe_params, by global id); None when the block cuts a projection (expert TP)."""
    from executor.reshard.experts import expert_parts

    (e0, e1), (r0, r1), *rest = block
    if list(rest) != [(0, n) for n in t.shape[2:]]:
        return None
    parts = [(hf, e, start, stop) for hf, e, start, stop in expert_parts(t.name, t.shape)
             if e0 <= e < e1 and r0 <= start and stop <= r1]
    if not parts or sum(stop - start for *_, start, stop in parts) != (e1 - e0) * (r1 - r0):
        return None
    return ((hf, x[e - e0, start - r0:stop - r0].contiguous()) for hf, e, start, stop in parts)
