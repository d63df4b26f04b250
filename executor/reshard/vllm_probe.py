"""What a vLLM rollout asks for, measured from vLLM: `python -m executor.reshard.vllm_probe DIR TP DTYPE OUT.json
[EXPERT_PARALLEL [DP [TIMEOUT_S]]]`.

vLLM loads the HuggingFace checkpoint in DIR directly (tensor parallel over TP local processes, on CPU, in
the checkpoint's DTYPE: vLLM's "auto" would not keep float32 on CPU; with EXPERT_PARALLEL 1, expert
parallelism (`enable_expert_parallel`) over the instance's ranks: its TP ranks, or with DP > 1 the TP ranks of
DP data-parallel engines, EP = DP x TP). Routed experts are compared as the twin's fused expert tensors,
stacked from the checkpoint's per-expert tensors (executor/reshard/experts.py).
Inside each of its workers, every module reports the HF tensor slices it holds, read from its own
partition attributes (executor/reshard/vllm_blocks.py), and compares its loaded local weight with those
slices of the checkpoint, tensor by tensor, bit for bit (in vLLM's dtype where it keeps another one: DeepSeek's
e_score_correction_bias is float32 in vLLM; listed under "casts"), and the weights vLLM derives after loading
(MLA's W_UK_T and W_UV, from kv_b_proj) with the same derivation of those slices. Then every such weight is
zeroed, the slices are written back through the block-aware patch of verl's weight update
(executor/reshard/vllm_blocks.py: how a TP > 1 rank takes the directed reshard's blocks), vLLM's
process_weights_after_loading runs as verl runs it after a sync, and everything is compared again. OUT.json: one
object per rank {"rank" (in the instance: data-parallel rank x TP + TP rank), "tp_rank", "blocks": {hf name:
[[start, stop], ...]}, "mismatched", "block_load_mismatched", "derived": {vllm name: {"from": its HF source,
"view_of_source": whether it shares the source's storage}}, "casts", "unknown"}. On the CPU MLA path W_UK_T and W_UV
are views of kv_b_proj's weight (split_kv_b_proj reshapes the unquantized weight without copying, and
replace_parameter registers those views), so writing kv_b_proj in place updates them with no post-processing.
Parameters executor/reshard/vllm_blocks.py does not read are listed under "unknown".
An MLA model loads with vLLM's reference CPU MLA backend (`MLA_BACKEND`).

vLLM imports this module in each worker as its worker extension (`ProbeExtension`) before it builds the
model: importing it installs the vllm_cpu_plain_linear and vllm_cpu_plain_moe patches (executor/cpu/vllm_compat.py),
so the workers' linear and expert weights stay readable after loading.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from pathlib import Path
from typing import Any

from executor.cpu.vllm_compat import MLA_BACKEND
from executor.reshard.blocks import as_bytes
from executor.reshard.engine_check import PROBE_TIMEOUT_S
from executor.reshard.experts import fuse_tensors
from executor.reshard.vllm_blocks import block_aware_update_weights, block_name, derived_weights, module_blocks

# the engine core in the probe's own process: one process less to start and import vLLM in (a probe generates
# nothing, so the core's own process buys nothing; about 15 s less per check on a 2-core host)
ENV = {"VLLM_TARGET_DEVICE": "cpu", "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind",
       "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}


def probe(model: Any, model_config: Any) -> dict[str, Any]:
    """Runs inside each vLLM worker (ProbeExtension.probe_blocks): the blocks its modules hold, whether they
    equal the checkpoint's slices (and the weights vLLM derives after loading, MLA's W_UK_T and W_UV, what
    `derived_weights` computes from those slices), and whether verl's weight update with the block-aware patch
    writes those slices back exactly after zeroing them and the derived weights (as the directed backend sends
    them: whole tensors by name, TP-split blocks named by `block_name`; then vLLM's process_weights_after_loading
    over the model, as verl's update_weights_from_ipc runs it after the last bucket)."""
    from types import SimpleNamespace

    import torch
    from safetensors.torch import load_file
    from vllm.distributed import get_tensor_model_parallel_rank
    from vllm.model_executor.model_loader.utils import process_weights_after_loading

    on_disk = load_file(str(Path(os.environ["EXECUTOR_PROBE_CKPT"]) / "model.safetensors"))
    ckpt = fuse_tensors(on_disk)
    shapes = {n: tuple(x.shape) for n, x in ckpt.items()}
    found, derived, unknown = _read(model, shapes)
    unknown += [hf for hf in found if hf not in ckpt]
    found = {hf: place for hf, place in found.items() if hf in ckpt}
    want = {hf: ckpt[hf][tuple(slice(a, b) for a, b in block)].contiguous() for hf, (block, _) in found.items()}
    mismatched = _mismatched(found, derived, want)
    with torch.no_grad():
        for local in [local for _, local in found.values()] + [param for param, _, _ in derived.values()]:
            local.zero_()
    worker = SimpleNamespace(model_runner=SimpleNamespace(model=model))
    sent = [(hf if hf in on_disk and list(want[hf].shape) == list(shapes[hf])  # vLLM's load_weights takes
             else block_name(hf, tuple(tuple(r) for r in block)), want[hf])  # checkpoint names, not fused experts
            for hf, (block, _) in found.items()]
    block_aware_update_weights(_vllm_load_weights)(worker, sent)
    process_weights_after_loading(model, model_config, torch.device("cpu"))
    return {"rank": get_tensor_model_parallel_rank(), "blocks": {hf: block for hf, (block, _) in found.items()},
            "mismatched": mismatched,
            "block_load_mismatched": _mismatched(found, derived, want),
            "derived": {name: {"from": source, "view_of_source": _shares(param, found.get(source))}
                        for name, (param, source, _) in derived.items()},
            "casts": sorted(f"{hf} {ckpt[hf].dtype}->{local.dtype}".replace("torch.", "")
                            for hf, (_, local) in found.items() if local.dtype != ckpt[hf].dtype),
            "unknown": unknown, "checkpoint_tensors": sorted(ckpt)}


def _read(model: Any, shapes: dict[str, tuple[int, ...]]) -> tuple[dict, dict, list[str]]:
    """(HF name -> (block, local view), vLLM name of a derived parameter -> (it, HF source, function), the
    parameters neither names: `vllm name.attribute (class)`)."""
    names = {id(m): n for n, m in model.named_modules()}
    found: dict[str, tuple[list[list[int]], Any]] = {}
    derived: dict[str, tuple[Any, str, Any]] = {}
    params = []
    for name, module in model.named_modules():
        own = dict(module.named_parameters(recurse=False))
        if not name or not own:
            continue
        found.update(module_blocks(name, module, shapes))
        made = derived_weights(module, names.get(id(getattr(module, "kv_b_proj", None))))
        derived.update({f"{name}.{attr}": (own[attr], source, fn) for attr, (source, fn) in made.items()})
        params += [(f"{name}.{attr} ({type(module).__name__})", p) for attr, p in own.items() if attr not in made]
    read = {local.untyped_storage().data_ptr() for _, local in found.values()}  # a parameter two modules share
    # (the router's correction bias, also the routed experts') is read once
    return found, derived, [label for label, p in params if p.untyped_storage().data_ptr() not in read]


def _vllm_load_weights(worker: Any, weights: list, **_kwargs: Any) -> None:
    """What verl's _update_weights does with whole tensors (its standard path): vLLM's own load_weights."""
    worker.model_runner.model.load_weights(weights)


def _mismatched(found: dict[str, tuple[list[list[int]], Any]], derived: dict[str, tuple[Any, str, Any]],
                want: dict[str, Any]) -> list[str]:
    """HF names whose local view differs, bit for bit, from the wanted slice (in the local dtype where vLLM keeps
    another one: the cast its loader applies), then derived parameters that differ from their function of the
    wanted slice of their source."""
    return ([hf for hf, (_, local) in found.items() if not _equal(local, want[hf])]
            + [f"{name} (from {source})" for name, (param, source, fn) in derived.items()
               if source not in want or not _equal(param, fn(want[source]))])


def _shares(param: Any, source: tuple[list[list[int]], Any] | None) -> bool:
    """Whether a derived parameter is a view of its source's storage (so an in-place sync of the source updates it)."""
    return source is not None and param.untyped_storage().data_ptr() == source[1].untyped_storage().data_ptr()


def _equal(local: Any, wanted: Any) -> bool:
    got = local.detach().to("cpu").contiguous()
    wanted = wanted.to(got.dtype).contiguous()
    return got.shape == wanted.shape and as_bytes(got).equal(as_bytes(wanted))


class ProbeExtension:
    """vLLM worker extension (`worker_extension_cls`): a method the driver calls on every worker."""

    def probe_blocks(self) -> dict[str, Any]:
        return probe(self.model_runner.model, self.model_runner.vllm_config.model_config)


def _install_patches() -> None:
    from executor.cpu.vllm_compat import PATCHES

    for patch in PATCHES:
        patch.apply_in_worker()


def main() -> None:
    ckpt_dir, tp, dtype, out = sys.argv[1], int(sys.argv[2]), sys.argv[3], Path(sys.argv[4])
    expert_parallel = len(sys.argv) > 5 and sys.argv[5] == "1"
    dp = int(sys.argv[6]) if len(sys.argv) > 6 else 1
    timeout_s = float(sys.argv[7]) if len(sys.argv) > 7 else PROBE_TIMEOUT_S
    os.environ.update({**ENV, "EXECUTOR_PROBE_CKPT": ckpt_dir})
    ranks = (_instance(ckpt_dir, tp, dtype, expert_parallel) if dp == 1
             else _data_parallel(ckpt_dir, tp, dtype, dp, timeout_s))
    out.write_text(json.dumps(sorted(ranks, key=lambda r: r["rank"])))


def _instance(ckpt_dir: str, tp: int, dtype: str, expert_parallel: bool, dp_rank: int = 0) -> list[dict[str, Any]]:
    """Load the checkpoint in one vLLM engine of `tp` workers and probe them; "rank" becomes the worker's place in
    the whole instance (data-parallel rank x TP + TP rank), "tp_rank" keeps its TP rank."""
    from vllm import LLM

    from twin.catalog.config import parse_config

    mla = parse_config(json.loads((Path(ckpt_dir) / "config.json").read_text()), ckpt_dir).attention == "mla"
    llm = LLM(model=ckpt_dir, tensor_parallel_size=tp, dtype=dtype, enforce_eager=True, skip_tokenizer_init=True,
              max_model_len=64, max_num_seqs=4, load_format="safetensors", distributed_executor_backend="mp",
              enable_expert_parallel=expert_parallel, attention_backend=MLA_BACKEND if mla else None,
              worker_extension_cls=f"{__name__ if __name__ != '__main__' else 'executor.reshard.vllm_probe'}."
                                   "ProbeExtension")
    ranks = [{**r, "tp_rank": r["rank"], "rank": dp_rank * tp + r["rank"]} for r in llm.collective_rpc("probe_blocks")]
    llm.llm_engine.engine_core.shutdown()  # stops the engine and its worker processes before this one exits
    return ranks


def _data_parallel(ckpt_dir: str, tp: int, dtype: str, dp: int, timeout_s: float) -> list[dict[str, Any]]:
    """One vLLM instance of `dp` data-parallel engines of `tp` workers with expert parallelism over all dp x tp of
    them: vLLM's offline data parallelism runs one process per engine, told its place by VLLM_DP_* variables
    (vllm/config/parallel.py, ParallelConfig.__post_init__; `LLM(data_parallel_size=...)` itself is refused,
    vllm/entrypoints/llm.py). An engine that dies without reporting fails the probe at once (its peer would wait
    for it in their data-parallel group); once all have reported, an engine still shutting down is stopped with
    everything it started (psutil)."""
    import multiprocessing
    import queue
    import socket
    import time

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    ctx = multiprocessing.get_context("spawn")
    results = ctx.Queue()
    procs = [ctx.Process(target=_engine, args=(ckpt_dir, tp, dtype, dp, r, port, results)) for r in range(dp)]
    for proc in procs:
        proc.start()
    ranks: list[dict[str, Any]] = []
    deadline, reported = time.monotonic() + timeout_s, 0
    try:
        while reported < dp:
            gone = [(r, p.exitcode) for r, p in enumerate(procs) if p.exitcode is not None]
            try:  # an engine that exited has flushed its report: read it before counting the engine as lost
                kind, body = results.get(timeout=2.0 if len(gone) > reported else 0.5)
            except queue.Empty:
                if len(gone) > reported:  # more engines gone than reports: one died without a word
                    raise RuntimeError(f"a data-parallel engine exited without reporting (engine, status: "
                                       f"{gone})") from None
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the data-parallel engines did not report within {timeout_s:g} s") from None
                continue
            if kind == "error":
                raise RuntimeError(body)
            ranks += body
            reported += 1
    finally:
        _stop_engines(procs)
    return ranks


def _stop_engines(procs: list[Any]) -> None:
    """Give each engine process a few seconds to end, then kill it and whatever it started."""
    import psutil

    for proc in procs:
        proc.join(timeout=10)
        if proc.is_alive():
            with contextlib.suppress(psutil.Error):
                tree = psutil.Process(proc.pid)
                for p in [*tree.children(recursive=True), tree]:
                    with contextlib.suppress(psutil.Error):
                        p.kill()
            proc.join()


def _engine(ckpt_dir: str, tp: int, dtype: str, dp: int, dp_rank: int, port: int, results: Any) -> None:
    os.environ.update({"VLLM_DP_SIZE": str(dp), "VLLM_DP_RANK": str(dp_rank), "VLLM_DP_RANK_LOCAL": str(dp_rank),
                       "VLLM_DP_MASTER_IP": "127.0.0.1", "VLLM_DP_MASTER_PORT": str(port)})
    try:
        results.put(("ok", _instance(ckpt_dir, tp, dtype, True, dp_rank)))
    except Exception as exc:  # the parent reports it
        results.put(("error", f"data-parallel engine {dp_rank}: {type(exc).__name__}: {exc}"))


_install_patches()  # in vLLM's workers, which import this module before building the model

if __name__ == "__main__":
    main()
