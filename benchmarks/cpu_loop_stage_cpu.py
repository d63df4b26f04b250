"""Where the CPU loop's stage time goes: CPU seconds of every process of a real `executor run`, per verl stage.

Runs `python -m executor run PLAN ...` (the CPU loop of the README) and meanwhile samples, every `--interval`
seconds, the CPU time (user + system, /proc via psutil) and process title of every process the run started,
and the host's busy time (/proc/stat, all cores). verl's trainer times each stage with its `_timer`
(verl/utils/profiler/performance.py); a `sitecustomize` put first on the run's PYTHONPATH wraps it so that every
process also appends the stage's wall-clock start and end to a marks file. Each stage window of each step then
gets the CPU seconds each class of process used in it (linear between samples), the host's busy seconds, and
what other programs on the host used (host busy minus the run's processes minus this sampler).

    python benchmarks/cpu_loop_stage_cpu.py plan.json --model-path assets/model --data-dir assets/data --steps 2

The same file marks every Python garbage collection of 5 ms or more in every process (`gc.callbacks`), with the
objects the collector tracks after it (what a full collection walks). Prints one
table per step (stage, wall s, CPU s per class), then for the trainer ranks, the driver and TransferQueue the system
CPU seconds, minor page faults and involuntary context switches in each stage, the GC pauses per class, and with
`--json FILE` writes the raw windows.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path

MARKS_ENV = "CPU_STAGE_MARKS_FILE"
STAGES = ("gen", "old_log_prob", "adv", "update_actor", "update_weights", "step")
# process classes by title (Ray sets `ray::Class.method` while an actor runs a task; vLLM names its processes)
CLASSES = (
    ("vllm_tp_worker", ("VLLM::Worker",)),
    ("vllm_engine", ("VLLM::EngineCore",)),
    ("trainer_rank", ("ray::WorkerDict", "ray::ActorRolloutRefWorker")),
    ("driver", ("ray::TaskRunner",)),
    ("agent_loop", ("ray::AgentLoopWorker",)),
    ("reward_loop", ("ray::RewardLoopWorker",)),
    ("rollout_server", ("ray::vLLMHttpServer", "ray::vLLMServer")),
    ("transfer_queue", ("ray::TransferQueue", "ray::SimpleStorage", "ray::Storage")),
    ("ray_system", ("raylet", "gcs_server", "ray::IDLE", "ray-dashboard", "dashboard", "log_monitor", "ray::Job",
                    "ray::_")),
)

SITECUSTOMIZE = '''
"""Appends verl's stage windows to $@ENV@ (written by benchmarks/cpu_loop_stage_cpu.py)."""
import importlib.abc
import importlib.machinery
import json
import os
import sys
import time

_TARGET = "verl.utils.profiler.performance"
_GC_MIN_S = 0.005  # Python garbage collections at least this long are marked
_gc_started = []


def _append(mark):
    with open(os.environ["@ENV@"], "a") as f:
        f.write(json.dumps({**mark, "pid": os.getpid()}) + "\\n")


def _wrap(module):
    original = module._timer

    def _timer(name, timing_raw):
        start = time.time()
        try:
            yield from original(name, timing_raw)
        finally:
            _append({"name": name, "start": start, "end": time.time()})

    module._timer = _timer


def _gc_callback(phase, info):
    if phase == "start":
        _gc_started[:] = [time.time()]
    elif _gc_started:
        start, end = _gc_started.pop(), time.time()
        if end - start >= _GC_MIN_S:
            with open("/proc/self/cmdline", "rb") as f:  # Ray's process title, as the sampler would read it
                title = f.read().replace(b"\\0", b" ").decode(errors="replace").strip()[:120]
            import gc  # the objects the collector tracks after this pause: what a full collection walks
            _append({"name": "gc", "generation": info["generation"], "start": start, "end": end, "title": title,
                     "tracked": len(gc.get_objects())})


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != _TARGET:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            _wrap(module)

        spec.loader.exec_module = exec_module
        return spec


if os.environ.get("@ENV@"):
    import gc

    sys.meta_path.insert(0, _Finder())
    gc.callbacks.append(_gc_callback)
