"""The `twin` command: inspect models, clusters and layouts; simulate a scenario; plan a layout."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from twin.clirun import make_console, run_app
from twin.errors import TwinError

if TYPE_CHECKING:
    from twin.planner import PlanOutcome
    from twin.scenario import Scenario

app = typer.Typer(
    add_completion=False,
    pretty_exceptions_enable=False,
    no_args_is_help=True,
    help="Digital twin of GRPO/DAPO post-training on Ascend A2/A3 clusters: predicts reshard traffic, "
    "per-device memory and tokens/s per card for a parallel layout, and plans the best one.",
)
console = make_console()

ModelOpt = Annotated[str, typer.Option("--model", "-m", help="Catalog name (see `twin models`) or a config.json path")]
CardsOpt = Annotated[int, typer.Option("--cards", "-c", help="Cards as the recipes count them: 910B on A2, 910C on A3")]
ClusterOpt = Annotated[str, typer.Option("--cluster", help="Cluster kind (see `twin clusters`) or a cluster YAML file")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table")]


def _print_json(obj: object) -> None:
    sys.stdout.write(json.dumps(obj, indent=2) + "\n")


@app.command("models")
def models_cmd(as_json: JsonOpt = False) -> None:
    """List the models of the embedded catalog with their exact parameter counts."""
    from twin.catalog.registry import CATALOG_SOURCES, load_model

    rows = []
    for name in sorted(CATALOG_SOURCES):
        inv = load_model(name)
        cfg = inv.config
        rows.append({
            "name": name,
            "source": CATALOG_SOURCES[name],
            "model_type": cfg.model_type,
            "total_params": inv.total_params(),
            "active_params": inv.active_params(),
            "mtp_params": inv.mtp_params(),
            "layers": cfg.num_layers,
            "hidden_size": cfg.hidden_size,
            "attention": cfg.attention,
            "heads": cfg.num_attention_heads,
            "kv_heads": cfg.num_kv_heads,
            "experts": cfg.moe.num_experts if cfg.moe else 0,
            "experts_per_token": cfg.moe.experts_per_token if cfg.moe else 0,
            "tensors": len(inv),
        })
    if as_json:
        _print_json(rows)
        return
    table = Table(title="Model catalog (counts exact; active = per token, head counted, input embedding not)")
    for col in ("name", "total", "active", "layers", "attention", "experts"):
        table.add_column(col, justify="left" if col in ("name", "attention") else "right", no_wrap=True)
    for r in rows:
        experts = f"{r['experts']} (top-{r['experts_per_token']})" if r["experts"] else "-"
        table.add_row(r["name"], f"{r['total_params']:,}", f"{r['active_params']:,}",
                      str(r["layers"]), f"{r['attention']} {r['heads']}/{r['kv_heads']}", experts)
    console.print(table)


@app.command("clusters")
def clusters_cmd(as_json: JsonOpt = False, cluster: Annotated[list[str] | None, typer.Option(
        "--cluster", help="A cluster kind or cluster YAML file to show (repeatable; default: all shipped)")] = None,
) -> None:
    """List the cluster kinds: device, packaging, link tiers and efficiency curves, each figure with its source."""
    from twin.hardware import CLUSTER_KINDS, cluster_kind
    from twin.hardware.report import kind_json, print_kinds

    kinds = [cluster_kind(c) for c in cluster] if cluster else list(CLUSTER_KINDS.values())
    if as_json:
        _print_json([kind_json(k) for k in kinds])
        return
    print_kinds(console, kinds)


@app.command("layouts")
def layouts_cmd(model: ModelOpt, cards: CardsOpt, cluster: ClusterOpt = "a3",
                sample: Annotated[int, typer.Option(help="How many layouts of each kind to show")] = 8,
                as_json: JsonOpt = False) -> None:
    """Count the valid training and rollout layouts of a model on a cluster, and show a sample."""
    from twin.catalog.registry import load_config
    from twin.layout.enumerate import enumerate_rollout, enumerate_train
    from twin.topology.clusters import cluster_kind

    cfg = load_config(model)
    kind = cluster_kind(cluster)
    devices = cards * kind.devices_per_card
    train = list(enumerate_train(cfg, devices, kind))
    rollout = list(enumerate_rollout(cfg, devices, kind))
    if as_json:
        _print_json({
            "model": cfg.name, "cluster": kind.name, "cards": cards, "devices": devices,
            "train_layouts": len(train), "rollout_layouts": len(rollout),
            "train_sample": [t.model_dump(exclude_defaults=True) for t in train[:sample]],
            "rollout_sample": [r.model_dump(exclude_defaults=True) for r in rollout[:sample]],
        })
        return
    console.print(f"{cfg.name} on {cards} {kind.name} cards = {devices} devices: "
                  f"{len(train)} training layouts, {len(rollout)} rollout layouts, "
                  f"{len(train) * len(rollout)} pairs")
    step = max(1, len(train) // sample)
    console.print("training (sample): " + "; ".join(t.short() for t in train[::step][:sample]))
    step = max(1, len(rollout) // sample)
    console.print("rollout (sample):  " + "; ".join(r.short() for r in rollout[::step][:sample]))


def load_case(path: str) -> tuple[Scenario, Path]:
    """A scenario YAML, or a plan.json whose scenario carries the chosen layout."""
    from twin.plan import load_plan
    from twin.scenario import load_scenario

    p = Path(path)
    sc = load_plan(p).scenario if p.suffix == ".json" else load_scenario(p)
    return with_cluster_file_resolved(sc, p.parent), p.parent


def with_cluster_file_resolved(sc: Scenario, base: Path) -> Scenario:
    """The scenario with a cluster file named relative to `base` made absolute (so a plan carries it)."""
    from twin.hardware import resolve_cluster_ref

    kind = resolve_cluster_ref(sc.cluster.kind, base)
    return sc if kind == sc.cluster.kind else sc.model_copy(update={"cluster": sc.cluster.model_copy(
        update={"kind": kind})})


@app.command("simulate")
def simulate_cmd(
    case: Annotated[str, typer.Argument(help="A scenario YAML (with a layout) or a plan.json")],
    as_json: JsonOpt = False,
    trace: Annotated[Path | None, typer.Option(help="Write a Chrome/Perfetto trace (JSON) of the step")] = None,
    plot: Annotated[Path | None, typer.Option(help="Write PNG plots (memory timeline, stage breakdown) here")] = None,
    steps: Annotated[int, typer.Option(min=1, help="Steps to simulate (stage times are their mean)")] = 1,
    seed: Annotated[int | None, typer.Option(help="Seed of the length draws (default: the scenario's)")] = None,
    analytical: Annotated[bool, typer.Option("--analytical", help="Closed-form model instead of the "
                                                                  "discrete-event simulation")] = False,
    profile: Annotated[str | None, typer.Option(help="Calibration profile YAML (default: the scenario's, "
                                                    "else the cluster kind's embedded one)")] = None,
) -> None:
    """Predict step time, stage times, per-device memory and reshard traffic of one scenario."""
    from twin.evaluate import Evaluation
    from twin.profile import load_profile
    from twin.report import print_result
    from twin.uncertainty import print_uncertainty

    scenario, base = load_case(case)
    ev = Evaluation(scenario, load_profile(profile) if profile else None, base_dir=base)
    if analytical:
        if trace or plot:
            raise TwinError("--trace and --plot need the simulation; drop --analytical")
        result = ev.analytical()
    else:
        from twin.sim.step import simulate

        result, sim = simulate(ev, steps=steps, seed=seed)
        result = result.model_copy(update={"reshard": ev.reshard_result(alternatives=True)})
        if trace:
            sim.trace.write(trace)
        if plot:
            from twin.sim.plots import memory_timeline, stage_breakdown

            memory_timeline(sim.trace, result, plot / "memory_timeline.png")
            stage_breakdown(result, scenario.measured, plot / "stages.png")
    if as_json:
        sys.stdout.write(result.model_dump_json(indent=2) + "\n")
        return
    print_result(console, result, scenario.measured)
    print_uncertainty(console, result)
    for path, what in ((trace, "trace"), (plot, "plots")):
        if path:
            console.print(f"wrote {what}: {path}")


@app.command("plan")
def plan_cmd(
    model: Annotated[str | None, typer.Option("--model", "-m", help="Catalog name or config.json path")] = None,
    cards: Annotated[int | None, typer.Option("--cards", "-c", help="Cards: 910B on A2, 910C on A3")] = None,
    cluster: Annotated[str | None, typer.Option("--cluster", help="Cluster kind (default a3) or a cluster YAML "
                                                                  "file")] = None,
    scenario: Annotated[str | None, typer.Option(help="Scenario YAML: workload, optimizations, profile "
                                                      "(its layout is ignored; --model/--cards override)")] = None,
    top: Annotated[int, typer.Option("--top", "-k", min=1, help="Layouts to rank and show")] = 5,
    output: Annotated[Path, typer.Option("--output", "-o", help="Where to write the plan")] = Path("plan.json"),
    profile: Annotated[str | None, typer.Option(help="Calibration profile YAML")] = None,
    keep_layout: Annotated[bool, typer.Option(
        "--keep-layout", help="With --scenario: plan its own layout (validate and predict, no search)")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Search every valid layout pair, rank those that fit by predicted step time, write plan.json."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from twin.plan import save_plan
    from twin.planner import Planner, default_scenario, search
    from twin.profile import load_profile
    from twin.report import print_result
    from twin.sim.step import simulated
    from twin.uncertainty import print_uncertainty

    base = None
    if cluster is not None:
        from twin.hardware import resolve_cluster_ref

        cluster = resolve_cluster_ref(cluster)
    if keep_layout:
        if scenario is None:
            raise TwinError("--keep-layout needs --scenario")
        from twin.planner import fixed_plan

        sc, base = load_case(scenario)
        plan = fixed_plan(sc, load_profile(profile) if profile else None, base, finalize=simulated)
        save_plan(plan, output)
        if as_json:
            sys.stdout.write(plan.model_dump_json(by_alias=True, indent=2) + "\n")
            return
        print_result(console, plan.predictions, sc.measured)
        print_uncertainty(console, plan.predictions)
        console.print(f"wrote {output}")
        return
    if scenario is not None:
        sc, base = load_case(scenario)
        updates = {"layout": None}
        if model or cards or cluster:
            updates["model"] = model or sc.model
            updates["cluster"] = sc.cluster.model_copy(update={k: v for k, v in (("kind", cluster), ("cards", cards))
                                                               if v is not None})
        sc = sc.model_copy(update=updates)
    else:
        if model is None or cards is None:
            raise TwinError("give --model and --cards, or --scenario")
        sc = default_scenario(model, cluster or "a3", cards)
    planner = Planner(sc, load_profile(profile) if profile else None, base_dir=base)
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=make_console(stderr=True), transient=True) as bar:
        def progress(label: str, total: int):
            task = bar.add_task(label, total=total)
            return lambda: bar.advance(task)

        outcome = search(planner, top, progress, finalize=simulated)
    if outcome.plan is None:
        raise TwinError(f"no layout of {planner.cfg.name} fits {sc.cluster.cards} {planner.kind.name} cards "
                        f"({planner.devices} devices of {planner.hbm_gb:g} GB); closest: {outcome.best_unfit}; "
                        f"rejected: {dict(outcome.summary.rejected)}")
    save_plan(outcome.plan, output)
    if as_json:
        sys.stdout.write(outcome.plan.model_dump_json(by_alias=True, indent=2) + "\n")
        return
    wl = sc.workload
    source = f"scenario {scenario}" if scenario else "the recipes' defaults (C1); pass --scenario to change them"
    console.print(f"workload from {source}: {wl.algorithm.upper()}, {wl.global_batch} prompts x n={wl.n}, "
                  f"prompt mean {wl.prompt_len.mean:g} (max {wl.prompt_len.max}), response mean "
                  f"{wl.response_len.mean:g} (max {wl.response_len.max}); optimizations: {', '.join(sc.optimizations)}")
    print_plan_table(outcome, sc, planner.devices)
    print_uncertainty(console, outcome.plan.predictions)
    console.print(f"wrote {output}")


def print_plan_table(outcome: PlanOutcome, sc: Scenario, devices: int) -> None:
    """The top-k layouts as a table, with the search summary."""
    table = Table(title=f"Best layouts for {sc.model} on {sc.cluster.cards} {sc.cluster.kind} cards "
                        f"({devices} devices)")
    for col in ("#", "training", "rollout", "peak GB / HBM", "step s", "TPS/card", "reshard GB"):
        table.add_column(col, justify="left" if col in ("training", "rollout") else "right")
    for i, r in enumerate(outcome.ranked):
        lay = outcome.plan.layout if i == 0 else outcome.plan.runner_ups[i - 1].layout
        ro = lay.rollout
        table.add_row(str(i + 1), lay.train.short(), f"{ro.short()} util{ro.gpu_memory_utilization:g}",
                      f"{r.memory_peak_gb_max:.1f} / {r.hbm_gb:g} ({r.peak_phase})", f"{r.step_s:.1f}",
                      f"{r.tps_per_card:.1f}", f"{r.reshard.bytes_total / 1e9:,.1f}")
    console.print(table)
    s = outcome.summary
    rejected = ", ".join(f"{k}: {v}" for k, v in sorted(s.rejected.items(), key=lambda kv: -kv[1])) or "none"
    console.print(f"searched {s.train_layouts} training x {s.rollout_layouts} rollout structures, "
                  f"{s.pairs_evaluated:,} pairs with knobs, {s.pairs_fitting:,} fit; {s.simulated} evaluated in full "
                  f"in {s.wall_s:.1f} s. Rejected: {rejected}")


@app.command("schema")
def schema_cmd() -> None:
    """Print the JSON Schema of plan.json."""
    from twin.plan import plan_json_schema

    _print_json(plan_json_schema())


def main() -> None:
    """Console entry point."""
    run_app(app, "twin")
