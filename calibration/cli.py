"""The `calibration` command: measurement jobs and log ingestion.

`app` is a plain typer.Typer; further commands (fit, report) register on it with `app.command()`.
Bad input ends with one line on stderr and a non-zero exit, never a traceback.
"""

from __future__ import annotations

import sys
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

from calibration.errors import CalibrationError

if TYPE_CHECKING:
    from calibration.crossval import CrossValidated
    from calibration.measurements import LoadedMeasurements
    from twin.profile import Profile
    from twin.scenario import Scenario

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
    jobs: Annotated[list[str], typer.Argument(help="gemm, attention, collectives, copy, decode, train, overhead, "
                                                   "page_touch", show_default=False)],
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
    from calibration.measurements import appendable
    from calibration.run_summary import summary_table
    from calibration.runner import run_jobs
    from twin.fileio import check_target

    check_target(output, f"--output {output}", [model_config])
    for name in jobs:
        load_job(name)  # unknown names fail before torch is imported
    if model_config is not None and not model_config.is_file():
        raise CalibrationError(f"model config {model_config} is not a readable file")
    done = appendable(output, f"--output {output}").keys()  # before torch: a file of anything else is refused
    dev = open_device(device.value)
    ctx = RunContext(dev, device_facts(dev), host_facts(), versions(), repeats=repeats, warmup=warmup,
                     world=world, grid=grid.value, model_config=model_config)
    outcome = run_jobs(ctx, jobs, output, stderr, done)
    stdout.print(summary_table(outcome))
    for tally in outcome.tallies:
        for failure in tally.failed:
            _warn(f"not measured: {failure.point.label()}: {failure.message}")
    if outcome.interrupted:
        stderr.print(f"interrupted: the {outcome.measured} records measured in this run are in {output}; "
                     "run the same command again to resume", highlight=False, soft_wrap=True)
        sys.exit(EXIT_INTERRUPTED)  # past typer's own Ctrl-C handling: this line is the whole message
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
        elif p.exists():  # a device, FIFO or socket: nothing a scenario is read from
            raise CalibrationError(f"cases {p}: not a regular file or a directory")
        else:
            raise CalibrationError(f"cases {p}: no such file or directory")
    return files


