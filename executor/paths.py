"""The paths `executor run` and `executor command-file` take besides the plan, checked by the same functions.

`launch_options` checks the run directory (as given, else under runs/) and refuses a path verl or Ray would
read differently from what it is: a '$' before '{' or a name (verl's main_ppo resolves its config, where
'${' is an interpolation, and Ray expands '$NAME' in the workers' environment, which holds the run
directory's paths: ray/_private/utils.py update_envs). Every other character reaches verl quoted
(executor/verl_config/overrides.py). The model and data directories' contents are checked by
executor/preflight.py `named_path_problems`.
"""

from __future__ import annotations

import re
from datetime import datetime
from pathlib import Path

from executor.errors import ExecutorError
from executor.options import LaunchOptions
from executor.verl_config.overrides import INTERPOLATION
from twin.plan import Plan

_INTERPOLATION = re.compile(re.escape(INTERPOLATION))  # what verl's config would resolve in a Hydra value
_EXPANDED = re.compile(r"\$[A-Za-z0-9_{]")  # also what Ray's os.path.expandvars expands in the workers' environment


def refuse_expanded(path: Path | str, label: str, env: bool = False) -> None:
    """Refuse `path` (as given and resolved) when it holds '${', or with `env` (the path also goes to the workers'
    environment) any '$' before a name: verl or Ray would expand it, and no quoting keeps it literal."""
    pattern = _EXPANDED if env else _INTERPOLATION
    for text in dict.fromkeys((str(path), str(Path(path).resolve()))):
        found = pattern.search(text)
        if found:
            where = "" if text == str(path) else f" (as {text})"
            raise ExecutorError(f"{label}{where}: holds {found.group()!r}, which verl's config or Ray would expand as "
                                "a variable; choose a path without '$'")


def run_dir(given: Path | None, name: str, plan_path: Path, stamp: bool = True) -> Path:
    """The run directory, resolved: as given (a directory or a new path, never a file or device), else
    runs/<name> (`stamp`: with the date and time, as `executor run` makes it), which must stay inside runs/."""
    from twin.fileio import check_target

    if given is not None:
        check_target(given, f"--workdir {given}", [plan_path], directory=True)
        refuse_expanded(given, f"--workdir {given}", env=True)
        return given.resolve()
    runs = Path("runs").resolve()
    path = (runs / (f"{name}-{datetime.now().strftime('%Y%m%d-%H%M%S')}" if stamp else name)).resolve()
    if path.parent != runs:
        raise ExecutorError(f"scenario name {name!r} would put the run directory outside runs/ ({path})")
    refuse_expanded(path, f"run directory {path}", env=True)
    return path


def launch_options(plan: Plan, plan_path: Path, workdir: Path | None, model_path: str | None,
                   data_dir: Path | None, steps: int | None, stamp: bool = True) -> LaunchOptions:
    """The options of `executor run` and `executor command-file`, the run directory checked (`run_dir`) and every
    named path refused where verl or Ray would expand part of it."""
    for path, option in ((model_path, "--model-path"), (data_dir, "--data-dir")):
        if path is not None:
            refuse_expanded(path, f"{option} {path}")
    return LaunchOptions(workdir=run_dir(workdir, plan.scenario.name, plan_path, stamp), model_path=model_path,
                         data_dir=data_dir.resolve() if data_dir else None, steps=steps)
