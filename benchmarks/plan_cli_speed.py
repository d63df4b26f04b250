"""Wall time of `twin plan --model deepseek-r1 --cards 128` as a user runs it, split into its parts.

Run: python benchmarks/plan_cli_speed.py [--repeats 3] [--model deepseek-r1] [--cards 128]
Each repeat runs the real command twice in a subprocess, in a fresh directory (it writes plan.json and, through
`executor command-file`, plan.command.sh). The first run, as a user runs it, gives the total. The second splits
it (`split_run`: its own total, under -X importtime and the wrapper):
- imports: the `twin` process's imports, from `python -X importtime` (the sum of the top-level modules'
  cumulative times: the lazy imports inside the command included);
- search: the planner's own clock, `search.wall_s` in the plan it wrote;
- command file: how long the twin waited for `executor command-file` once the plan was saved (the twin starts
  it before its search, so that its interpreter start, imports and reading of verl's source run beside the
  search), timed by a wrapper put first on PATH; `executor_in_all` is that process's whole life;
- the rest (split_run less those): interpreter start, the simulation's printing, writing the plan;
- cpu_twin, cpu_executor: CPU seconds (user + system) of the twin process (the first run's, less the
  executor's) and of the executor process: on an idle machine with two cores the total is about cpu_twin plus
  the command file's wait, whatever other processes do to the wall times.
Figures, not a test: the machine's load average is printed beside them, since other processes slow them.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
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


def _cpu() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def _timed(cmd: list[str], cwd: Path, env: dict[str, str] | None = None) -> tuple[float, float,
                                                                                  subprocess.CompletedProcess]:
    """(wall s, CPU s of the command and the processes it waited for, its result)."""
    start, cpu = time.perf_counter(), _cpu()
    done = subprocess.run(cmd, cwd=cwd, env={**_env(), **(env or {})}, capture_output=True, text=True, timeout=600)
    wall = time.perf_counter() - start
    if done.returncode:
        sys.exit(f"{' '.join(cmd)} exited {done.returncode}: {done.stderr.strip()[-2000:]}")
    return wall, _cpu() - cpu, done


def import_seconds(importtime_stderr: str) -> float:
    """Sum of the top-level modules' cumulative import times in `python -X importtime` output."""
    return sum(int(m.group(1)) for line in importtime_stderr.splitlines() if (m := _IMPORT.match(line))) / 1e6


WRAPPER = """#!{python}
import resource, subprocess, sys, time
start = time.perf_counter()
told = "--when-told" in sys.argv
child = subprocess.Popen({real!r} + sys.argv[1:], stdin=subprocess.PIPE if told else None)
if told:  # twin plan starts it before its search and says 'write' once the plan is saved
    line = sys.stdin.buffer.readline()
    start_wait = time.perf_counter()
    child.stdin.write(line)
    child.stdin.close()
else:
    start_wait = start
code = child.wait()
end = time.perf_counter()
used = resource.getrusage(resource.RUSAGE_CHILDREN)
with open({log!r}, "a") as log:
    log.write(f"{{end - start_wait}} {{end - start}} {{used.ru_utime + used.ru_stime}}\\n")
sys.exit(code)
"""


def _timing_wrapper(bin_dir: Path, log: Path) -> None:
    """An `executor` first on PATH that runs the real one and appends to `log` how long it ran after the plan was
    saved (what the twin waits for) and in all."""
    wrapper = bin_dir / "executor"
    wrapper.write_text(WRAPPER.format(python=sys.executable, real=_command("executor"), log=str(log)))
    wrapper.chmod(0o755)


def one(args: list[str], work: Path) -> dict[str, float]:
    """One `twin plan ARGS` and its parts, in seconds."""
    total, total_cpu, done = _timed([*_command("twin"), "plan", *args, "-o", "plan.json"], work)
    if not (work / "plan.command.sh").is_file():
        sys.exit(f"twin plan wrote no command file: {done.stdout.strip()[-500:]}")
    (work / "bin").mkdir()
    log = work / "command_file_s.txt"
    _timing_wrapper(work / "bin", log)
    env = {"PATH": os.pathsep.join([str(work / "bin"), os.environ.get("PATH", "")])}
    traced_cmd = [sys.executable, "-X", "importtime", "-m", "twin", "plan", *args, "-o", "traced.json"]
    split, _, traced = _timed(traced_cmd, work, env)
    if not (work / "traced.command.sh").is_file():
        sys.exit(f"twin plan wrote no command file: {traced.stdout.strip()[-500:]}")
    search = json.loads((work / "traced.json").read_text())["search"]["wall_s"]
    waited, beside, executor_cpu = map(float, log.read_text().split()[-3:])
    imports = import_seconds(traced.stderr)
    return {"total": total, "split_run": split, "imports": imports, "search": search, "command_file": waited,
            "rest": split - imports - search - waited, "executor_in_all": beside,
            "cpu_twin": total_cpu - executor_cpu, "cpu_executor": executor_cpu}


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
    for part in ("total", "split_run", "imports", "search", "command_file", "rest", "executor_in_all", "cpu_twin",
                 "cpu_executor"):
        values = [r[part] for r in runs]
        print(f"{part:<14} {statistics.median(values):>9.2f} {min(values):>7.2f} {max(values):>7.2f}")
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
