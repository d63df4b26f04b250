"""End to end: two real GRPO steps of verl's own trainer (`python -m verl.trainer.main_ppo`) on CPU.

The tiny model is warm-started on "identity" problems (a + 0, a * 1) so that its sampled answers are
right part of the time: the MATH reward then scores real answers with varying rewards, and GRPO gets
a real gradient. The run's rollout dump (verl's trainer.rollout_data_dir) is re-scored here with the
project's reward to show that every reward came from it.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from executor.cpu.assets import make_math_dataset, make_tiny_model
from executor.cpu.assets_command import WARM_START_STEPS
from executor.cpu.launch import GAP_METRICS, GRAD_NORM_METRIC, REWARD_METRICS, TIMING_METRICS, cpu_run_config
from executor.cpu.math_problems import make_problems
from executor.cpu.warm_start import warm_start
from executor.reward import compute_score

STEPS, BATCH_PROMPTS, N = 2, 8, 4
RUN_TIMEOUT_S = 600


class TreeMemory:
    """Samples the summed PSS (shared pages split among their users) of a process and its descendants,
    once a second; remembers every descendant seen."""

    def __init__(self, pid: int) -> None:
        self.root = psutil.Process(pid)
        self.peak_bytes = 0
        self.seen: dict[int, psutil.Process] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(1.0):
            try:
                procs = [self.root, *self.root.children(recursive=True)]
            except psutil.Error:
                continue
            total = 0
            for proc in procs:
                self.seen.setdefault(proc.pid, proc)
                with contextlib.suppress(psutil.Error):
                    total += proc.memory_full_info().pss
            self.peak_bytes = max(self.peak_bytes, total)

    def stop(self) -> list[psutil.Process]:
        """Stop sampling; returns the descendants still running 30 s after the root exited."""
        self._stop.set()
        self._thread.join()
        children = [p for pid, p in self.seen.items() if pid != self.root.pid]
        _, alive = psutil.wait_procs(children, timeout=30)
        return alive


def _metrics(path: Path) -> dict[int, dict[str, float]]:
    steps = {}
    for line in path.read_text().splitlines():
        record = json.loads(line)
        steps[record["step"]] = record["data"]
    return steps


@pytest.fixture(scope="module")
def grpo_run(tmp_path_factory: pytest.TempPathFactory) -> dict:
    work = tmp_path_factory.mktemp("grpo")
    model = make_tiny_model(work / "model", seed=0)
    warm_start(model, make_problems(1000, seed=1, kinds=("identity",)), steps=WARM_START_STEPS, seed=0)
    train, test = make_math_dataset(work / "data", n_train=16, n_test=4, seed=0, kinds=("identity",))
    overrides, env = cpu_run_config(
        work, model_dir=model, train_files=train, val_files=test, steps=STEPS, batch_prompts=BATCH_PROMPTS, n=N
    )
    overrides.append(f"trainer.rollout_data_dir={work / 'rollouts'}")
    log_path = work / "run.log"
    start = time.monotonic()
    with log_path.open("w") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "verl.trainer.main_ppo", *overrides],
            cwd=work,
            env={**os.environ, **env},
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        memory = TreeMemory(proc.pid)
        try:
            returncode = proc.wait(timeout=RUN_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            returncode = proc.wait()
    wall_s = time.monotonic() - start
    leftovers = memory.stop()
    for leftover in leftovers:  # only processes this run started
        leftover.kill()
    run = {
        "work": work,
        "returncode": returncode,
        "wall_s": wall_s,
        "log": log_path.read_text(),
        "peak_pss_gib": memory.peak_bytes / 2**30,
        "leftovers": [p.pid for p in leftovers],
        "metrics_path": Path(env["VERL_FILE_LOGGER_PATH"]),
    }
    print(f"\nGRPO on CPU: exit {returncode}, {wall_s:.1f} s wall, peak PSS of the run {run['peak_pss_gib']:.2f} GiB")
    return run


def test_run_exits_cleanly_and_leaves_nothing_running(grpo_run: dict) -> None:
    assert grpo_run["returncode"] == 0, grpo_run["log"][-5000:]
    assert grpo_run["leftovers"] == []


def test_metrics_file_has_every_step_with_timings(grpo_run: dict) -> None:
    steps = _metrics(grpo_run["metrics_path"])
    assert sorted(steps) == list(range(1, STEPS + 1))
    for data in steps.values():
        assert all(data[name] >= 0 for name in TIMING_METRICS), sorted(k for k in data if k.startswith("timing"))
        assert data["perf/throughput"] > 0
    for step, data in steps.items():
        print(step, {k: round(v, 3) for k, v in data.items() if k.startswith("timing_s/")})


def test_actor_learns_from_real_rewards(grpo_run: dict) -> None:
    steps = _metrics(grpo_run["metrics_path"])
    assert max(data[GRAD_NORM_METRIC] for data in steps.values()) > 0
    assert all(name in data for data in steps.values() for name in REWARD_METRICS)
    assert max(data["critic/score/max"] for data in steps.values()) > 0


def test_rollout_and_trainer_log_probs_agree(grpo_run: dict) -> None:
    """Token-level: the rollout server (synced weights) and the FSDP trainer give the same log-probs."""
    for data in _metrics(grpo_run["metrics_path"]).values():
        gap = max(abs(math.log(data[name])) for name in GAP_METRICS)
        assert gap < 1e-3, {name: data[name] for name in GAP_METRICS}
        assert abs(data["actor/rollout_corr/kl"]) < 1e-3


def test_every_reward_is_the_projects_math_reward(grpo_run: dict) -> None:
    scores = []
    for step in range(1, STEPS + 1):
        dump = grpo_run["work"] / "rollouts" / f"{step}.jsonl"
        rows = [json.loads(line) for line in dump.read_text().splitlines()]
        assert len(rows) == BATCH_PROMPTS * N
        for row in rows:
            expected = compute_score("ascend-rl-twin/tiny-math", row["output"], row["gts"])
            assert row["score"] == pytest.approx(expected, abs=1e-6), row
            scores.append(row["score"])
    assert 0 < sum(score > 0 for score in scores) < len(scores)
