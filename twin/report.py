"""Human-readable views of a prediction: stage times, memory per phase, reshard figures."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table

from twin.results import SimulationResult
from twin.scenario import CORE_ENGINE, RECIPE_ENGINE, Measured

if TYPE_CHECKING:
    from twin.cost_models.weight_sync import SyncTime
    from twin.disaggregated import SyncEvaluation


def _err(pred: float, meas: float | None) -> str:
    if meas is None or meas == 0:
        return ""
    return f"{(pred - meas) / meas * 100:+.1f} %"


def print_result(console: Console, r: SimulationResult, measured: Measured | None = None) -> None:
    """Stage table (with measured values and errors where the scenario has them), memory and reshard."""
    console.print(f"[bold]{r.scenario}[/]: {r.cards} cards = {r.devices} devices, {r.model_kind} model, "
                  f"profile {r.profile}")
    stages = Table(title="Step time")
    for col in ("stage", "predicted s", "measured s", "error"):
        stages.add_column(col, justify="left" if col == "stage" else "right")
    meas = measured.stages_s if measured else {}
    for name, sec in r.stages_s.items():
        m = meas.get(name)
        stages.add_row(name, f"{sec:.2f}", "" if m is None else f"{m:.2f}", _err(sec, m))
    mstep = measured.step_s if measured else None
    stages.add_row("[bold]step[/]", f"{r.step_s:.2f}", "" if mstep is None else f"{mstep:.2f}", _err(r.step_s, mstep))
    # a TPS counted at the step's longest lengths or over every generated round (measured.tps_tokens) is not this row's
    mtps = measured.tps_per_card if measured and measured.tps_tokens == "mean" else None
    stages.add_row("[bold]TPS / card[/]", f"{r.tps_per_card:.1f}", "" if mtps is None else f"{mtps:.1f}",
                   _err(r.tps_per_card, mtps))
    console.print(stages)
    mem = Table(title=f"Memory of the worst device, GB ({r.capacity_gb:g} GB usable of {r.hbm_gb:g} GB HBM)")
    cols = ("weights", "grads", "optimizer", "activations", "kv_cache", "reshard_buffer", "overhead")
    mem.add_column("phase")
    for c in (*cols, "total"):
        mem.add_column(c, justify="right")
    for phase, b in r.memory_gb.items():
        style = "bold red" if b.total > r.capacity_gb else ("bold" if phase == r.peak_phase else "")
        mem.add_row(phase, *(f"{getattr(b, c):.2f}" for c in cols), f"[{style}]{b.total:.2f}[/]" if style else
                    f"{b.total:.2f}")
    console.print(mem)
    fit = "[green]fits[/]" if r.fits else "[red]does NOT fit[/]"
    host = "[green]fits[/]" if r.host_fits else "[red]does NOT fit[/]"
    console.print(f"peak {r.memory_peak_gb_max:.2f} GB in {r.peak_phase}: {fit}; host memory "
                  f"{r.host_memory_gb_per_node:.0f} of {r.host_memory_capacity_gb_per_node:.0f} GB per node: {host}; "
                  f"KV cache {r.kv_cache_tokens_per_device:,} tokens per device "
                  f"({r.kv_cache_bytes_per_token_per_device:,} B per token)")
    rs = Table(title="Weight reshard, training -> rollout")
    for col in ("method", "bytes total", "max per device", "extra memory GiB/device"):
        rs.add_column(col, justify="left" if col == "method" else "right")
    rows = {r.reshard.method + " (chosen)": r.reshard, **r.reshard.alternatives}
    for name, f in rows.items():
        rs.add_row(name, f"{f.bytes_total:,}", f"{f.bytes_per_device_max:,}",
                   f"{f.extra_memory_gb_per_device_max * 1e9 / 2**30:.4f}")
    console.print(rs)
    for note in r.notes:
        console.print(f"note: {note}")


def print_weight_sync(console: Console, ev: SyncEvaluation, times: dict[str, SyncTime]) -> None:
    """The weight sync of a disaggregated scenario by each method, with the measured value where it has one."""
    lay, sc = ev.layout, ev.sc
    console.print(f"[bold]{sc.name}[/]: trainer {lay.train.short()} on {lay.trainer_devices(ev.devices)} devices, "
                  f"rollout {lay.rollout.short()} on {lay.rollout.devices} others, profile {ev.profile.id}")
    table = Table(title="Weight sync, trainer -> rollout (disaggregated)")
    for col in ("method", "predicted s", "measured s", "error", "export s", "broadcast s", "load s", "broadcasts"):
        table.add_column(col, justify="left" if col == "method" else "right")
    measured = sc.measured.stages_s.get("weight_sync") if sc.measured else None
    for method, t in times.items():
        m = measured if method == ev.method else None
        name = f"{method} (the scenario's)" if method == ev.method else method
        table.add_row(name, f"{t.seconds:.2f}", "" if m is None else f"{m:.2f}", _err(t.seconds, m),
                      f"{t.export_s:.2f}", f"{t.broadcast_s:.2f}", f"{t.load_s:.2f}", f"{t.broadcasts:,}")
    console.print(table)
    engine = {None: f"verl {sc.software.verl} has no checkpoint engine",
              RECIPE_ENGINE: "verl 0.7's recipe checkpoint engine runs export, broadcasts and loads one after another, "
                             "so its total is their sum",
              CORE_ENGINE: "with verl >= 0.8's checkpoint engine export, broadcast and load overlap bucket by bucket, "
                           "so its total is less than their sum"}[ev.checkpoint_engine]
    console.print(f"note: {next(iter(times.values())).tensors:,} HuggingFace tensors per sync; {engine}; the step of a "
                  "disaggregated run is not modelled")
    band = ev.band(times[ev.method].seconds)
    if band is None:
        console.print(f"band: none: profile {ev.profile.id} was fitted on no disaggregated weight sync (`calibration "
                      "report` prints the error on the published ones)")
    else:
        console.print(f"band: {band[0]:.2f}-{band[1]:.2f} s (+-{ev.band_error * 100:.1f} %: the leave-one-case-out "
                      f"error of profile {ev.profile.id} on the weight syncs it was fitted on)")