'''.replace("@ENV@", MARKS_ENV)


def classify(title: str) -> str:
    for cls, prefixes in CLASSES:
        if any(title.startswith(p) or f" {p}" in title for p in prefixes):
            return cls
    return "other_run"


def _title(proc) -> str:
    import psutil

    try:
        cmd = proc.cmdline()
        return (" ".join(cmd) if cmd else proc.name())[:120]
    except psutil.Error:
        return "?"


def _host_busy() -> float:
    """Busy seconds of all cores since boot (/proc/stat: user nice system irq softirq steal)."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    ticks = [int(x) for x in fields]
    busy = ticks[0] + ticks[1] + ticks[2] + ticks[5] + ticks[6] + ticks[7]
    return busy / os.sysconf("SC_CLK_TCK")


KERNEL_METRICS = ("system_s", "minor_faults", "involuntary_switches")
KERNEL_CLASSES = ("trainer_rank", "driver", "transfer_queue")  # printed per stage (the JSON has every class)


def sample(root_pid: int, interval: float, out: list, done: threading.Event) -> None:
    """Append (time, host busy s, own cpu s, {pid: (title, cpu s, system s, minor faults, involuntary switches)})
    every `interval` until `done`."""
    import psutil

    from calibration.timing import kernel_counters

    root = psutil.Process(root_pid)
    me = psutil.Process()
    procs: dict[int, psutil.Process] = {}
    while not done.is_set():
        try:
            for c in root.children(recursive=True):
                procs.setdefault(c.pid, c)
        except psutil.Error:
            pass
        row = {}
        for pid, p in list(procs.items()):
            try:
                t = p.cpu_times()
                row[pid] = (_title(p), t.user + t.system, *kernel_counters(p))
            except (psutil.Error, OSError):
                procs.pop(pid)
        own = me.cpu_times()
        out.append((time.time(), _host_busy(), own.user + own.system, row))
        done.wait(interval)


def _at(samples: list, t: float, value) -> float:
    """A cumulative quantity `value(sample)` at time `t`, linear between the samples around it."""
    prev = None
    for s in samples:
        if s[0] >= t:
            if prev is None:
                return value(s)
            a, b = value(prev), value(s)
            return a + (b - a) * (t - prev[0]) / max(s[0] - prev[0], 1e-9)
        prev = s
    return value(samples[-1])


def window(samples: list, start: float, end: float) -> dict[str, float]:
    """CPU seconds per process class in [start, end], the host's busy seconds, the sampler's, and the rest; and each
    class's kernel counters (`KERNEL_METRICS`) under `_kernel`."""
    import numpy as np

    pids = {pid for s in samples for pid in s[3]}
    cpu: dict[str, float] = {}
    kernel: dict[str, dict[str, float]] = {}
    titles: dict[str, set] = {}
    for pid in pids:
        seen = [s for s in samples if pid in s[3]]
        if not seen:
            continue
        first, last = seen[0], seen[-1]

        def cum(at, pid=pid, first=first, last=last):
            """The pid's cumulative figures (CPU s, then `KERNEL_METRICS`) at sample `at`, held outside its life."""
            row = at[3].get(pid) or (first if at[0] < first[0] else last)[3][pid]
            return np.array(row[1:], dtype=float)

        used = _at(samples, end, cum) - _at(samples, start, cum)
        title = next((s[3][pid][0] for s in samples if pid in s[3] and start <= s[0] <= end), first[3][pid][0])
        cls = classify(title)
        seconds = float(used[0])
        cpu[cls] = cpu.get(cls, 0.0) + seconds
        counters = kernel.setdefault(cls, dict.fromkeys(KERNEL_METRICS, 0.0))
        for metric, amount in zip(KERNEL_METRICS, used[1:], strict=True):
            counters[metric] += float(amount)
        if seconds > 0.005:
            titles.setdefault(cls, set()).add(title.split(" ")[0][:60])
    host = _at(samples, end, lambda s: s[1]) - _at(samples, start, lambda s: s[1])
    own = _at(samples, end, lambda s: s[2]) - _at(samples, start, lambda s: s[2])
    run = sum(cpu.values())
    return {"wall": end - start, **{k: round(v, 4) for k, v in sorted(cpu.items())}, "run": run, "sampler": own,
            "host": host, "external": host - run - own, "_kernel": kernel,
            "_titles": {k: sorted(v) for k, v in titles.items()}}


BUSY_CORES = 0.2  # a class counts as busy over a sample interval where it used at least this share of a core
BUSY_CLASSES = ("vllm_engine", "vllm_tp_worker", "agent_loop")  # when generation's processes last computed


def last_busy(samples: list, start: float, end: float) -> dict[str, float]:
    """Seconds from `start` to the end of the last sample interval in [start, end] in which each of `BUSY_CLASSES`
    used at least `BUSY_CORES` of a core: in the gen window, where the engine finished before verl's poll saw it."""
    inside = [s for s in samples if start <= s[0] <= end]
    out: dict[str, float] = {}
    for a, b in itertools.pairwise(inside):
        used: dict[str, float] = {}
        for pid, row in b[3].items():
            if pid in a[3]:
                cls = classify(row[0])
                used[cls] = used.get(cls, 0.0) + row[1] - a[3][pid][1]
        out.update({cls: b[0] - start for cls in BUSY_CLASSES if used.get(cls, 0.0) >= BUSY_CORES * (b[0] - a[0])})
    return out


def gc_pauses(marks: list[dict], start: float, end: float) -> dict[str, float]:
    """Seconds of Python garbage collection (pauses of `_GC_MIN_S` or more) inside [start, end] per process class."""
    out: dict[str, float] = {}
    for m in marks:
        overlap = min(end, m["end"]) - max(start, m["start"])
        if m["name"] == "gc" and overlap > 0:
            cls = classify(m["title"])
            out[cls] = out.get(cls, 0.0) + overlap
    return out


def step_windows(marks: list[dict]) -> list[dict[str, dict]]:
    """verl's stage marks grouped by step (a `step` mark closes one), first mark of each name per step."""
    steps, current = [], {}
    for m in sorted(marks, key=lambda m: m["end"]):
        if m["name"] in STAGES:
            current.setdefault(m["name"], m)
        if m["name"] == "step":
            steps.append(current)
            current = {}
    return steps


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("plan")
    ap.add_argument("--model-path", required=True)
    ap.add_argument("--data-dir", required=True)
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--workdir", default="run-stage-cpu")
    ap.add_argument("--interval", type=float, default=0.05)
    ap.add_argument("--json", help="write the windows here")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="stage-marks-") as tmp:
        Path(tmp, "sitecustomize.py").write_text(textwrap.dedent(SITECUSTOMIZE))
        marks_file = Path(tmp, "marks.jsonl")
        marks_file.touch()
        here = str(Path(__file__).resolve().parents[1])
        env = {**os.environ, MARKS_ENV: str(marks_file), "OMP_NUM_THREADS": "1",
               "PYTHONPATH": os.pathsep.join(p for p in (tmp, here, os.environ.get("PYTHONPATH", "")) if p)}
        load0 = os.getloadavg()
        proc = subprocess.Popen([sys.executable, "-m", "executor", "run", a.plan, "--model-path", a.model_path,
                                 "--data-dir", a.data_dir, "--steps", str(a.steps), "--workdir", a.workdir],
                                env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        samples: list = []
        done = threading.Event()
        sampler = threading.Thread(target=sample, args=(proc.pid, a.interval, samples, done), daemon=True)
        sampler.start()
        log = proc.communicate()[0]
        done.set()
        sampler.join()
        marks = [json.loads(x) for x in marks_file.read_text().splitlines() if x.strip()]
    if proc.returncode != 0:
        sys.exit(f"executor run failed ({proc.returncode}): {log[-2000:]}")
    print(f"load average before the run {load0[0]:.2f}, after {os.getloadavg()[0]:.2f}; {len(samples)} samples, "
          f"cores {os.cpu_count()}")
    result = []
    for n, stages in enumerate(step_windows(marks), 1):
        rows = {name: {**window(samples, m["start"], m["end"]), "_gc": gc_pauses(marks, m["start"], m["end"])}
                for name, m in stages.items()}
        if "gen" in rows:  # generation's window only: when its processes last computed before the poll
            rows["gen"]["_busy_until"] = last_busy(samples, stages["gen"]["start"], stages["gen"]["end"])
        result.append(rows)
        cols = sorted({k for r in rows.values() for k in r if not k.startswith("_")} - {"wall", "run", "host",
                                                                                          "external", "sampler"})
        print(f"\nstep {n}: CPU seconds per process class in each stage window")
        head = ["stage", "wall", *cols, "run", "sampler", "external", "host"]
        print("".join(f"{h[:14]:>15}" for h in head))
        for name in STAGES:
            if name in rows:
                r = rows[name]
                print(f"{name:>15}" + "".join(f"{r.get(h, 0.0):>15.3f}" for h in head[1:]))
        for cls in KERNEL_CLASSES:
            print(f"{cls} kernel counters ({' / '.join(KERNEL_METRICS)}): " + ", ".join(
                f"{name} " + " / ".join(f"{rows[name]['_kernel'].get(cls, {}).get(m, 0.0):.3g}" for m in KERNEL_METRICS)
                for name in STAGES if name in rows))
        print("Python GC pauses of 5 ms or more, s: " + ", ".join(
            f"{name} {({k: round(v, 3) for k, v in rows[name]['_gc'].items()})}" for name in STAGES if name in rows))
        if "gen" in rows:
            print("gen: seconds until each class last computed (the engine's end before the poll): "
                  + ", ".join(f"{k} {v:.2f}" for k, v in rows["gen"]["_busy_until"].items()))
        for name in STAGES:
            if name in rows:
                print(f"  {name}: {rows[name]['_titles']}")
    if a.json:
        gc_marks = [m for m in marks if m["name"] == "gc"]
        Path(a.json).write_text(json.dumps({"load_before": load0, "steps": result, "gc": gc_marks}, indent=1))


if __name__ == "__main__":
    main()
