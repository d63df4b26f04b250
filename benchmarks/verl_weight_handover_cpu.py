"""Host time of verl's colocated weight hand-over (trainer rank -> its vLLM worker), on this machine's CPU.

Run: python benchmarks/verl_weight_handover_cpu.py [--tensors 25,250] [--numel 10000] [--repeats 7]
verl 0.9.1's colocated sync hands a trainer rank's weights to the vLLM worker on the same device through
`BucketedWeightSender` / `BucketedWeightReceiver` (workers/rollout/vllm_rollout/bucketed_weight_transfer.py): a ZMQ
REQ/REP pair over an IPC socket and one bucket buffer (CUDA/NPU IPC, or shared memory where IPC is missing, as on
CPU), every tensor copied into the bucket and described in the bucket's metadata, one acknowledged message a bucket.
This script runs verl's two classes between two processes with `--tensors` small float32 tensors of `--numel`
elements (so the time is the hand-over's host work, not the copy), in verl's order: the sender binds, then the
receiver connects (verl issues the vLLM workers' receive as an RPC that reaches them after the bind). It prints the
median seconds of one hand-over per tensor count and the fixed and per-tensor cost fitted through them.

It also times the other order once per repeat (the receiver connecting before the sender binds): ZMQ then retries
the connection after its reconnect interval (ZMQ_RECONNECT_IVL, 100 ms by default), which a sync whose RPC reaches
the workers before the trainer binds pays on top.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import statistics
import sys
import time
from pathlib import Path

from calibration.jobs.weight_handover import transfer_module

ROOT = Path(__file__).resolve().parents[1]
HANDLE = f"ipc:///tmp/verl-handover-bench-{os.getpid()}.sock"
RECEIVER_DELAY_S = 0.002  # after the sender's start: the RPC's way to the workers, so that the bind comes first


def _environment() -> None:
    """verl's CPU platform (the executor's plugin), one thread a process, as the CPU loop runs."""
    from executor.cpu.names import PLATFORM_NAME, PLUGIN_MODULE

    os.environ.update({"VERL_PLATFORM": PLATFORM_NAME, "VERL_USE_EXTERNAL_MODULES": PLUGIN_MODULE,
                       "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)})


def _receive(handle: str, rounds: list[int], ready: object, go: object, done: object, first: bool) -> None:
    """The vLLM worker's side: one receive per round, after the go signal (or before the sender binds)."""
    import torch

    torch.set_num_threads(1)
    transfer = transfer_module()
    ready.set()
    for expected in rounds:
        go.wait()
        go.clear()
        if not first:
            time.sleep(RECEIVER_DELAY_S)
        received = [0]

        def count(weights: list, _last: bool, received: list[int] = received) -> None:
            received[0] += len(weights)

        transfer.BucketedWeightReceiver(handle, torch.device("cpu"), use_shm=True).receive_weights(count)
        done.put(received[0] == expected)


def _time_rounds(counts: list[int], numel: int, repeats: int, receiver_first: bool) -> dict[int, list[float]]:
    import torch

    transfer = transfer_module()
    rounds = [n for n in counts for _ in range(repeats)]
    ctx = multiprocessing.get_context("spawn")
    ready, go, done = ctx.Event(), ctx.Event(), ctx.Queue()
    proc = ctx.Process(target=_receive, args=(HANDLE, rounds, ready, go, done, receiver_first))
    proc.start()
    out: dict[int, list[float]] = {n: [] for n in counts}
    try:
        if not ready.wait(timeout=120):
            raise RuntimeError("the receiver process did not start")
        for n in rounds:
            weights = [(f"layer.{i}.weight", torch.randn(numel)) for i in range(n)]
            sender = transfer.BucketedWeightSender(HANDLE, bucket_size_mb=2048, use_shm=True)  # verl's default
            if receiver_first:
                go.set()
                time.sleep(0.005)  # the receiver is connecting to a socket nobody has bound yet
            start = time.perf_counter()
            if not receiver_first:
                go.set()
            asyncio.run(sender.async_send_weights(iter(weights)))
            out[n].append(time.perf_counter() - start)
            if not done.get(timeout=60):
                raise RuntimeError("the receiver did not get every tensor")
    finally:
        proc.join(timeout=30)
        if proc.is_alive():
            proc.kill()
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tensors", default="25,250", help="tensor counts per hand-over, comma-separated")
    parser.add_argument("--numel", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    counts = sorted({int(x) for x in args.tensors.split(",")})
    if len(counts) < 2 or counts[0] < 1:
        sys.exit("--tensors: give two or more positive counts")
    sys.path.insert(0, str(ROOT))
    _environment()
    medians = {n: statistics.median(t) for n, t in _time_rounds(counts, args.numel, args.repeats, False).items()}
    for n, s in medians.items():
        print(f"{n:>6} tensors of {args.numel * 4 / 1e3:.0f} kB: {s * 1e3:8.2f} ms a hand-over (median of "
              f"{args.repeats}; the receiver started {RECEIVER_DELAY_S * 1e3:.0f} ms after the sender)")
    lo, hi = counts[0], counts[-1]
    per_tensor = (medians[hi] - medians[lo]) / (hi - lo)
    fixed = medians[lo] - per_tensor * lo
    print(f"fixed {fixed * 1e3:.2f} ms a hand-over (ZMQ sockets, the shared-memory bucket, cleanup), "
          f"{per_tensor * 1e6:.1f} us a tensor (bucket copy and metadata, the receiver's view)")
    late = _time_rounds([lo], args.numel, max(1, args.repeats // 2), True)[lo]
    print(f"receiver connecting before the sender binds: {statistics.median(late) * 1e3:.1f} ms a hand-over of {lo} "
          "tensors (ZMQ's reconnect interval)")


if __name__ == "__main__":
    main()
