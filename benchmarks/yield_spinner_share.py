"""Does a vLLM worker's busy poll take a core from runnable work? A CPU-bound task beside sched_yield spinners.

vLLM's shared-memory queue readers spin with `os.sched_yield()` for `busy_loop_s` (1 s) after every read
(vllm/distributed/device_communicators/shm_broadcast.py SpinCondition.wait; vllm/distributed/utils.py
sched_yield uses os.sched_yield on Python >= 3.11.1). This pins one CPU-bound Python loop and `--spinners`
processes that call os.sched_yield() in a loop, like those readers, to one core, and prints per repeat the
loop's share of the core and the CPU the spinners got while it ran; then the spinners' CPU over a window in
which this script leaves the core to them. If the scheduler shared the core equally among runnable tasks, the
loop would get 1 / (1 + spinners) of it.

    python benchmarks/yield_spinner_share.py --core 1 --spinners 2 --repeats 3
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import platform
import time

import psutil


def spin(core: int) -> None:
    os.sched_setaffinity(0, {core})
    while True:
        os.sched_yield()


def work(n: int) -> tuple[float, float]:
    """Wall and CPU seconds of a pure-Python loop of `n` additions."""
    wall, cpu = time.perf_counter(), time.process_time()
    total = 0
    for i in range(n):
        total += i
    return time.perf_counter() - wall, time.process_time() - cpu


def cpu_seconds(procs: list[mp.Process]) -> float:
    return sum(t.user + t.system for t in (psutil.Process(p.pid).cpu_times() for p in procs))


def with_spinners(core: int, count: int, body) -> tuple[object, float]:
    """`body()`'s result while `count` spinners run on `core`, and the CPU seconds they used during it."""
    procs = [mp.Process(target=spin, args=(core,), daemon=True) for _ in range(count)]
    for p in procs:
        p.start()
    time.sleep(0.3)  # started and spinning
    before = cpu_seconds(procs)
    result = body()
    used = cpu_seconds(procs) - before
    for p in procs:
        p.kill()
        p.join()
    return result, used


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--core", type=int, default=0)
    ap.add_argument("--spinners", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--additions", type=int, default=20_000_000)
    a = ap.parse_args()
    os.sched_setaffinity(0, {a.core})
    work(a.additions // 10)
    print(f"kernel {platform.release()}, {os.cpu_count()} cores, core {a.core}, load {os.getloadavg()[0]:.1f}")
    for _ in range(a.repeats):
        for count in (0, a.spinners):
            (wall, cpu), used = with_spinners(a.core, count, lambda: work(a.additions))
            print(f"CPU-bound loop beside {count} spinners: wall {wall:.3f} s, its CPU {cpu:.3f} s (share "
                  f"{cpu / wall:.2f} of the core; equal sharing would give {1 / (1 + count):.2f}), spinners' CPU "
                  f"{used:.3f} s, load {os.getloadavg()[0]:.1f}")
    _, used = with_spinners(a.core, a.spinners, lambda: time.sleep(1.0))
    print(f"{a.spinners} spinners alone on core {a.core} for 1.0 s: {used:.3f} s of CPU "
          f"(what the host's other programs left of the core)")


if __name__ == "__main__":
    main()