@app.command()
def fit(
    measurements: Annotated[list[Path] | None, typer.Argument(help="measurements.jsonl files of `calibration run` "
                                                                   "(job records are fitted; run records are not)")]
    = None,
    output: Annotated[Path, typer.Option("-o", "--output", help="the new profile (never overwritten)")] = Path(
        "profile.yaml"),
    cases: Annotated[list[Path] | None, typer.Option(help="scenario files or directories; those of the profile's "
                                                          "cluster kind whose measured values say `use: fit`")] = None,
    profile: Annotated[Path | None, typer.Option(help="base profile (default: the kind's reference profile)")] = None,
    kind: Annotated[str, typer.Option(help="cluster kind when no --profile is given")] = "a3",
    dtype: Annotated[str | None, typer.Option(help="dtype of the job points to fit (default: fp32 on cpu, "
                                                   "else bf16)")] = None,
    model_config: Annotated[Path | None, typer.Option(help="the model config the decode/train jobs ran "
                                                           "(default: their built-in tiny model)")] = None,
    new_id: Annotated[str | None, typer.Option("--id", help="id of the new profile (default: output's stem)")] = None,
    outer: Annotated[int, typer.Option(min=1, help="simulation-corrected iterations of a case fit")] = 3,
    free: Annotated[str | None, typer.Option(help="case fit: comma-separated parameters to free (refused when the "
                                                  "data cannot identify them); default: the largest set it can")]
    = None,
    accept_bound_hits: Annotated[str | None, typer.Option(help="comma-separated freed parameters allowed to end "
                                                               "on a bound (a model error, recorded)")] = None,
) -> None:
    """Fit a calibration profile to job measurements and/or measured cases; write it beside the base
    (never overwriting). A case fit frees only what the cases identify (DESIGN section 7)."""
    from calibration.fit_jobs import JobFit
    from calibration.fit_report import print_job_fit
    from calibration.measurements import JobMeasurement
    from twin.fileio import check_target, refuse_overwrite
    from twin.profile import load_profile, reference_profile, save_profile, serves_kind
    from twin.scenario import load_scenario

    if not measurements and not cases:
        raise CalibrationError("give measurements.jsonl files, --cases, or both")
    refuse_overwrite(output, "a calibration profile")
    check_target(output, f"--output {output}", [*(measurements or []), profile, model_config, *(cases or [])])
    base = load_profile(profile) if profile else reference_profile(kind)
    _check_fit_options(base, dtype, bool(cases), free, accept_bound_hits)
    result = base
    new_id = new_id or output.stem
    inputs = [str(p) for p in measurements or []]
    if measurements:
        records = [r for p in measurements for r in _loaded(p).records if isinstance(r, JobMeasurement)]
        if not records:
            raise CalibrationError("the measurement files hold no job records (`calibration run` writes them)")
        dtype = dtype or ("fp32" if base.cluster_kind == "cpu" else "bf16")
        try:
            outcome = JobFit(base, records, dtype, model_config).run(new_id, inputs)
        except ValueError as exc:
            raise CalibrationError(str(exc)) from None
        print_job_fit(stdout, outcome, base)
        result = outcome.profile
    if cases:
        files = _case_files(cases)
        loaded = [load_scenario(f) for f in files]
        chosen = [(f, s) for f, s in zip(files, loaded, strict=True)
                  if serves_kind(base, s.cluster.kind) and s.measured and s.measured.use == "fit"]
        if not chosen:
            raise CalibrationError(f"none of the {len(files)} case files is a {base.cluster_kind} scenario marked "
                                   "`use: fit`")
        result = _case_fit(result, [s for _, s in chosen], new_id, outer, free, accept_bound_hits)
        inputs += [str(f) for f, _ in chosen]
        result = result.model_copy(update={"parent": base.id})
    result = result.model_copy(update={"provenance": result.provenance.model_copy(update={"inputs": inputs})})
    save_profile(result, output)
    stdout.print(f"wrote {output} (id {result.id}, parent {base.id})", highlight=False)


def _names(text: str | None) -> list[str]:
    return [n.strip() for n in (text or "").split(",") if n.strip()]


def _check_fit_options(base: Profile, dtype: str | None, case_fit: bool, free: str | None,
                       accept: str | None) -> None:
    """Refuse, before any fitting, an unknown --dtype, and --free or --accept-bound-hits names that are not
    parameters a fit of `base` may free (or either option without the case fit it applies to)."""
    from calibration.devices import DTYPE_NAMES
    from calibration.fit import candidates

    if dtype is not None and dtype not in DTYPE_NAMES:
        raise CalibrationError(f"--dtype {dtype!r} is not one of {', '.join(DTYPE_NAMES)}")
    allowed = candidates(base)
    for option, names in (("--free", _names(free)), ("--accept-bound-hits", _names(accept))):
        unknown = [n for n in names if n not in allowed]
        if unknown:
            raise CalibrationError(f"{option}: {unknown[0]!r} is not a parameter a fit of profile {base.id} may "
                                   f"free; choose from {', '.join(allowed)}")
        if names and not case_fit:
            raise CalibrationError(f"{option} applies to a case fit: give --cases")


