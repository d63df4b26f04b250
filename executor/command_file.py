"""`executor command-file PLAN.json -o FILE`: the exact launch `executor run` builds, as a shell script to read
or diff before starting (the Hydra overrides one per line, the environment one export per line).

`twin plan -o plan.json` runs this command (the twin never imports the executor) to write the script beside the
plan; it starts it with `--when-told` before its search, so that the imports and the reading of verl's source
run beside the search, and says `write` once the plan is saved. The script is what
`executor run PLAN --workdir WORKDIR` launches on this host: the same build, checked against the installed verl
without importing it (verl imports torch: seconds): patch targets and their parameters found in verl's source
(executor/source_lookup.py), the overrides' keys, their value types read from the config dataclasses' source
and the worker-time constraints (executor/validate.py validate_source). `executor run` adds what needs verl
imported (its dataclass conversion and validate_config, the patch targets imported), preflight and the hardware.
"""

from __future__ import annotations

import re
import shlex
import sys
from pathlib import Path
from typing import Annotated

import typer

from executor.errors import ExecutorError
from executor.options import RunPaths
from executor.spec import LaunchSpec

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def comment_safe(text: str) -> str:
    """`text` with its control characters spelled as escapes, so that a path cannot end a comment line."""
    return _CONTROL.sub(lambda m: repr(m.group())[1:-1], text)


def render(spec: LaunchSpec, plan_path: Path, workdir: Path) -> str:
    """The launch as a bash script: cd to the work directory, export the environment, exec verl."""
    exe, *args = spec.command
    run = comment_safe(shlex.join(["executor", "run", str(plan_path), "--workdir", str(workdir)]))
    lines = [
        "#!/usr/bin/env bash",
        f"# What `{run}` launches on this host, written by",
        "# `executor command-file` (twin plan calls it). executor run also validates the overrides against the",
        "# installed verl and runs its preflight checks before it starts this.",
        "set -euo pipefail",
        f"mkdir -p {shlex.quote(str(workdir))}",
        f"cd {shlex.quote(str(workdir))}",
        *(f"export {key}={shlex.quote(value)}" for key, value in sorted(spec.env.items())),
        f"exec {shlex.quote(exe)} \\",
    ]
    lines += [f"  {shlex.quote(arg)}" + (" \\" if i < len(args) - 1 else "") for i, arg in enumerate(args)]
    return "\n".join(lines) + "\n"


def prepare() -> None:
    """What every plan's command file needs, done before the plan exists: the optimizations' detection (it depends on
    the host only) and verl's config composed and its dataclasses read, kept for this process."""
    from executor.npu_opt.host import HostEnv
    from executor.npu_opt.registry import registry
    from executor.validate import prepare_validation

    try:
        host = HostEnv(from_source=True)
        for opt in registry().values():
            opt.detect(host)
        prepare_validation()
    except Exception:  # a warm-up only: the same checks run, and report, once the plan is written
        pass


def command_file(
    plan_path: Annotated[Path, typer.Argument(metavar="PLAN.json", help="plan written by `twin plan`")],
    output: Annotated[Path, typer.Option("--output", "-o", help="where to write the script")],
    workdir: Annotated[Path | None, typer.Option(help="run directory (default runs/<scenario name>)")] = None,
    model_path: Annotated[str | None, typer.Option(help="HuggingFace checkpoint directory")] = None,
    data_dir: Annotated[Path | None, typer.Option(help="directory with train.parquet and test.parquet")] = None,
    steps: Annotated[int | None, typer.Option(min=1, help="trainer.total_training_steps")] = None,
    when_told: Annotated[bool, typer.Option(
        "--when-told", hidden=True, help="prepare, then write once stdin says 'write' (twin plan starts it before "
                                         "its search); end without writing at end of input")] = False,
) -> None:
    """Write the exact command and environment `executor run PLAN.json` will launch, to read or diff first."""
    from executor.npu_opt.host import HostEnv
    from executor.paths import launch_options
    from executor.preflight import named_path_problems
    from executor.targets import target_for
    from executor.validate import validate_source
    from twin.fileio import write_atomic
    from twin.plan import load_plan

    # before any work: never over the plan, the model or the data it names (the run directory is known below)
    check_output(output, named_inputs(plan_path, model_path, data_dir, workdir))
    if when_told:
        prepare()
        if sys.stdin.readline().strip() != "write":
            return  # the twin wrote no plan (no layout fits, an error, an interrupt): nothing to write
    plan = load_plan(plan_path)
    options = launch_options(plan, plan_path, workdir, model_path, data_dir, steps, stamp=False)
    problems = named_path_problems(plan, options)  # what a real run's preflight would refuse
    if problems:
        raise ExecutorError("; ".join(problems))
    inputs = named_inputs(plan_path, model_path, data_dir, options.workdir)
    check_output(output, inputs)
    spec = target_for(plan.scenario.cluster.kind).build(plan, options, HostEnv(from_source=True))
    validate_source(spec.overrides)  # ValidationFailed: one line naming each problem, nothing written
    write_atomic(output, render(spec, plan_path, options.workdir), f"--output {output}", inputs.values())
    output.chmod(0o755)


def named_inputs(plan_path: Path, model_path: str | None, data_dir: Path | None,
                 workdir: Path | None) -> dict[str, Path]:
    """What the command reads and what the run it writes will write, by what each is (an option not given, or the
    run directory not yet known, left out)."""
    named = {"the plan": plan_path, "--model-path": Path(model_path) if model_path else None, "--data-dir": data_dir}
    outputs = RunPaths(workdir=workdir).outputs() if workdir else {}
    run_files = {f"the run's {name}": path for name, path in outputs.items()}
    return {what: path for what, path in {**named, **run_files}.items() if path is not None}


def check_output(output: Path, inputs: dict[str, Path]) -> None:
    """Refuse an --output that is one of `inputs` (the same file, also through a link) or lies inside one (a file of
    the model or data directory, or of the run's own directories), besides what `check_target` refuses."""
    from twin.fileio import check_target

    label = f"--output {output}"
    check_target(output, label, inputs.values())
    resolved = output.resolve()
    for what, path in inputs.items():
        if resolved.is_relative_to(path.resolve()):
            where = "is" if resolved == path.resolve() else "lies inside"
            raise ExecutorError(f"{label}: {where} {what} {path}; refusing to write there")
