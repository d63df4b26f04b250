"""`executor`: turn a plan.json into a verl launch, validate it, and run it (DESIGN section 4.1).

`app` is a typer.Typer other modules register commands on. Heavy packages are imported inside commands
so that `executor --help` stays fast.
"""

from __future__ import annotations

import os
import shlex
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from executor.console import err, fail, out

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Launch verl GRPO, DAPO and PPO runs from twin plans, with the Ascend recipe optimizations.")

def optimization_table(reports: list) -> Table:
    table = Table(title="Optimizations (DESIGN section 6)")
    for column in ("optimization", "mechanism", "status", "detail"):
        table.add_column(column, overflow="fold")
    for r in reports:
        table.add_row(r.id, r.mechanism, r.state, r.detail)
    return table


def print_launch(spec) -> None:
    out.print("Command:", style="bold")
    out.print(shlex.join(spec.command), markup=False)
    out.print("Environment:", style="bold")
    for key, value in sorted(spec.env.items()):
        out.print(f"{key}={shlex.quote(value)}", markup=False)
    if spec.engines:
        out.print("Engines: " + ", ".join(f"{k} {v}" for k, v in spec.engines.items()), markup=False)
    out.print(optimization_table(spec.optimizations))


def refuse_unsupported(spec) -> None:
    """Stop before anything starts when the plan enables an optimization its layout cannot run with."""
    refused = [r for r in spec.optimizations if r.state == "refused"]
    if not refused:
        return
    out.print(optimization_table(spec.optimizations))
    for r in refused:
        err.print(f"executor: refused: {r.id}: {r.detail}", markup=False)
    err.print("executor: error: the plan cannot run as written; nothing was started (re-plan with `twin plan`, "
              "or switch the refused optimizations off in the scenario)", markup=False)
    raise typer.Exit(2)


@app.command()
def run(
    plan_path: Annotated[Path, typer.Argument(metavar="PLAN.json", help="plan written by `twin plan`")],
    dry_run: Annotated[bool, typer.Option("--dry-run", help="build, validate and print; start nothing")] = False,
    workdir: Annotated[Path | None, typer.Option(help="run directory (log, metrics, record)")] = None,
    model_path: Annotated[str | None, typer.Option(help="HuggingFace checkpoint directory")] = None,
    data_dir: Annotated[Path | None, typer.Option(help="directory with train.parquet and test.parquet")] = None,
    steps: Annotated[int | None, typer.Option(min=1, help="trainer.total_training_steps")] = None,
) -> None:
    """Build the verl launch for PLAN.json, validate it against the installed verl, and run it."""
    from executor.errors import ValidationFailed
    from executor.npu_opt.host import HostEnv
    from executor.options import RunPaths
    from executor.paths import launch_options
    from executor.plan_check import check_plan
    from executor.targets import target_for
    from executor.validate import validate
    from executor.versions import check_verl_version, software_differences
    from twin.errors import TwinError
    from twin.plan import load_plan

    try:
        plan = load_plan(plan_path)
        check_plan(plan, plan_path)
        verl = check_verl_version()
        options = launch_options(plan, plan_path, workdir, model_path, data_dir, steps)
        target = target_for(plan.scenario.cluster.kind)
        if not dry_run:
            target.require_hardware(plan.predictions.devices)
        # a real run looks patch targets up in the installed source, as `executor command-file` does: each is
        # imported and patched in the process that imports it, and a hook that fails there is reported after the run
        spec = target.build(plan, options, HostEnv(from_source=not dry_run))
        validate(spec.overrides)
        refuse_unsupported(spec)
        for difference in software_differences(plan.scenario.software, verl):
            err.print(f"executor: warning: the plan's predictions assume {difference}: re-plan with the scenario's "
                      "software as launched to predict this run", markup=False)
        if dry_run:
            print_launch(spec)
            return
        _real_run(plan_path, plan, spec, target, RunPaths(workdir=options.workdir), options)
    except ValidationFailed as exc:
        for problem in exc.problems:
            err.print(f"executor: invalid: {problem}", markup=False)
        raise typer.Exit(2) from None
    except TwinError as exc:
        raise fail(str(exc)) from None


def _real_run(plan_path, plan, spec, target, paths, options) -> None:
    from executor.errors import ExecutorError
    from executor.launch import new_record, run_trainer
    from executor.npu_opt.worker_hook_env import PATCHES_ENV
    from executor.preflight import preflight
    from executor.probe import hook_problem, probe_workers

    problems = preflight(plan, options, target)
    if problems:
        raise ExecutorError("preflight: " + "; ".join(problems))
    missing = [r.id for r in spec.optimizations if r.state == "unavailable"]
    if missing:
        err.print(f"executor: warning: running without {', '.join(missing)} (unavailable here)", markup=False)
    cluster = bool(os.environ.get("RAY_ADDRESS"))  # an existing cluster: its nodes need not be this host
    if cluster:
        probe_workers(spec, paths.patch_reports)
    started = time.time()
    ended = run_trainer(spec, paths, new_record(plan_path, plan, spec, paths))
    # a local session's workers are this host's processes: their own reports say whether the hook ran in them (a
    # cluster's other nodes write theirs on their own disks, so there only the failures seen here are read)
    problem = hook_problem(paths.patch_reports, started, ended.pid, spec.env.get(PATCHES_ENV, ""),
                           expect_workers=ended.status == 0 and not cluster)
    if problem or ended.status:
        raise fail(f"{problem or f'verl exited with status {ended.status}'}; log {paths.log}", ended.status or 2)


from executor.command_file import command_file  # noqa: E402
from executor.cpu.assets_command import cpu_assets  # noqa: E402  (typer only at import; the rest lazily)
from executor.reshard.command import check_reshard  # noqa: E402

app.command("check-reshard")(check_reshard)
app.command("cpu-assets")(cpu_assets)
app.command("command-file")(command_file)


@app.callback()
def _root() -> None:
    """Launch verl runs from twin plans."""


def quiet_import_warnings() -> None:
    """Ignore the UserWarnings Megatron core and mbridge print when imported without Apex or Transformer Engine.

    This process imports them only to check patch targets and verl's config; the trainer it starts is a process of
    its own, whose log still shows them (they say which kernels the training falls back to).
    """
    import warnings

    warnings.filterwarnings("ignore", message=r".*(Apex|Transformer Engine).* not installed", category=UserWarning,
                            module=r"(megatron|mbridge)(\.|$)")


def main() -> None:
    """Console-script entry point: user errors become one line on stderr."""
    from twin.clirun import run_app

    quiet_import_warnings()
    run_app(app, "executor")
