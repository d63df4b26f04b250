"""When each step's rollout was handed to verl's agent-loop workers and when each prompt group finished there.

verl's trainer sees generation end at its replay buffer's next poll (2 s in verl 0.9.1), so its `timing_s/gen` is
a whole number of polls; the twin predicts the time until the last response is back and adds the poll's wait. To
compare the two parts apart, the worker hook wraps two module-level functions of verl's V1 agent loop
(verl/trainer/ppo/v1/agent_loop_tq.py) in every process that imports it: `get_trajectory_info`, which each
worker's `generate_sequences` awaits once per step before it starts the step's prompt groups (its arguments carry
the step), and `_settle_session_tasks`, which each group awaits once all its `n` responses are done (their reward
and TransferQueue writes included), just before it publishes its terminal status. Each call appends a JSON line to
this process's file in the run's ROLLOUT_TIMINGS_ENV directory. Module functions rather than the worker's methods:
Ray's actor class carries its own copies of the methods into the worker processes, while the methods find these
functions in the module. In the rollout server's process it also wraps vLLM's `AsyncLLM.generate` (not an actor
class): each request's hand-over to vLLM and its last output, so that a run says how many requests the engine held
at once and for what share of the round it held any (what twin.cost_models.host_sharing predicts). Where the variable
is unset, nothing is wrapped.
"""

from __future__ import annotations

import functools
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from executor.npu_opt.post_import import when_imported
from executor.npu_opt.worker_hook_env import ROLLOUT_TIMINGS_ENV, append_line

AGENT_LOOP_MODULE = "verl.trainer.ppo.v1.agent_loop_tq"
VLLM_ENGINE_MODULE = "vllm.v1.engine.async_llm"
ROLLOUT_EVENTS = ("dispatch", "group_end")
_dispatched: dict[str, Any] = {"step": None, "validate": False}  # this process's last dispatched step


def install() -> None:
    """Time the rollouts this process runs once verl's V1 agent loop is imported; only where the run asks."""
    if os.environ.get(ROLLOUT_TIMINGS_ENV):
        when_imported(AGENT_LOOP_MODULE, wrap_agent_loop)
        when_imported(VLLM_ENGINE_MODULE, wrap_engine)


def wrap_agent_loop(module: ModuleType) -> None:
    module.get_trajectory_info = timed_dispatch(module.get_trajectory_info)
    module._settle_session_tasks = timed_group_end(module._settle_session_tasks)


def wrap_engine(module: ModuleType) -> None:
    module.AsyncLLM.generate = timed_request(module.AsyncLLM.generate)


def timed_request(generate: Callable[..., Any]) -> Callable[..., Any]:
    """vLLM's `AsyncLLM.generate` (an async generator of a request's outputs) that records, once the request's
    outputs end, when it was handed to vLLM and when its last output came."""

    @functools.wraps(generate)
    async def request(*args: Any, **kwargs: Any) -> Any:
        start = time.time()
        try:
            async for output in generate(*args, **kwargs):
                yield output
        finally:
            note_request(start)

    return request


def timed_dispatch(get_trajectory_info: Callable[..., Any]) -> Callable[..., Any]:
    """`get_trajectory_info(step, index, validate)` that first records the step's dispatch to this worker."""

    @functools.wraps(get_trajectory_info)
    async def dispatch(step: Any, index: Any, validate: Any) -> Any:
        note_dispatch(step_number(step), bool(validate), len(index))
        return await get_trajectory_info(step, index, validate)

    return dispatch


def timed_group_end(settle: Callable[..., Any]) -> Callable[..., Any]:
    """`_settle_session_tasks(tasks)` that records, once a prompt group's responses are done, the group's end."""

    @functools.wraps(settle)
    async def group_end(tasks: Any) -> Any:
        try:
            return await settle(tasks)
        finally:
            note_group_end()

    return group_end


# The wrappers keep no state of their own and call these: Ray may carry a wrapper into a worker by value (with copies
# of the globals it names) where a module function goes by reference, so the state lives in the worker's module.
def note_dispatch(step: int, validate: bool, prompts: int) -> None:
    """Record a step's dispatch to this worker and remember the step for its groups' ends."""
    _dispatched.update(step=step, validate=validate)
    append_line(ROLLOUT_TIMINGS_ENV, {"event": "dispatch", **_dispatched, "prompts": prompts, "time": time.time()})


def note_group_end() -> None:
    """Record the end of one prompt group of the step last dispatched to this worker."""
    append_line(ROLLOUT_TIMINGS_ENV, {"event": "group_end", **_dispatched, "time": time.time()})


def note_request(start: float) -> None:
    """Record one request's span in vLLM, from its hand-over (`start`) to now."""
    append_line(ROLLOUT_TIMINGS_ENV, {"event": "request", "start": start, "time": time.time()})


def step_number(step: Any) -> int:
    """The trainer step of a batch's `global_steps` entry: a number, a tensor of one step per sample, or a
    tensordict NonTensorData around either."""
    step = getattr(step, "data", step)
    if hasattr(step, "reshape"):
        step = step.reshape(-1)[0]
    return int(step)


def timing_rows(directory: Path) -> list[dict[str, Any]]:
    """Every record the run's processes wrote in `directory` (one file each), read once for the readers below."""
    return [json.loads(line) for path in sorted(directory.glob("*.jsonl")) for line in path.read_text().splitlines()]


def rollout_spans(rows: list[dict[str, Any]]) -> dict[int, tuple[float, float, int]]:
    """Per training step (validation left out): the first dispatch to a worker, the last prompt group's end and how
    many groups ended, over the records of every worker (`timing_rows`)."""
    starts: dict[int, float] = {}
    ends: dict[int, list[float]] = {}
    for row in rows:
        if row["event"] not in ROLLOUT_EVENTS or row["validate"]:
            continue
        if row["event"] == "dispatch":
            starts[row["step"]] = min(starts.get(row["step"], row["time"]), row["time"])
        else:
            ends.setdefault(row["step"], []).append(row["time"])
    return {step: (starts[step], max(ends[step]), len(ends[step])) for step in sorted(starts) if step in ends}


@dataclass(frozen=True)
class EngineOccupancy:
    """What vLLM held in one window: its requests, the share of the window it held at least one, how many it held on
    average (their summed spans over the window) and when the last of them reached it, from the window's start."""

    requests: int
    duty: float
    in_flight: float
    last_hand_over_s: float


def engine_occupancy(rows: list[dict[str, Any]], start: float, end: float) -> EngineOccupancy:
    """The requests' spans in vLLM (among the run's records, `timing_rows`) clipped to the window [start, end]."""
    spans = sorted((max(row["start"], start), min(row["time"], end)) for row in rows
                   if row["event"] == "request" and row["start"] < end and row["time"] > start)
    held, reach, covered = 0.0, start, 0.0
    for lo, hi in spans:
        held += hi - lo
        covered += max(0.0, hi - max(lo, reach))
        reach = max(reach, hi)
    window, last = end - start, max((lo for lo, _ in spans), default=start)
    return EngineOccupancy(len(spans), covered / window, held / window, last - start)
