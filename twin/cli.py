"""The `twin` command: inspect models, clusters and layouts; simulate a scenario; plan a layout."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from twin.clirun import bounded, json_text, make_console, run_app, working
from twin.errors import TwinError
from twin.fileio import check_target, output_dir
from twin.scenario import MAX_CARDS, MAX_SEED

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import Progress

    from twin.command_file import CommandFile
    from twin.plan import Plan
    from twin.planner import Planner, PlanOutcome, ProgressFactory
    from twin.profile import Profile
    from twin.scenario import Scenario

app = typer.Typer(
    add_completion=False,
    pretty_exceptions_enable=False,
    no_args_is_help=True,
    help="Digital twin of GRPO, DAPO and PPO post-training on Ascend A2/A3 clusters: predicts reshard traffic, "
    "per-device memory and tokens/s per card for a parallel layout, and plans the best one.",
)
console = make_console()

ModelOpt = Annotated[str, typer.Option("--model", "-m", help="Catalog name (see `twin models`) or a config.json path")]
CARDS_DOMAIN = bounded(1, MAX_CARDS, "8192 A3 cards (16,384 dies) is the largest cluster the planner is exercised on")
CardsOpt = Annotated[int, typer.Option("--cards", "-c", callback=CARDS_DOMAIN,
                                       help="Cards as the recipes count them: 910B on A2, 910C on A3")]
ClusterOpt = Annotated[str, typer.Option("--cluster", help="Cluster kind (see `twin clusters`) or a cluster YAML file")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table")]


def _print_json(obj: object) -> None:
    sys.stdout.write(json_text(obj) + "\n")


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
                sample: Annotated[int, typer.Option(callback=bounded(1, 10_000, "a sample shows at least one "
                                                                    "layout of each kind"),
                                                    help="How many layouts of each kind to show")] = 8,
                as_json: JsonOpt = False) -> None:
    """Count the valid training and rollout layouts of a model on a cluster, and show a sample."""
    from twin.catalog.registry import load_config
    from twin.layout.enumerate import enumerate_rollout, enumerate_train
    from twin.topology.clusters import cluster_kind

    cfg = load_config(model)
    kind = cluster_kind(cluster)
    devices = cards * kind.devices_per_card
    with working(f"enumerating layouts of {cfg.name} on {devices} devices"):
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
    return with_files_resolved(sc, p.parent), p.parent


def with_files_resolved(sc: Scenario, base: Path) -> Scenario:
    """The scenario with a cluster file and a profile file named relative to `base` made absolute (so a plan, or a
    case `calibration case` writes elsewhere, still finds them)."""
    from twin.hardware import resolve_cluster_ref

    update: dict[str, object] = {}
    kind = resolve_cluster_ref(sc.cluster.kind, base)
    if kind != sc.cluster.kind:
        update["cluster"] = sc.cluster.model_copy(update={"kind": kind})
    if sc.profile is not None and not Path(sc.profile).is_absolute() and (base / sc.profile).is_file():
        update["profile"] = str((base / sc.profile).resolve())  # as twin.profile.resolve_profile finds it
    return sc.model_copy(update=update) if update else sc


@app.command("simulate")
def simulate_cmd(
    case: Annotated[str, typer.Argument(help="A scenario YAML (with a layout) or a plan.json")],
    as_json: JsonOpt = False,
    trace: Annotated[Path | None, typer.Option(help="Write a Chrome/Perfetto trace (JSON) of the step")] = None,
    plot: Annotated[Path | None, typer.Option(help="Write PNG plots (memory timeline, stage breakdown) here")] = None,
    steps: Annotated[int, typer.Option(callback=bounded(1, 1000, "each step is simulated in full; 1000 steps "
                                                                  "average out any length draw"),
                                       help="Steps to simulate (stage times are their mean)")] = 1,
    seed: Annotated[int | None, typer.Option(callback=bounded(0, MAX_SEED, "numpy seeds are non-negative 64-bit "
                                                                         "numbers"),
                                             help="Seed of the length draws (default: the scenario's)")] = None,
    analytical: Annotated[bool, typer.Option("--analytical", help="Closed-form model instead of the "
                                                                  "discrete-event simulation")] = False,
    profile: Annotated[str | None, typer.Option(help="Calibration profile YAML (default: the scenario's, "
                                                    "else the cluster kind's embedded one)")] = None,
    length_spread: Annotated[bool, typer.Option("--length-spread",
                                                help="Also simulate the responses' lognormal spread (sigma) 0.1 "
                                                     "narrower and wider, half of it shared by a prompt's responses "
                                                     "(prompt_share 0.5, or 0 where the scenario sets one), and "
                                                     "every response at the mean, and say how far the rollout, the "
                                                     "log-prob passes, the update and the step move: sources rarely "
                                                     "publish more than the mean length")] = False,
) -> None:
    """Predict step time, stage times, per-device memory and reshard traffic of one scenario."""
    from twin.evaluate import Evaluation
    from twin.profile import load_profile
    from twin.report import print_result
    from twin.uncertainty import print_uncertainty

    if trace:
        check_target(trace, f"--trace {trace}", [case, profile])
    if plot:
        output_dir(plot, f"--plot {plot}", [case, profile])
    scenario, base = load_case(case)
    ev = Evaluation(scenario, load_profile(profile) if profile else None, base_dir=base)
    if analytical:
        if trace or plot or length_spread:
            raise TwinError("--trace, --plot and --length-spread need the simulation; drop --analytical")
        result = ev.analytical()
    else:
        from twin.sim.step import simulate

        with working(f"simulating {steps} step(s) of {scenario.name}"):
            result, sim = simulate(ev, steps=steps, seed=seed)
        result = result.model_copy(update={"reshard": ev.reshard_result(alternatives=True)})
        if length_spread:
            from twin.sensitivity import spread_note

            with working(f"simulating {scenario.name} with its responses' spread narrower and wider"):
                result = result.model_copy(update={"notes": [*result.notes, spread_note(ev, result, steps, seed)]})
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


@app.command("weight-sync")
def weight_sync_cmd(
    case: Annotated[str, typer.Argument(help="A scenario YAML whose rollout runs on separate devices "
                                             "(layout.placement: separate)")],
    as_json: JsonOpt = False,
    profile: Annotated[str | None, typer.Option(help="Calibration profile YAML (default: the scenario's, "
                                                    "else the cluster kind's embedded one)")] = None,
) -> None:
    """Predict the weight sync of a disaggregated run (trainer and rollout on devices of their own), per tensor and
    through verl's checkpoint engine."""
    from twin.disaggregated import SyncEvaluation
    from twin.profile import load_profile
    from twin.report import print_weight_sync

    scenario, base = load_case(case)
    ev = SyncEvaluation(scenario, load_profile(profile) if profile else None, base_dir=base)
    times = ev.times()
    if as_json:
        _print_json({"scenario": scenario.name, "method": ev.method, "checkpoint_engine": ev.checkpoint_engine,
                     "profile": ev.profile.id, "trainer_devices": ev.layout.trainer_devices(ev.devices),
                     "rollout_devices": ev.layout.rollout.devices, "weight_sync_s": times[ev.method].seconds,
                     "band": ev.band(times[ev.method].seconds), "methods": {m: vars(t) for m, t in times.items()}})
        return
    print_weight_sync(console, ev, times)


