"""Framework time per call: real verl worker-group calls through Ray on this host, and verl's rollout poll.

verl drives every stage of a step as calls of a `RayWorkerGroup`: the driver dispatches the call to each
worker (Ray), each worker enters the registered method, and the driver collects the results. This job
builds worker groups of the CPU target's workers (the executor's verl platform for CPU hosts) and times:

- `worker_call`: a registered no-op (Dispatch.ONE_TO_ALL) on groups of 1 .. world workers: the fixed
  cost of one stage call and its growth per worker;
- `worker_call_data`: a Dispatch.DP_COMPUTE_PROTO call whose DataProto carries `payload_mb` of float32
  tensors, split among the workers and sent back as a tiny result: the cost per GB of inputs through Ray;
- `rollout_poll`: the interval at which verl's synchronous replay buffer polls for finished generation,
  read from verl's code (ReplayBuffer's `poll_interval` default), not timed: the record's note says so;
- `agent_loop`: a batch of prompts (GRPO groups of `GROUP`) through verl's V1 rollout path with an engine that
  answers at once (calibration/jobs/verl_driver.py): the time per response of the agent loop, the routed server
  call, the reward loop and the TransferQueue writes, on `agent_workers` agent-loop workers; the host's CPU
  seconds busy per call (`host_cpu_s`; per second of the call, the cores the path keeps busy); and when the last
  request reached the engine, from the call's start (`handed_s`; per second of the call, the share of the path's
  time spent before its last hand-over: the engine computes beside the path until then);
- `old_log_prob_bypass`, `advantage`: verl's trainer stage methods on that batch in TransferQueue (bypass mode
  copies the rollout's log-probs; GRPO's advantage reads five fields, pads, computes and writes two back);
- `update_actor`: verl's update_actor on its FSDP2 actor worker group over the trainer ranks, one mini-batch
  of the whole batch in micro-batches of `micro_per_rank` sequences per rank.

Each of the last four is timed at two or more batch sizes, so that the fit separates what a call costs from
what each response adds. The matrix multiplies and the optimizer's loop are the `train` job's.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

from calibration.jobs.base import Failure, Job, Outcome, Point, RunContext, first_line
from calibration.timing import host_busy_s

# three batch sizes, the largest past the CPU loop's 512 responses, so that each stage's call-and-slope line is read
# between measured points: with 96 and 384 alone the slope rested on one point, whose median moved with the host
# (old_log_prob at 384: 44.7 and 48.5 ms in two sessions of 2026-12-05, against 61 ms at 512 and 85 at 768 in one)
SMALL = {"payload_mb": [1, 16], "responses": [96, 384, 768], "agent_workers": [1]}
FULL = {"payload_mb": [1, 16, 128], "responses": [96, 384, 768], "agent_workers": [1, 2]}
RAY_CPUS = 16  # logical CPUs for Ray, as the CPU target gives it (executor/cpu/launch.py)
GROUP = 4  # responses per prompt: the CPU loop's GRPO group (scenarios/cpu-tiny-grpo.yaml n)
STAGES = ("old_log_prob_bypass", "advantage", "update_actor")
# timed calls of the two driver stages at least: tens of milliseconds each, so a shared host's noise needs more
# than the few repeats the seconds-long points take
DRIVER_STAGE_REPEATS = 10


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
        return [*calls, *data, Point(self.name, "rollout_poll", {"source": "verl code"}), *self._verl_points(ctx)]

    def _verl_points(self, ctx: RunContext) -> list[Point]:
        """Per batch size (ascending, so the first warm-up pays verl's start-up): the rollout path on each
        agent-worker count, then the trainer's stages on the batch it left in TransferQueue."""
        grid = SMALL if ctx.grid == "small" else FULL
        micro = min(grid["responses"]) // ctx.world
        out = []
        for r in grid["responses"]:
            out += [Point(self.name, "agent_loop", {"agent_workers": w, "responses": r}) for w in grid["agent_workers"]]
            out += [Point(self.name, op, {"responses": r}) for op in STAGES[:2]]
            out.append(Point(self.name, "update_actor",
                             {"workers": ctx.world, "responses": r, "micro_per_rank": micro}))
        return out

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

            # the trainer ranks are logical Ray GPUs; every group size keeps its own workers, and verl's actor
            # worker group its own `world`
            ray.init(num_cpus=RAY_CPUS, num_gpus=ctx.world * (ctx.world + 3) // 2, include_dashboard=False,
                     logging_level="ERROR", runtime_env={"env_vars": env})
        groups: dict[Any, Any] = {}  # worker-call groups by size, verl's driver by name
        try:
            for point in points:
                try:
                    yield self._measure(ctx, point, groups)
                except (RuntimeError, ValueError, ray.exceptions.RayError) as exc:  # a verl worker fails as RayError
                    yield Failure(point, first_line(exc))
        finally:
            for driver in [g for k, g in groups.items() if isinstance(k, str)]:
                driver.close()
            groups.clear()
            if started:
                ray.shutdown()

    @staticmethod
    def _environment() -> dict[str, str]:
        from executor.cpu.names import PLATFORM_NAME, PLUGIN_MODULE

        here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        path = os.pathsep.join(p for p in (here, os.environ.get("PYTHONPATH", "")) if p)
        return {"VERL_PLATFORM": PLATFORM_NAME, "VERL_USE_EXTERNAL_MODULES": PLUGIN_MODULE, "PYTHONPATH": path,
                "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false", "TRANSFER_QUEUE_ENABLE": "1"}

    def _group(self, groups: dict[Any, Any], workers: int) -> Any:
        if workers not in groups:
            import ray
            from verl.single_controller.ray import RayClassWithInitArgs, RayResourcePool, RayWorkerGroup

            pool = RayResourcePool([workers], use_gpu=True, max_colocate_count=1)
            groups[workers] = RayWorkerGroup(pool, RayClassWithInitArgs(cls=ray.remote(_worker_class())))
        return groups[workers]

    def _driver(self, ctx: RunContext, groups: dict[Any, Any], workers: int) -> Any:
        """verl's rollout path and trainer stages on `workers` agent-loop workers (one per worker count)."""
        key = f"verl agent_workers={workers}"
        if key not in groups:
            from calibration.jobs.verl_driver import VerlDriver

            for other in [k for k in groups if isinstance(k, str)]:  # one TransferQueue per Ray session
                groups.pop(other).close()
            grid = SMALL if ctx.grid == "small" else FULL
            groups[key] = VerlDriver(ctx.world, max(grid["responses"]) // GROUP, GROUP,
                                     min(grid["responses"]) // ctx.world, workers)
        return groups[key]

    def _measure_verl(self, ctx: RunContext, point: Point, groups: dict[Any, Any]) -> Outcome:
        """A verl point; the warm-up calls (seconds each) only where the path is cold: the first point of its op
        on its driver (start-up of the agent-loop, reward and FSDP2 workers)."""
        responses = int(point.params["responses"])
        if point.op == "agent_loop":
            workers = int(point.params["agent_workers"])
            driver = self._driver(ctx, groups, workers)
            ctx = self._warmed(ctx, driver, point.op)
            calls: list[tuple[float, float]] = []  # each call's host CPU seconds and its last hand-over

            def rollout() -> None:
                start = host_busy_s()
                driver.rollout(responses // GROUP)
                calls.append((host_busy_s() - start, driver.handed_s))

            samples = ctx.time(rollout, before=driver.clear)
            prompt, response = driver.mean_lengths()
            timed = calls[-len(samples):]  # not the warm-up calls
            cpu, last = (sum(column) / len(timed) for column in zip(*timed, strict=True))
            rates = {**self._rates(responses, prompt, response), "host_cpu_s": cpu, "handed_s": last}
            return ctx.record(point, samples, rates=rates,
                              note=f"verl's AgentLoopManagerTQ on {workers} agent-loop worker(s), reward loop, "
                                   f"TransferQueue; engine answering at once; {prompt:.1f} prompt + {response:.1f} "
                                   f"response tokens per sample; the host busy {cpu:.2f} CPU s a call; the last "
                                   f"request handed over {last:.2f} s into a call")
        driver = next((g for k, g in groups.items() if isinstance(k, str)), None)
        if driver is None or len(driver.samples) != responses:
            raise RuntimeError(f"no batch of {responses} responses in TransferQueue (its agent_loop point failed)")
        stage = {"old_log_prob_bypass": "old_log_prob", "advantage": "advantage", "update_actor": "update"}[point.op]
        # the update is timed on pages the guest holds (the twin charges the run's returned pages apart,
        # twin.cost_models.host_pages): an untimed update right before every size's repeats, not only the first, since
        # after the rollout point's seconds the host has taken back what the last update freed (CI runs CCC and DDD,
        # 2026-12-05: the first repeat after it 0.16-0.26 s slower than the third)
        ctx = replace(ctx, warmup=max(ctx.warmup, 1)) if stage == "update" else self._warmed(ctx, driver, point.op)
        samples = ctx.time(lambda: driver.stage(stage), min_repeats=0 if stage == "update" else DRIVER_STAGE_REPEATS)
        prompt, response = driver.mean_lengths()
        return ctx.record(point, samples, rates=self._rates(responses, prompt, response),
                          note=f"verl PPOTrainer stage `{stage}` on {responses} responses of {prompt:.1f} + "
                               f"{response:.1f} tokens in TransferQueue")

    @staticmethod
    def _warmed(ctx: RunContext, driver: Any, op: str) -> RunContext:
        """`ctx` without warm-up calls when `op` already ran on `driver`."""
        warm = op in driver.warm
        driver.warm.add(op)
        return replace(ctx, warmup=0) if warm else ctx

    @staticmethod
    def _rates(responses: int, prompt: float, response: float) -> dict[str, float]:
        """Responses and their prompt and response tokens per call (the record's derived figures per second)."""
        return {"responses": responses, "prompt_tokens": responses * prompt, "response_tokens": responses * response}

    def _measure(self, ctx: RunContext, point: Point, groups: dict[Any, Any]) -> Outcome:
        if point.op in ("agent_loop", *STAGES):
            return self._measure_verl(ctx, point, groups)
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
