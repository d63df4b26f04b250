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

import shlex
import sys
from pathlib import Path
from typing import Annotated

import typer

from executor.spec import LaunchSpec


def render(spec: LaunchSpec, plan_path: Path, workdir: Path) -> str:
    """The launch as a bash script: cd to the work directory, export the environment, exec verl."""
    exe, *args = spec.command
    lines = [
        "#!/usr/bin/env bash",
        f"# What `executor run {plan_path} --workdir {workdir}` launches on this host, written by",
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
    from executor.options import LaunchOptions
    from executor.targets import target_for
    from executor.validate import validate_source
    from twin.fileio import check_target, write_atomic
    from twin.plan import load_plan

    check_target(output, f"--output {output}", [plan_path])  # before any work: never over the plan it reads
    if when_told:
        prepare()
        if sys.stdin.readline().strip() != "write":
            return  # the twin wrote no plan (no layout fits, an error, an interrupt): nothing to write
    plan = load_plan(plan_path)
    workdir = (workdir or Path("runs") / plan.scenario.name).resolve()
    options = LaunchOptions(workdir=workdir, model_path=model_path, data_dir=data_dir.resolve() if data_dir else None,
                            steps=steps)
    spec = target_for(plan.scenario.cluster.kind).build(plan, options, HostEnv(from_source=True))
    validate_source(spec.overrides)  # ValidationFailed: one line naming each problem, nothing written
    write_atomic(output, render(spec, plan_path, workdir), f"--output {output}", [plan_path])
    output.chmod(0o755)
