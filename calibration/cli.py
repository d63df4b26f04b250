"""The `calibration` command: measurement jobs and log ingestion.

`app` is a plain typer.Typer; further commands (fit, report) register on it with `app.command()`.
Bad input ends with one line on stderr and a non-zero exit, never a traceback.
"""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from calibration.errors import CalibrationError

EXIT_FAILED_POINTS = 1
EXIT_INTERRUPTED = 130

app = typer.Typer(
    name="calibration",
    help="Measure the hardware and ingest training logs for the twin's calibration.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
stdout = Console()
stderr = Console(stderr=True)


class DeviceKind(str, Enum):
    npu = "npu"
    cuda = "cuda"
    cpu = "cpu"


class GridSize(str, Enum):
    small = "small"
    full = "full"


def _warn(message: str) -> None:
    stderr.print(f"warning: {message}", highlight=False, markup=False, soft_wrap=True)


@app.command()
def run(
    jobs: Annotated[list[str], typer.Argument(help="gemm, attention, collectives, copy, decode", show_default=False)],
    output: Annotated[Path, typer.Option("-o", "--output", help="measurements.jsonl to append to")],
    device: Annotated[DeviceKind, typer.Option(help="device to measure")] = DeviceKind.cpu,
    repeats: Annotated[int, typer.Option(min=1, help="timed repeats per point")] = 5,
    warmup: Annotated[int, typer.Option(min=0, help="untimed calls before the repeats")] = 2,
    world: Annotated[int, typer.Option(min=1, help="collectives: ranks to spawn")] = 2,
    grid: Annotated[GridSize, typer.Option(help="small (minutes on a CPU) or full (real hardware)")] = GridSize.small,
    model_config: Annotated[
        Path | None, typer.Option(help="decode: HuggingFace config.json (default: built-in tiny Qwen2)")
    ] = None,
) -> None:
    """Run measurement jobs, appending records; rerunning resumes where an interrupted run stopped."""
    from calibration.devices import device_facts, open_device
    from calibration.facts import host_facts, versions
    from calibration.jobs import load_job
    from calibration.jobs.base import RunContext
    from calibration.run_summary import summary_table
    from calibration.runner import run_jobs

    for name in jobs:
        load_job(name)  # unknown names fail before torch is imported
    if model_config is not None and not model_config.is_file():
        raise CalibrationError(f"model config {model_config} is not a readable file")
    dev = open_device(device.value)
    ctx = RunContext(dev, device_facts(dev), host_facts(), versions(), repeats=repeats, warmup=warmup,
                     world=world, grid=grid.value, model_config=model_config)
    outcome = run_jobs(ctx, jobs, output, stderr)
    for bad in outcome.bad_lines:
        _warn(f"{output}:{bad.line}: malformed line kept in the file but not counted as measured ({bad.reason})")
    stdout.print(summary_table(outcome))
    for tally in outcome.tallies:
        for failure in tally.failed:
            _warn(f"not measured: {failure.point.label()}: {failure.message}")
    if outcome.interrupted:
        stderr.print(f"interrupted: the {outcome.measured} records measured in this run are in {output}; "
                     "run the same command again to resume", highlight=False, soft_wrap=True)
        raise typer.Exit(EXIT_INTERRUPTED)
    if outcome.failed:
        raise typer.Exit(EXIT_FAILED_POINTS)


@app.command()
def ingest(
    logs: Annotated[list[Path], typer.Argument(help="verl metrics .jsonl, console logs or executor run records")],
    output: Annotated[Path, typer.Option("-o", "--output", help="measurements.jsonl to write")],
    plan: Annotated[Path | None, typer.Option(help="plan.json the run executed")] = None,
    append: Annotated[bool, typer.Option(help="add to an existing output (records already there are skipped)")] = False,
) -> None:
    """Turn verl's metrics of a real run into "run" measurement records."""
    from calibration.ingest import ingest as ingest_logs
    from calibration.ingest_summary import print_ingest_summary

    result = ingest_logs(logs, output, plan_path=plan, append=append)
    print_ingest_summary(result, stdout, _warn)
    stdout.print(f"wrote {result.written} records to {output}", highlight=False, soft_wrap=True)


def _case_files(paths: list[Path]) -> list[Path]:
    files: list[Path] = []
    for p in paths:
        if p.is_dir():
            files += sorted(p.glob("*.yaml"))
        elif p.is_file():
            files.append(p)
        else:
            raise CalibrationError(f"cases {p}: no such file or directory")
    return files


@app.command()
def fit(
    output: Annotated[Path, typer.Option("-o", "--output", help="the new profile (never overwritten)")],
    cases: Annotated[list[Path], typer.Option(help="scenario files or directories; those of the profile's cluster "
                                                   "kind whose measured values say `use: fit` are fitted")],
    profile: Annotated[Path | None, typer.Option(help="base profile (default: the kind's reference profile)")] = None,
    kind: Annotated[str, typer.Option(help="cluster kind when no --profile is given")] = "a3",
    new_id: Annotated[str | None, typer.Option("--id", help="id of the new profile (default: output's stem)")] = None,
    outer: Annotated[int, typer.Option(min=1, help="simulation-corrected iterations")] = 3,
) -> None:
    """Fit a calibration profile to measured cases and write it beside the base (never overwriting)."""
    from calibration.fit import CaseFit
    from calibration.fit_report import print_fit
    from twin.fileio import refuse_overwrite
    from twin.profile import load_profile, reference_profile, save_profile
    from twin.scenario import load_scenario

    refuse_overwrite(output, "a calibration profile")
    base = load_profile(profile) if profile else reference_profile(kind)
    files = _case_files(cases)
    loaded = [load_scenario(f) for f in files]
    scenarios = [s for s in loaded if s.cluster.kind == base.cluster_kind and s.measured and s.measured.use == "fit"]
    if not scenarios:
        raise CalibrationError(f"none of the {len(files)} case files is a {base.cluster_kind} scenario marked "
                               "`use: fit`")
    files = [f for f, s in zip(files, loaded, strict=True) if s in scenarios]
    fitter = CaseFit(base, scenarios, progress=lambda msg: stderr.print(msg, highlight=False))
    outcome = fitter.run(new_id or output.stem, outer=outer)
    profile_out = outcome.profile.model_copy(update={"provenance": outcome.profile.provenance.model_copy(
        update={"inputs": [str(f) for f in files]})})
    save_profile(profile_out, output)
    print_fit(stdout, outcome, fitter.names, base)
    stdout.print(f"wrote {output} (id {profile_out.id}, parent {base.id})", highlight=False)


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point: user errors become one line on stderr."""
    from twin.clirun import run_app

    run_app(app, "calibration", (CalibrationError,), argv)
