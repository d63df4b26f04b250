"""PNG plots of a simulation: the worst device's memory over the step, and the stage breakdown."""

from __future__ import annotations

from pathlib import Path

from twin.fileio import save_figure
from twin.results import SimulationResult
from twin.scenario import Measured
from twin.sim.trace import Trace

COMPONENTS = ("weights", "grads", "optimizer", "activations", "kv_cache", "reshard_buffer", "overhead")


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def memory_timeline(trace: Trace, result: SimulationResult, path: Path) -> Path:
    """Stacked memory of the worst device per phase along the step, against HBM."""
    plt = _pyplot()
    marks = trace.memory
    end = max((s.start_s + s.dur_s for s in trace.spans), default=1.0)
    fig, ax = plt.subplots(figsize=(11, 5))
    starts = [t for t, _, _ in marks] + [end]
    bottoms = [0.0] * len(marks)
    for comp in COMPONENTS:
        values = [getattr(b, comp) for _, _, b in marks]
        if not any(values):
            continue
        for i, v in enumerate(values):
            ax.fill_between([starts[i], starts[i + 1]], bottoms[i], bottoms[i] + v, step="post",
                            color=_COLOURS[comp], label=comp if i == 0 else None, linewidth=0)
            bottoms[i] += v
    for t, phase, b in marks:
        ax.annotate(f"{phase}\n{b.total:.1f} GB", (t, b.total), textcoords="offset points", xytext=(4, 4),
                    fontsize=8)
    ax.axhline(result.capacity_gb, color="red", linestyle="--", linewidth=1,
               label=f"usable {result.capacity_gb:g} GB (HBM {result.hbm_gb:g} GB)")
    ax.set_xlabel("time in the step (s)")
    ax.set_ylabel("GB on the worst device")
    ax.set_title(f"{result.scenario}: memory of the worst device per phase (peak {result.memory_peak_gb_max:.1f} GB "
                 f"in {result.peak_phase})")
    ax.legend(loc="upper right", fontsize=8, ncol=2)
    ax.set_xlim(0, end)
    ax.set_ylim(0, max(result.capacity_gb, result.memory_peak_gb_max) * 1.15)
    return _save(fig, path)


def stage_breakdown(result: SimulationResult, measured: Measured | None, path: Path) -> Path:
    """Predicted seconds per stage, beside the measured ones when the scenario has them."""
    plt = _pyplot()
    names = [k for k, v in result.stages_s.items() if v > 0 or (measured and measured.stages_s.get(k))]
    fig, ax = plt.subplots(figsize=(10, 4.5))
    xs = range(len(names))
    width = 0.4 if measured and measured.stages_s else 0.7
    pred = [result.stages_s[k] for k in names]
    ax.bar([x - (width / 2 if width < 0.7 else 0) for x in xs], pred, width, label="predicted", color="#4c72b0")
    if measured and measured.stages_s:
        meas = [measured.stages_s.get(k, 0.0) for k in names]
        ax.bar([x + width / 2 for x in xs], meas, width, label="measured", color="#dd8452")
    for x, v in zip(xs, pred, strict=True):
        ax.annotate(f"{v:.1f}", (x, v), ha="center", textcoords="offset points", xytext=(0, 2), fontsize=8)
    ax.set_xticks(list(xs), names)
    ax.set_ylabel("seconds per step")
    title = f"{result.scenario}: step {result.step_s:.1f} s, {result.tps_per_card:.1f} tokens/s per card"
    if measured and measured.step_s:
        title += f" (measured {measured.step_s:.1f} s)"
    ax.set_title(title)
    ax.legend()
    return _save(fig, path)


def _save(fig, path: Path) -> Path:
    fig.tight_layout()
    save_figure(fig, path, dpi=120)
    fig.clf()
    return path


_COLOURS = {"weights": "#4c72b0", "grads": "#55a868", "optimizer": "#c44e52", "activations": "#8172b2",
            "kv_cache": "#ccb974", "reshard_buffer": "#64b5cd", "overhead": "#8c8c8c"}
