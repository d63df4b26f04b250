"""The agent-loop workers' rollout timings: the wrapped agent-loop functions record the step's dispatch and each
prompt group's end, the spans read them back per step; the wrapped vLLM generate records each request's span, read
back as the engine's occupancy of a window; the worker hook wraps verl's and vLLM's real modules."""

from __future__ import annotations

import asyncio
import json

import pytest
import torch

from executor.npu_opt.worker_hook_env import ROLLOUT_TIMINGS_ENV
from executor.rollout_timing import (
    engine_occupancy,
    rollout_spans,
    step_number,
    timed_dispatch,
    timed_group_end,
    timed_request,
    timing_rows,
)


def _rows(directory):
    (path,) = directory.iterdir()
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_dispatch_and_each_group_end_are_recorded_with_the_step_even_when_a_group_fails(tmp_path, monkeypatch):
    monkeypatch.setenv(ROLLOUT_TIMINGS_ENV, str(tmp_path / "timings"))

    async def get_trajectory_info(step, index, validate):
        return [{"step": step, "sample_index": i} for i in index]

    async def settle(tasks):
        await asyncio.sleep(0.01)
        if tasks == "bad":
            raise RuntimeError("a session failed")
        return []

    dispatch, group_end = timed_dispatch(get_trajectory_info), timed_group_end(settle)
    info = asyncio.run(dispatch(torch.tensor([3, 3]), [7, 8], False))
    assert [i["sample_index"] for i in info] == [7, 8]  # the wrapped call's result, unchanged
    asyncio.run(group_end("ok"))
    with pytest.raises(RuntimeError, match="a session failed"):
        asyncio.run(group_end("bad"))
    rows = _rows(tmp_path / "timings")
    assert [(r["event"], r["step"], r["validate"]) for r in rows] == [("dispatch", 3, False), ("group_end", 3, False),
                                                                      ("group_end", 3, False)]
    assert rows[0]["prompts"] == 2 and rows[0]["time"] <= rows[1]["time"] - 0.01 <= rows[2]["time"] - 0.02


def test_a_step_is_read_from_a_number_a_tensor_or_a_wrapper_of_either():
    class NonTensorData:
        def __init__(self, data):
            self.data = data

    assert [step_number(s) for s in (4, torch.tensor(4), torch.tensor([4, 4, 4]), NonTensorData(4),
                                     NonTensorData(torch.tensor([4])))] == [4] * 5


def test_spans_take_the_first_dispatch_and_last_group_end_of_each_training_step_over_every_worker(tmp_path):
    rows = {"w1.jsonl": [{"event": "dispatch", "step": 1, "validate": False, "time": 10.0},
                         {"event": "group_end", "step": 1, "validate": False, "time": 12.5},
                         {"event": "dispatch", "step": 0, "validate": True, "time": 1.0},
                         {"event": "group_end", "step": 0, "validate": True, "time": 2.0},
                         {"event": "dispatch", "step": 2, "validate": False, "time": 20.0},
                         {"event": "group_end", "step": 2, "validate": False, "time": 21.0}],
            "w2.jsonl": [{"event": "dispatch", "step": 1, "validate": False, "time": 9.5},
                         {"event": "request", "start": 9.6, "time": 10.0},  # the server's rows: not a group's end
                         {"event": "group_end", "step": 1, "validate": False, "time": 11.0},
                         {"event": "dispatch", "step": 2, "validate": False, "time": 20.5},
                         {"event": "group_end", "step": 2, "validate": False, "time": 23.0}]}
    for name, lines in rows.items():
        (tmp_path / name).write_text("".join(json.dumps(r) + "\n" for r in lines))
    assert rollout_spans(timing_rows(tmp_path)) == {1: (9.5, 12.5, 2), 2: (20.0, 23.0, 2)}


def test_the_worker_hook_wraps_verls_agent_loop_functions_where_the_run_asks(tmp_path, run_probe):
    probe = ("import json, verl.trainer.ppo.v1.agent_loop_tq as m; "
             "print('PROBE ' + json.dumps([f.__code__.co_filename.endswith('rollout_timing.py') "
             "for f in (m.get_trajectory_info, m._settle_session_tasks)]))")
    hook = {"VERL_USE_EXTERNAL_MODULES": "executor.npu_opt.worker_hook", "EXECUTOR_NPU_PATCHES": ""}
    assert run_probe(probe, {**hook, ROLLOUT_TIMINGS_ENV: str(tmp_path)}) == [True, True]
    assert run_probe(probe, {**hook, ROLLOUT_TIMINGS_ENV: ""}) == [False, False]  # an empty variable asks nothing


def test_a_request_is_recorded_from_its_hand_over_to_its_last_output_even_when_its_reader_stops_early(
        tmp_path, monkeypatch):
    monkeypatch.setenv(ROLLOUT_TIMINGS_ENV, str(tmp_path / "timings"))

    async def generate(prompt):
        for token in range(3):
            await asyncio.sleep(0.01)
            yield f"{prompt}{token}"

    request = timed_request(generate)

    async def read_all():
        return [out async for out in request("a")]

    async def read_one():
        outputs = request("b")
        first = await outputs.__anext__()
        await outputs.aclose()
        return first

    assert asyncio.run(read_all()) == ["a0", "a1", "a2"]  # the wrapped generator's outputs, unchanged
    assert asyncio.run(read_one()) == "b0"
    whole, cut = _rows(tmp_path / "timings")
    assert whole["event"] == cut["event"] == "request"
    assert whole["time"] - whole["start"] >= 0.03 and 0.01 <= cut["time"] - cut["start"] < 0.03


def test_the_engines_occupancy_of_a_window_counts_the_requests_it_held_clipped_to_the_window(tmp_path):
    rows = [{"event": "request", "start": 0.0, "time": 2.0}, {"event": "request", "start": 1.0, "time": 3.0},
            {"event": "request", "start": 5.0, "time": 6.0}, {"event": "request", "start": -1.0, "time": 0.5},
            {"event": "request", "start": 10.0, "time": 11.0},  # after the window
            {"event": "dispatch", "step": 1, "validate": False, "time": 0.0}]
    (tmp_path / "server.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    e = engine_occupancy(timing_rows(tmp_path), 0.0, 10.0)
    # four requests overlap [0, 10]; vLLM held one or more in [0, 3] and [5, 6]: 4 s of 10; their spans in the
    # window sum to 2 + 2 + 1 + 0.5 = 5.5 s: 0.55 on average; the last reached vLLM 5 s into the window
    assert (e.requests, e.duty, e.in_flight, e.last_hand_over_s) == (4, 0.4, 0.55, 5.0)


def test_the_worker_hook_wraps_vllms_generate_where_the_run_asks(tmp_path, run_probe):
    probe = ("import json, verl, vllm.v1.engine.async_llm as m; "
             "print('PROBE ' + json.dumps([m.AsyncLLM.generate.__code__.co_filename.endswith('rollout_timing.py')]))")
    hook = {"VERL_USE_EXTERNAL_MODULES": "executor.npu_opt.worker_hook", "EXECUTOR_NPU_PATCHES": ""}
    assert run_probe(probe, {**hook, ROLLOUT_TIMINGS_ENV: str(tmp_path)}) == [True]
    assert run_probe(probe, {**hook, ROLLOUT_TIMINGS_ENV: ""}) == [False]
