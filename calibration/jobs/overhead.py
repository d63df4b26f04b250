"""Framework time per call: real verl worker-group calls through Ray on this host, and verl's rollout poll.

verl drives every stage of a step as calls of a `RayWorkerGroup`: the driver dispatches the call to each
worker (Ray), each worker enters the registered method, and the driver collects the results. This job
builds worker groups of the CPU target's workers (the executor's verl platform for CPU hosts) and times:

- `worker_call`: a registered no-op (Dispatch.ONE_TO_ALL) on groups of 1 .. world workers: the fixed
  cost of one stage call and its growth per worker;
- `worker_call_data`: a Dispatch.DP_COMPUTE_PROTO call whose DataProto carries `payload_mb` of float32
  tensors, split among the workers and sent back as a tiny result: the cost per GB of inputs through Ray;
- `rollout_poll`: the interval at which verl's synchronous replay buffer polls for finished generation,
  read from verl's code (ReplayBuffer's `poll_interval` default), not timed: the record's note says so.

Optimizer-step setup and per-micro-batch overheads are measured by the `train` job on the same host.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Iterator
from typing import Any

from calibration.jobs.base import Failure, Job, Outcome, Point, RunContext, first_line

SMALL = {"payload_mb": [1, 16]}
FULL = {"payload_mb": [1, 16, 128]}
RAY_CPUS = 16  # logical CPUs for Ray, as the CPU target gives it (executor/cpu/launch.py)


def poll_interval() -> tuple[float, str]:
    """verl's replay-buffer poll interval (seconds) and where it was read."""
    from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer

    value = inspect.signature(ReplayBuffer.__init__).parameters["poll_interval"].default
    where = f"{inspect.getsourcefile(ReplayBuffer)}: ReplayBuffer(poll_interval={value}) default"
    return float(value), where


def _worker_class() -> type:
    """A verl Worker with a no-op and a data-parallel echo, registered the way verl's workers are."""
    from verl import DataProto
    from verl.single_controller.base import Worker
    from verl.single_controller.base.decorator import Dispatch, register

    class OverheadWorker(Worker):
        @register(dispatch_mode=Dispatch.ONE_TO_ALL)
        def noop(self) -> None:
            return None

        @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
        def consume(self, data: DataProto) -> DataProto:
            import torch

            return DataProto.from_dict({"done": torch.ones(len(data), 1)})

    return OverheadWorker


class OverheadJob(Job):
    name = "overhead"

    def points(self, ctx: RunContext) -> list[Point]:
        grid = SMALL if ctx.grid == "small" else FULL
        calls = [Point(self.name, "worker_call", {"workers": w}) for w in range(1, ctx.world + 1)]
        data = [Point(self.name, "worker_call_data", {"workers": ctx.world, "payload_mb": mb})
                for mb in grid["payload_mb"]]
        return [*calls, *data, Point(self.name, "rollout_poll", {"source": "verl code"})]

    def run(self, ctx: RunContext, points: list[Point]) -> Iterator[Outcome]:
        if ctx.device.kind != "cpu":
            for p in points:
                yield Failure(p, "the overhead job runs verl's CPU target; run it with --device cpu")
            return
        import ray

        started = not ray.is_initialized()
        if started:
            env = self._environment()
            os.environ.update(env)
            import executor.cpu.verl_plugin  # noqa: F401  (registers the CPU platform in this process)

            # the trainer ranks are logical Ray GPUs; every group size keeps its own workers
            ray.init(num_cpus=RAY_CPUS, num_gpus=ctx.world * (ctx.world + 1) // 2, include_dashboard=False,
                     logging_level="ERROR", runtime_env={"env_vars": env})
        groups: dict[int, Any] = {}
        try:
            for point in points:
                try:
                    yield self._measure(ctx, point, groups)
                except (RuntimeError, ValueError) as exc:
                    yield Failure(point, first_line(exc))
        finally:
            groups.clear()
            if started:
                ray.shutdown()

    @staticmethod
    def _environment() -> dict[str, str]:
        from executor.cpu.names import PLATFORM_NAME, PLUGIN_MODULE

        here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        path = os.pathsep.join(p for p in (here, os.environ.get("PYTHONPATH", "")) if p)
        return {"VERL_PLATFORM": PLATFORM_NAME, "VERL_USE_EXTERNAL_MODULES": PLUGIN_MODULE, "PYTHONPATH": path,
                "OMP_NUM_THREADS": "1"}

    def _group(self, groups: dict[int, Any], workers: int) -> Any:
        if workers not in groups:
            import ray
            from verl.single_controller.ray import RayClassWithInitArgs, RayResourcePool, RayWorkerGroup

            pool = RayResourcePool([workers], use_gpu=True, max_colocate_count=1)
            groups[workers] = RayWorkerGroup(pool, RayClassWithInitArgs(cls=ray.remote(_worker_class())))
        return groups[workers]

    def _measure(self, ctx: RunContext, point: Point, groups: dict[int, Any]) -> Outcome:
        if point.op == "rollout_poll":
            value, where = poll_interval()
            return ctx.record(point, [value] * ctx.repeats, note=f"read from verl's code, not timed: {where}")
        workers = int(point.params["workers"])
        group = self._group(groups, workers)
        if point.op == "worker_call":
            return ctx.record(point, ctx.time(group.noop), rates={"calls": 1.0},
                              note=f"verl RayWorkerGroup ONE_TO_ALL no-op on {workers} workers")
        import torch
        from verl import DataProto

        nbytes = int(point.params["payload_mb"]) * 2**20
        rows = max(workers, nbytes // (4 * 1024))
        data = DataProto.from_dict({"x": torch.zeros(rows, 1024)})
        return ctx.record(point, ctx.time(lambda: group.consume(data)), nbytes=rows * 1024 * 4,
                          note=f"verl RayWorkerGroup DP_COMPUTE_PROTO call, inputs split among {workers} workers")


JOB = OverheadJob()