def _case_fit(base: Profile, cases: list[Scenario], new_id: str, outer: int, free: str | None,
              accept: str | None) -> Profile:
    """The identifiability report, the fit of the identified (or named) parameters, and its bound check."""
    from calibration.fit import CaseFit, candidates
    from calibration.fit_report import print_fit, print_identifiability

    try:
        fitter = CaseFit(base, cases, progress=lambda msg: stderr.print(msg, highlight=False))
        allp = fitter.identify(candidates(base))
        print_identifiability(stdout, allp, "all bounded parameters")
        names = _names(free) or allp.select()
        if not names:
            raise CalibrationError("the cases identify no parameter: nothing to fit")
        chosen = allp.subset(names) if set(names) <= set(allp.names) else fitter.identify(names)
        print_identifiability(stdout, chosen, "freed parameters")
        outcome = fitter.run(new_id, chosen, outer=outer)
    except ValueError as exc:
        raise CalibrationError(str(exc)) from None
    print_fit(stdout, outcome, chosen.names, base)
    accepted = _names(accept)
    refused = [n for n in outcome.bound_hits if n not in accepted]
    if refused:
        raise CalibrationError(f"fitted values on a bound (a model error): {', '.join(refused)}; the profile is not "
                               "written (name them in --accept-bound-hits to write it anyway)")
    prov = outcome.profile.provenance
    assert prov.fit is not None
    record = prov.fit.model_copy(update={"bound_hits_accepted": outcome.bound_hits})
    return outcome.profile.model_copy(update={"provenance": prov.model_copy(update={"fit": record})})


def _loaded(path: Path) -> LoadedMeasurements:
    """A measurements file; its malformed lines are summed up in one warning, or one error when no line is a
    record (a file of something else)."""
    from calibration.measurements import bad_lines_text, load_measurements

    if not path.exists():
        raise CalibrationError(f"measurements {path}: no such file")
    loaded = load_measurements(path)
    if loaded.bad_lines and not loaded.records:
        raise CalibrationError(f"measurements {path}: holds no records: {bad_lines_text(loaded.bad_lines)}")
    if loaded.bad_lines:
        _warn(f"measurements {path}: {bad_lines_text(loaded.bad_lines)}; they were skipped")
    return loaded


class CaseUse(str, Enum):
    judge = "judge"
    fit = "fit"


SkipSteps = Annotated[int, typer.Option(min=0, help="leading steps of the run left out of the means (the first "
                                                    "carries the engine start-up)")]


def _run_case(runs: Path, scenario: Path, skip_steps: int, use: CaseUse) -> Scenario:
    """The scenario, checked as `twin simulate` checks it, with the measured values of the verl run in `runs`;
    warns of unreadable lines."""
    from calibration.runs import checked_scenario, load_run, run_case

    sc = checked_scenario(scenario)
    run = load_run(runs, skip_steps, use.value)
    case = run_case(sc, run)
    if run.bad_lines:
        _warn(f"{runs}: {run.bad_lines} lines are not measurement records and were skipped")
    return case


@app.command()
def case(
    runs: Annotated[Path, typer.Argument(help="measurements.jsonl of one verl run (from `calibration ingest`)")],
    scenario: Annotated[Path, typer.Option(help="the scenario the run executed")],
    output: Annotated[Path, typer.Option("-o", "--output", help="the new scenario file (never overwritten)")],
    skip_steps: SkipSteps = 1,
    use: Annotated[CaseUse, typer.Option(help="judge: the case only measures a profile's error; fit: a fit may "
                                              "use it")] = CaseUse.judge,
) -> None:
    """Write the scenario with the run's steady-state stage times, step time and throughput as `measured`."""
    from calibration.runs import write_case
    from twin.fileio import check_target, refuse_overwrite

    refuse_overwrite(output, "a scenario file")
    check_target(output, f"--output {output}", [runs, scenario])
    sc = _run_case(runs, scenario, skip_steps, use)
    write_case(sc, output)
    assert sc.measured is not None
    stdout.print(f"wrote {output}: {sc.measured.source}", highlight=False, soft_wrap=True)


