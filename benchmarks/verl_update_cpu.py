"""verl's update_actor on the CPU target, as the overhead job runs it, at a chosen batch and micro-batch: wall time,
the trainer ranks' CPU time and the host's busy time per call.

Builds the overhead job's harness (calibration/jobs/verl_driver.py: verl's agent loop with an engine that answers
at once, TransferQueue, the FSDP2 actor worker group on two ranks), generates one batch of RESPONSES responses,
runs verl's bypass old_log_prob and advantage stages on it, then times `--repeats` update_actor calls after one
warm-up. Compare with the loop's update stage (benchmarks/cpu_loop_stage_cpu.py) at the same configuration:
the CPU loop runs one micro-batch per rank (executor/cpu/launch.py), i.e. MICRO = RESPONSES / 2.

    python benchmarks/verl_update_cpu.py 512 256 --repeats 4
"""

from __future__ import annotations

import argparse
import os
import time

import psutil

from calibration.timing import kernel_counters

WORLD = 2  # the CPU loop's trainer ranks
GROUP = 4  # responses per prompt (scenarios/cpu-tiny-grpo.yaml n)


def ranks_counters() -> dict[int, tuple[float, float, int, int]]:
    """(CPU s, system CPU s, minor page faults, involuntary context switches) of each of verl's actor worker
    processes under this one, so far."""
    out = {}
    for child in psutil.Process().children(recursive=True):
        try:
            if "ActorRolloutRefWorker" in " ".join(child.cmdline()):
                t = child.cpu_times()
                out[child.pid] = (t.user + t.system, *kernel_counters(child))
        except (psutil.Error, OSError):
            continue
    return out


def host_busy_s() -> float:
    t = psutil.cpu_times()
    return t.user + t.nice + t.system + t.irq + t.softirq + t.steal


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("responses", type=int)
    ap.add_argument("micro", type=int, help="micro-batch per rank (sequences)")
    ap.add_argument("--repeats", type=int, default=4)
    ap.add_argument("--idle", type=float, default=0.0,
                    help="seconds to wait before each timed call, as the loop's ranks wait out the rollout")
    a = ap.parse_args()
    import ray

    from calibration.jobs.overhead import RAY_CPUS, OverheadJob
    from calibration.jobs.verl_driver import VerlDriver

    env = OverheadJob._environment()
    os.environ.update(env)
    import executor.cpu.verl_plugin  # noqa: F401  (registers the CPU platform in this process)

    ray.init(num_cpus=RAY_CPUS, num_gpus=WORLD * (WORLD + 3) // 2, include_dashboard=False, logging_level="ERROR",
             runtime_env={"env_vars": env})
    driver = VerlDriver(WORLD, a.responses // GROUP, GROUP, a.micro, 1)
    try:
        driver.rollout(a.responses // GROUP)
        driver.stage("old_log_prob")
        driver.stage("advantage")
        driver.stage("update")  # warm-up: builds the FSDP2 actor
        for _ in range(a.repeats):
            time.sleep(a.idle)
            before, host0, start = ranks_counters(), host_busy_s(), time.perf_counter()
            driver.stage("update")
            wall = time.perf_counter() - start
            after, host = ranks_counters(), host_busy_s() - host0
            cpu, system, faults, switches = (sum(after[p][i] - before.get(p, after[p])[i] for p in after)
                                             for i in range(4))
            print(f"update_actor {a.responses} responses, micro-batch {a.micro} per rank, after {a.idle:g} s idle: "
                  f"wall {wall:.3f} s, ranks' "
                  f"CPU {cpu:.3f} s (system {system:.3f} s, {faults} minor faults, {switches} involuntary switches), "
                  f"host busy {host:.2f} s of {(os.cpu_count() or 1) * wall:.2f}, load {os.getloadavg()[0]:.1f}",
                  flush=True)
    finally:
        driver.close()
        ray.shutdown()


if __name__ == "__main__":
    main()
