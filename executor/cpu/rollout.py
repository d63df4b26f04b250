"""verl-facing side of the transformers rollout: the replica that launches servers, and the adapter
through which a trainer rank syncs its weights into its replica's server.

Selected with actor_rollout_ref.rollout.name=transformers (hybrid engine, colocated sync training).
The adapter is what verl's naive checkpoint engine calls (`update_weights`, engine_workers.py): every
trainer rank walks the weight generator (FSDP gathers full tensors collectively), and the first rank
of each replica sends them to its server.
"""

from __future__ import annotations

import os
from collections.abc import Generator
from typing import Any

import ray
import torch
from verl.workers.rollout.base import BaseRollout
from verl.workers.rollout.replica import RolloutMode, RolloutReplica
from verl.workers.rollout.utils import ensure_async_iterator

from executor.cpu.names import SERVER_NAME_PREFIX
from executor.cpu.rollout_server import TransformersServer


def _rollout_world_size(config: Any) -> int:
    return config.tensor_model_parallel_size * config.data_parallel_size * config.pipeline_model_parallel_size


class TransformersReplica(RolloutReplica):
    """One rollout replica = one `TransformersServer` actor beside its trainer ranks."""

    async def launch_servers(self) -> None:
        if self.rollout_mode != RolloutMode.HYBRID:
            raise NotImplementedError(
                f"the transformers rollout runs colocated with the trainer (hybrid); got {self.rollout_mode}"
            )
        node_id = await self.workers[0].__ray_call__.remote(lambda worker: ray.get_runtime_context().get_node_id())
        name = f"{SERVER_NAME_PREFIX}{self.replica_rank}"
        server = (
            ray.remote(TransformersServer)
            .options(
                name=name,
                max_concurrency=self.max_concurrency,
                scheduling_strategy=ray.util.scheduling_strategies.NodeAffinitySchedulingStrategy(
                    node_id=node_id, soft=False
                ),
            )
            .remote(config=self.config, model_config=self.model_config, replica_rank=self.replica_rank)
        )
        await server.__ray_ready__.remote()
        self.servers = [server]
        self._server_handle = server
        self._server_address = name


class TransformersRolloutAdapter(BaseRollout):
    """Lives in each trainer rank (hybrid worker); forwards weights and wake/sleep to its server."""

    def __init__(self, config: Any, model_config: Any, device_mesh: Any, replica_rank: int = -1) -> None:
        super().__init__(config, model_config, device_mesh)
        rank = int(os.environ["RANK"])
        world = _rollout_world_size(self.config)
        self.replica_rank = rank // world if replica_rank == -1 else replica_rank
        self.is_sender = rank % world == 0
        self._server: ray.actor.ActorHandle | None = None

    @property
    def server(self) -> ray.actor.ActorHandle:
        if self._server is None:
            self._server = ray.get_actor(f"{SERVER_NAME_PREFIX}{self.replica_rank}")
        return self._server

    async def resume(self, tags: list[str]) -> None:
        if self.is_sender:
            await self.server.wake_up.remote(tags=tags)

    async def release(self) -> None:
        if self.is_sender:
            await self.server.sleep.remote()

    async def update_weights(
        self,
        weights: Generator[tuple[str, torch.Tensor], None, None],
        global_steps: int | None = None,
        wire_format: str = "named_tensors",
        peft_config: dict | None = None,
        **kwargs: Any,
    ) -> None:
        """Send full named tensors to the server (every rank iterates: the generator is collective)."""
        if wire_format != "named_tensors":
            raise NotImplementedError(f"the transformers rollout takes full named tensors, not {wire_format!r}")
        if peft_config is not None:
            raise NotImplementedError("LoRA adapters are not supported by the transformers rollout")
        named: dict[str, torch.Tensor] = {}
        async for name, tensor in ensure_async_iterator(weights):
            if self.is_sender:
                named[name] = tensor.detach().to("cpu").clone()
        if self.is_sender:
            await self.server.load_weights.remote(named)
            if global_steps is not None:
                await self.server.set_global_steps.remote(global_steps)