@app.command()
def report(
    profile: Annotated[Path, typer.Option(help="the profile to judge")],
    cases: Annotated[list[Path] | None, typer.Option(help="scenario files or directories (default: ./scenarios, "
                                                          "unless --runs is given)")] = None,
    runs: Annotated[Path | None, typer.Option(help="measurements.jsonl of one verl run (from `calibration "
                                                   "ingest`), judged as a case; needs --scenario")] = None,
    scenario: Annotated[Path | None, typer.Option(help="the scenario the --runs run executed")] = None,
    skip_steps: SkipSteps = 1,
    plot: Annotated[Path | None, typer.Option(help="write a PNG of predicted vs measured")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the report as one JSON object")] = False,
    cv: Annotated[bool, typer.Option("--cv", help="leave-one-case-out error: refit without each fitting case "
                                                  "and predict it (minutes)")] = False,
    base: Annotated[Path | None, typer.Option(help="cross-validation: the profile the refits start from "
                                                   "(default: the kind's reference profile, the fit's parent)")]
    = None,
    write_cv: Annotated[Path | None, typer.Option(help="write the profile with its cross-validated error here "
                                                       "(never overwritten)")] = None,
    cv_outer: Annotated[int, typer.Option(min=1, help="simulation-corrected iterations of each refit")] = 1,
) -> None:
    """Predicted vs measured for every measured case of the profile's cluster kind, fitted and held out apart,
    and the leave-one-case-out error of a case-fitted profile."""
    import sys

    from calibration.report import build_report
    from calibration.report_print import print_report
    from twin.clirun import json_text, make_console
    from twin.fileio import check_target, refuse_overwrite
    from twin.profile import load_profile, save_profile
    from twin.scenario import load_scenario

    if (runs is None) != (scenario is None):
        raise CalibrationError("--runs and --scenario go together: the run's records and the scenario it executed")
    prof = load_profile(profile)
    files = _case_files(cases if cases is not None else [] if runs else [Path("scenarios")])
    if plot is not None:
        check_target(plot, f"--plot {plot}", [profile, *files, *(cases or []), runs, scenario])
    loaded = [load_scenario(f) for f in files]
    if runs is not None and scenario is not None:
        loaded.append(_run_case(runs, scenario, skip_steps, CaseUse.judge))
    result = build_report(prof, loaded)
    if write_cv is not None:
        refuse_overwrite(write_cv, "a calibration profile")
    crossed = None
    if cv or write_cv is not None:
        crossed = _cross_validate(prof, base, loaded, cv_outer)
        result.cross_validated = crossed
    if plot is not None:
        from calibration.report_plot import plot_report

        plot_report(result, plot, f"--plot {plot}", [profile, *files, runs, scenario])
    if as_json:
        sys.stdout.write(json_text(result.to_json()) + "\n")
    else:
        out = make_console()
        print_report(out, result)
        if runs is not None:
            out.print(f"measured values of {loaded[-1].name}: {loaded[-1].measured.source}", highlight=False,
                      soft_wrap=True)
        if plot is not None:
            out.print(f"wrote {plot}", highlight=False, soft_wrap=True)
    if write_cv is not None and crossed is not None:
        save_profile(prof.model_copy(update={"cross_validation": crossed.result}), write_cv)
        stderr.print(f"wrote {write_cv} (profile {prof.id} with its cross-validated error)", highlight=False,
                     soft_wrap=True)


def _cross_validate(prof: Profile, base: Path | None, cases: list[Scenario], outer: int) -> CrossValidated:
    from calibration.crossval import leave_one_out
    from twin.profile import EMBEDDED, load_profile, reference_profile, serves_kind

    kind = next((k for k in EMBEDDED if serves_kind(prof, k)), prof.cluster_kind)
    start = load_profile(base) if base is not None else reference_profile(kind)
    if base is None and start.id != prof.parent:
        raise CalibrationError(f"profile {prof.id} was fitted from {prof.parent}, not the reference {start.id}: "
                               "give the profile it started from with --base")
    return leave_one_out(prof, start, cases, outer, progress=lambda msg: stderr.print(msg, highlight=False))


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point: user errors become one line on stderr."""
    from twin.clirun import run_app

    run_app(app, "calibration", (CalibrationError,), argv)