@app.command("plan")
def plan_cmd(
    model: Annotated[str | None, typer.Option("--model", "-m", help="Catalog name or config.json path")] = None,
    cards: Annotated[str | None, typer.Option("--cards", "-c", help="Cards: 910B on A2, 910C on A3; several "
                                                                    "(64,96,128) to let the count vary")] = None,
    cluster: Annotated[str | None, typer.Option("--cluster", help="Cluster kind (default a3) or a cluster YAML "
                                                                  "file")] = None,
    scenario: Annotated[str | None, typer.Option(help="Scenario YAML: workload, optimizations, profile "
                                                      "(its layout is ignored; --model/--cards override)")] = None,
    top: Annotated[int, typer.Option("--top", "-k", callback=bounded(1, 100, "each ranked layout is simulated "
                                                                            "in full"),
                                     help="Layouts to rank and show")] = 5,
    output: Annotated[Path, typer.Option("--output", "-o", help="Where to write the plan")] = Path("plan.json"),
    profile: Annotated[str | None, typer.Option(help="Calibration profile YAML")] = None,
    keep_layout: Annotated[bool, typer.Option(
        "--keep-layout", help="With --scenario: plan its own layout (validate and predict, no search)")] = False,
    explain: Annotated[str | None, typer.Option(
        "--explain", help="Why not this layout: 'TRAINING | ROLLOUT' as the table prints them, or a scenario "
                          "or plan file with a layout")] = None,
    headroom: Annotated[float | None, typer.Option(
        "--headroom", min=0.0, max=0.99, help="Fraction of usable device memory every phase keeps free (default: the "
                                              "profile's memory uncertainty)")] = None,
    pareto: Annotated[bool, typer.Option("--pareto", help="Print and plot (PNG beside the plan) the layouts not "
                                                          "dominated on step time, headroom, reshard volume")] = False,
    risk: Annotated[str, typer.Option("--risk", help="Rank by p50 (the prediction) or p90 (its 90th percentile: the "
                                                     "step's band, or its stages' where wider, taken as a normal "
                                                     "error's mean absolute value)")] = "p50",
    time_limit: Annotated[float | None, typer.Option(
        "--time-limit", callback=bounded(1, 86_400, "seconds of search, at least one, at most a day"),
        help="Seconds to search; past them the best plan found so far is written, saying so")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Search every valid layout pair, rank those that fit by predicted step time, write plan.json."""
    from twin.command_file import command_file_for
    from twin.profile import load_profile
    from twin.report import print_result
    from twin.sim.step import simulated
    from twin.uncertainty import print_uncertainty

    inputs = [scenario, profile, model, explain, cluster]  # a query or kind name matches no file
    check_target(output, f"--output {output}", inputs)
    for beside in _files_beside_plan(output, pareto):
        check_target(beside, f"{beside} (written beside --output {output})", inputs)
    if risk not in ("p50", "p90"):
        raise TwinError(f"--risk {risk!r}: give p50 or p90")
    card_counts = _card_counts(cards)
    base = None
    if cluster is not None:
        from twin.hardware import resolve_cluster_ref

        cluster = resolve_cluster_ref(cluster)
    with command_file_for(output) as command_file:  # started now: it prepares while the search runs
        if keep_layout:
            if scenario is None:
                raise TwinError("--keep-layout needs --scenario")
            from twin.planner import fixed_plan

            sc, base = load_case(scenario)
            plan = fixed_plan(sc, load_profile(profile) if profile else None, base, finalize=simulated)
            if _saved(plan, output, command_file, as_json):
                return
            print_result(console, plan.predictions, sc.measured)
            print_uncertainty(console, plan.predictions)
            _report_written(output, plan, command_file)
            return
        prof = load_profile(profile) if profile else None
        if explain:  # a malformed query fails before the search
            from twin.explain import resolve_query
            from twin.planner import Planner

            first = card_counts[0] if card_counts else None
            resolve_query(Planner(_plan_scenario(scenario, model, first, cluster), prof, headroom=headroom), explain)
        deadline = time.perf_counter() + time_limit if time_limit else None
        searches, unfit = [], []
        with _progress() as bar:
            progress = _ticker(bar)
            for n in card_counts or [None]:
                try:
                    sc = _plan_scenario(scenario, model, n, cluster)
                    searches.append(_plan_search(sc, prof, top, headroom, risk, deadline, bar))
                except TwinError as exc:  # with several card counts, one that fits nothing is reported, not fatal
                    if len(card_counts) < 2:
                        raise
                    unfit.append(str(exc))
            if not searches:
                raise TwinError("; ".join(unfit))
            if pareto:
                from twin.planner import evaluate_front

                evaluate_front(searches, simulated, progress, deadline=deadline)
            planner, outcome = min(searches, key=lambda po: po[1].distinct()[0].key)
            plan = outcome.plan
            if explain:
                from twin.explain import explain_layout, resolve_query

                layout, _ = resolve_query(planner, explain)
                where = next(((p, o) for p, o in searches if p.devices == layout.rollout.devices), (planner, outcome))
                explained = explain_layout(*where, explain, simulated, progress, deadline=deadline)
                plan = plan.model_copy(update={"explained": explained})
        everything, pts = [], []
        if pareto:
            from twin.pareto import front, point

            everything = [point(e.layout, e.result,
                                e.layout == plan.layout and e.result.cards == plan.predictions.cards)
                          for _, o in searches for e in o.evaluated]
            pts = front(everything)
            plan = plan.model_copy(update={"pareto": pts})
        if _saved(plan, output, command_file, as_json):
            return
        sc = planner.sc
        wl = sc.workload
        source = f"scenario {scenario}" if scenario else "the recipes' defaults (C1); pass --scenario to change them"
        console.print(f"workload from {source}: {wl.algorithm.upper()}, {wl.global_batch} prompts x n={wl.n}, "
                      f"prompt mean {wl.prompt_len.mean:g} (max {wl.prompt_len.max}), response mean "
                      f"{wl.response_len.mean:g} (max {wl.response_len.max}); optimizations: "
                      f"{', '.join(sc.optimizations)}; software {sc.software.stated()}")
        console.print(f"headroom {planner.headroom:.1%} of usable memory in every phase ({planner.headroom_source}); "
                      f"ranked by {risk}")
        for p, o in searches:
            print_plan_table(o, p.sc, p.devices)
        for line in unfit:
            console.print(line, markup=False)
        for p, o in searches:
            if o.summary.stopped:
                console.print(f"[bold]stopped early[/] ({p.sc.cluster.cards} cards): {o.summary.stopped}; this is the "
                              "best plan found so far")
        print_uncertainty(console, plan.predictions)
        if plan.explained:
            from twin.explain import print_explanation

            print_explanation(console, plan.explained, plan.layout)
        if pareto:
            from twin.pareto import plot_front, print_front

            print_front(console, everything, pts)
            for p, o in searches:
                if o.summary.front_stopped:
                    console.print(f"Pareto front ({p.sc.cluster.cards} cards): {o.summary.front_stopped}", markup=False)
            png = _pareto_png(output)
            plot_front(everything, pts, png, f"{sc.model} on {', '.join(str(p.sc.cluster.cards) for p, _ in searches)} "
                                              f"{sc.cluster.kind} cards: Pareto front (risk {risk})")
            console.print(f"wrote {png}")
        _report_written(output, plan, command_file)


def _files_beside_plan(output: Path, pareto: bool) -> list[Path]:
    """What `twin plan` writes next to its plan: the executor's launch script and, with --pareto, the front's PNG."""
    from twin.command_file import command_file_path

    return [command_file_path(output), *([_pareto_png(output)] if pareto else [])]


def _pareto_png(output: Path) -> Path:
    return output.with_suffix(".pareto.png")


def _saved(plan: Plan, output: Path, command_file: CommandFile, as_json: bool) -> bool:
    """Save the plan and tell the executor to write its command file; with --json, print the plan and the notes
    (on stderr) and return True: nothing else is printed."""
    from twin.plan import save_plan

    save_plan(plan, output)
    command_file.tell()
    if as_json:
        sys.stdout.write(plan.model_dump_json(by_alias=True, indent=2) + "\n")
        _report_written(output, plan, command_file, make_console(stderr=True))
    return as_json


def _report_written(output: Path, plan: Plan, command_file: CommandFile, notes: Console | None = None) -> None:
    """After a plan is saved: say so, have the launch command written beside it, and name what the executor refuses
    (on `notes`: stderr with --json, whose stdout is the plan alone)."""
    notes = notes or console
    notes.print(f"wrote {output}")
    command_file.report(notes)
    print_refusals(plan, notes)


def _card_counts(cards: str | None) -> list[int]:
    """`--cards 128` or `--cards 64,96,128`."""
    if cards is None:
        return []
    try:
        counts = sorted({int(c) for c in cards.split(",") if c.strip()})
    except ValueError:
        raise TwinError(f"--cards {cards!r}: give a card count or several separated by commas") from None
    if not counts:
        raise TwinError(f"--cards {cards!r}: give a card count or several separated by commas")
    for c in counts:
        if not 1 <= c <= MAX_CARDS:
            raise TwinError(f"--cards {cards!r}: {c} is outside its domain, 1 to {MAX_CARDS:,}: 8192 A3 cards "
                            "(16,384 dies) is the largest cluster the planner is exercised on")
    return counts


def _plan_scenario(path: str | None, model: str | None, cards: int | None, cluster: str | None) -> Scenario:
    """The scenario a search plans: a scenario file without its layout (with the overrides), else the recipes'
    defaults."""
    from twin.planner import default_scenario

    if path is None:
        if model is None or cards is None:
            raise TwinError("give --model and --cards, or --scenario")
        return default_scenario(model, cluster or "a3", cards)
    from twin.disaggregated import refuse_separate

    sc, _ = load_case(path)
    refuse_separate(sc, "a colocated layout search")
    updates: dict[str, object] = {"layout": None}
    if model or cards or cluster:
        updates["model"] = model or sc.model
        updates["cluster"] = sc.cluster.model_copy(update={k: v for k, v in (("kind", cluster), ("cards", cards))
                                                           if v is not None})
    return sc.model_copy(update=updates)


def _progress() -> Progress:
    """One progress bar on stderr for every stage of a plan (screening, full evaluations, the front, --explain)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    notes = make_console(stderr=True)
    # drawn only on a terminal: elsewhere rich ends a bar with an empty line, before a one-line error too
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    console=notes, transient=True, disable=not notes.is_terminal)


def _ticker(bar: Progress, prefix: str = "") -> ProgressFactory:
    """What the planner reports progress to: a task per stage, advanced by the callable it returns."""
    def progress(label: str, total: int) -> Callable[..., None]:
        task = bar.add_task(prefix + label, total=total)
        return lambda steps=1: bar.advance(task, steps)

    return progress


def _plan_search(sc: Scenario, profile: Profile | None, top: int, headroom: float | None, risk: str,
                 deadline: float | None, bar: Progress) -> tuple[Planner, PlanOutcome]:
    """One search, its stages on the progress bar; no layout that fits is a one-line error."""
    from twin.planner import Planner, search
    from twin.sim.step import simulated

    planner = Planner(sc, profile, headroom=headroom, risk=risk)
    outcome = search(planner, top, _ticker(bar, f"{sc.cluster.cards} cards: "), finalize=simulated, deadline=deadline)
    if outcome.plan is None:
        raise TwinError(f"no layout of {planner.cfg.name} fits {sc.cluster.cards} {planner.kind.name} cards "
                        f"({planner.devices} devices of {planner.capacity_gb:g} GB usable, "
                        f"{planner.headroom:.1%} kept free); "
                        f"closest: {outcome.best_unfit}; rejected: {dict(outcome.summary.rejected)}")
    return planner, outcome


def _band(value: float, band: tuple[float, float] | None, fmt: str) -> str:
    return f"{value:{fmt}} [{band[0]:{fmt}}-{band[1]:{fmt}}]" if band else f"{value:{fmt}} [?]"


def print_refusals(plan: Plan, notes: Console | None = None) -> None:
    """Say, after writing it, when `executor run` will refuse the plan (and why), as the plan records it."""
    notes = notes or console
    for opt_id, reasons in plan.executor_refusals().items():
        notes.print(f"note: `executor run` refuses this plan before launch: {opt_id}: {'; '.join(reasons)}; switch "
                    f"it off in a scenario (optimizations) to run the layout without it", markup=False)


def print_plan_table(outcome: PlanOutcome, sc: Scenario, devices: int) -> None:
    """The top-k layouts with their bands and headroom, which of them #1 cannot be told from, and the search."""
    from twin.explain import bands_overlap, headroom_fraction, step_band

    plan = outcome.plan
    table = Table(title=f"Best layouts for {sc.model} on {sc.cluster.cards} {sc.cluster.kind} cards "
                        f"({devices} devices); \\[lo-hi] = uncertainty band, \\[?] = unknown")
    for col in ("#", "training", "rollout", "peak GB / usable", "headroom", "step s", "TPS/card", "reshard GB"):
        table.add_column(col, justify="left" if col in ("training", "rollout") else "right")
    best = outcome.ranked[0]
    close = []
    for i, r in enumerate(outcome.ranked):
        lay = plan.layout if i == 0 else plan.runner_ups[i - 1].layout
        ro = lay.rollout
        band = step_band(r)
        tps_band = (r.tps_per_card * r.step_s / band[1], r.tps_per_card * r.step_s / band[0]) if band else None
        mem = r.uncertainty.memory_peak_gb_max if r.uncertainty else None
        if i and bands_overlap(r, best):
            close.append(f"#{i + 1}")
        table.add_row(str(i + 1), lay.train.short(), f"{ro.short()} util{ro.gpu_memory_utilization:g}",
                      f"{_band(r.memory_peak_gb_max, mem, '.1f')} / {r.capacity_gb:g} ({r.peak_phase})",
                      f"{headroom_fraction(r):.1%}", _band(r.step_s, band, ".1f"),
                      _band(r.tps_per_card, tps_band, ".1f"), f"{r.reshard.bytes_total / 1e9:,.1f}")
    console.print(table)
    if close:
        console.print(f"[yellow]{', '.join(close)} overlap the band of #1: which is faster is not known[/]")
    elif best.uncertainty is None:
        console.print("bands unknown (the profile has no cross-validated error): differences smaller than the "
                      "model's error are not known")
    s = outcome.summary
    rejected = ", ".join(f"{k}: {v}" for k, v in sorted(s.rejected.items(), key=lambda kv: -kv[1])) or "none"
    console.print(f"searched {s.train_layouts} training x {s.rollout_layouts} rollout structures, "
                  f"{s.pairs_evaluated:,} pairs with knobs, {s.pairs_fitting:,} fit ({s.candidates:,} candidates with "
                  f"their gpu_memory_utilization steps) in {s.wall_s:.1f} s; {s.simulated} evaluated in full in all "
                  f"(the search, and --pareto and --explain where asked). Rejected: {rejected}")
    if s.screen_overshoot > 0:
        console.print(f"note: a full evaluation came in {s.screen_overshoot:.2%} below its screen bound (the screen's "
                      "closed-form rollout): a layout within that of the last ranked may not have been evaluated",
                      markup=False)


@app.command("schema")
def schema_cmd() -> None:
    """Print the JSON Schema of plan.json."""
    from twin.plan import plan_json_schema

    _print_json(plan_json_schema())


def main() -> None:
    """Console entry point."""
    run_app(app, "twin")
