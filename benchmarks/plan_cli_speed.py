"""Wall time of `twin plan --model deepseek-r1 --cards 128` as a user runs it, split into its parts.

Run: python benchmarks/plan_cli_speed.py [--repeats 3] [--model deepseek-r1] [--cards 128]
Each repeat runs the real command twice in a subprocess, in a fresh directory (it writes plan.json and, through
`executor command-file`, plan.command.sh). The first run, as a user runs it, gives the total. The second splits
it (`split_run`: its own total, under -X importtime and the wrapper):
- imports: the `twin` process's imports, from `python -X importtime` (the sum of the top-level modules'
  cumulative times: the lazy imports inside the command included);
- search: the planner's own clock, `search.wall_s` in the plan it wrote;
- command file: how long the twin waited for `executor command-file` (its interpreter start, imports and checks
  against the installed verl), timed by a wrapper put first on PATH;
- the rest (split_run less those): interpreter start, the simulation's printing, writing the plan.
Figures, not a test: the machine's load average is printed beside them, since other processes slow them.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_IMPORT = re.compile(r"import time:\s+\d+ \|\s+(\d+) \| (\S.*)$")  # a top-level module: no indent before its name


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}


def _command(tool: str) -> list[str]:
    """The console script as a user runs it (beside this interpreter), else `python -m`."""
    script = Path(sys.executable).with_name(tool)
    return [str(script)] if script.exists() else [sys.executable, "-m", tool]


def _timed(cmd: list[str], cwd: Path, env: dict[str, str] | None = None) -> tuple[float, subprocess.CompletedProcess]:
    start = time.perf_counter()
    done = subprocess.run(cmd, cwd=cwd, env={**_env(), **(env or {})}, capture_output=True, text=True, timeout=600)
    wall = time.perf_counter() - start
    if done.returncode:
        sys.exit(f"{' '.join(cmd)} exited {done.returncode}: {done.stderr.strip()[-2000:]}")
    return wall, done


def import_seconds(importtime_stderr: str) -> float:
    """Sum of the top-level modules' cumulative import times in `python -X importtime` output."""
    return sum(int(m.group(1)) for line in importtime_stderr.splitlines() if (m := _IMPORT.match(line))) / 1e6


def _timing_wrapper(bin_dir: Path, log: Path) -> None:
    """An `executor` first on PATH that runs the real one and appends its wall time to `log`."""
    real = _command("executor")
    wrapper = bin_dir / "executor"
    wrapper.write_text(f"#!{sys.executable}\nimport subprocess, sys, time\nstart = time.perf_counter()\n"
                       f"code = subprocess.call({real!r} + sys.argv[1:])\n"
                       f"open({str(log)!r}, 'a').write(f'{{time.perf_counter() - start}}\\n')\nsys.exit(code)\n")
    wrapper.chmod(0o755)


def one(args: list[str], work: Path) -> dict[str, float]:
    """One `twin plan ARGS` and its parts, in seconds."""
    total, done = _timed([*_command("twin"), "plan", *args, "-o", "plan.json"], work)
    if not (work / "plan.command.sh").is_file():
        sys.exit(f"twin plan wrote no command file: {done.stdout.strip()[-500:]}")
    (work / "bin").mkdir()
    log = work / "command_file_s.txt"
    _timing_wrapper(work / "bin", log)
    env = {"PATH": os.pathsep.join([str(work / "bin"), os.environ.get("PATH", "")])}
    split, traced = _timed([sys.executable, "-X", "importtime", "-m", "twin", "plan", *args, "-o", "traced.json"], work,
                       env)
    if not (work / "traced.command.sh").is_file():
        sys.exit(f"twin plan wrote no command file: {traced.stdout.strip()[-500:]}")
    search = json.loads((work / "traced.json").read_text())["search"]["wall_s"]
    imports, command_file = import_seconds(traced.stderr), float(log.read_text().split()[-1])
    return {"total": total, "split_run": split, "imports": imports, "search": search, "command_file": command_file,
            "rest": split - imports - search - command_file}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="deepseek-r1")
    parser.add_argument("--cards", default="128")
    parser.add_argument("--repeats", type=int, default=3)
    opts = parser.parse_args()
    args = ["--model", opts.model, "--cards", opts.cards]
    print(f"twin plan {' '.join(args)}  ({opts.repeats} runs; load average before: "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}; {os.cpu_count()} CPUs)")
    runs = []
    for _ in range(opts.repeats):
        work = Path(tempfile.mkdtemp(prefix="plan-cli-speed-"))
        try:
            runs.append(one(args, work))
        finally:
            shutil.rmtree(work, ignore_errors=True)
    print(f"{'part':<14} {'median s':>9} {'min s':>7} {'max s':>7}")
    for part in ("total", "split_run", "imports", "search", "command_file", "rest"):
        values = [r[part] for r in runs]
        print(f"{part:<14} {statistics.median(values):>9.2f} {min(values):>7.2f} {max(values):>7.2f}")
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
