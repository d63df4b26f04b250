"""`calibration run`: interrupted by a signal and resumed loses and duplicates nothing; bad input is one line."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from calibration.jobs.collectives import OPS, SMALL_SIZES
from calibration.measurements import load_measurements

REPO = Path(__file__).resolve().parents[2]
GEMM_POINTS = 6  # 3 shapes x (fp32, bf16) on a CPU


def _wait_for_records(path: Path, count: int, proc, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and len(path.read_bytes().splitlines()) >= count:
            return
        assert proc.poll() is None, f"run ended early: {proc.communicate()}"
        time.sleep(0.05)
    raise AssertionError(f"no {count} records in {timeout} s")


def _children(pid: int) -> list[int]:
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        path = Path(f"/proc/{current}/task/{current}/children")
        kids = [int(k) for k in path.read_text().split()] if path.exists() else []
        found += kids
        todo += kids
    return found


def _alive(pid: int) -> bool:
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split(") ")[-1][0] != "Z"


def test_ctrl_c_ends_a_run_started_with_sigint_ignored(tmp_path):
    """A parent that ignores SIGINT passes that on across exec; the run still ends cleanly on it."""
    out = tmp_path / "m.jsonl"
    proc = subprocess.Popen([sys.executable, "-m", "calibration", "run", "gemm", "-o", str(out), "--repeats", "200",
                             "--warmup", "1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    _wait_for_records(out, 1, proc)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "interrupted" in err


# SIGTERM takes SIGINT's path (the same handler; its exit and message: test_sigterm_during_collectives_ends_the_workers)
@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGKILL, -9)])
def test_interrupted_run_resumes_without_loss_or_duplicates(tmp_path, sig, code, run_cli, popen_cli):
    out = tmp_path / "m.jsonl"
    args = ("run", "gemm", "-o", str(out), "--repeats", "200", "--warmup", "1")
    proc = popen_cli(*args)
    _wait_for_records(out, 2, proc)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == code, err
    if sig != signal.SIGKILL:
        assert "interrupted" in err and "resume" in err
    kept = out.read_bytes()
    assert 2 <= len(kept.splitlines()) < GEMM_POINTS

    # the interrupted run needs repeats enough to be stopped midway; the resume only the points still missing (a
    # point is keyed without its repeat count): 3 repeats keep each parametrization at seconds
    resumed = run_cli(*args, "--repeats", "3")
    assert resumed.returncode == 0, resumed.stderr
    assert out.read_bytes().startswith(kept)  # nothing measured before was rewritten
    loaded = load_measurements(out)
    assert not loaded.bad_lines
    keys = [r.key for r in loaded.records]
    assert len(keys) == len(set(keys)) == GEMM_POINTS

    if sig == signal.SIGINT:  # a third run finds everything measured
        again = run_cli(*args, "--repeats", "3")
        assert again.returncode == 0 and load_measurements(out).records == loaded.records
        assert re.search(rf"gemm\s*│\s*{GEMM_POINTS}\s*│\s*{GEMM_POINTS}\s*│\s*0\s*│", again.stdout), again.stdout


def test_sigterm_during_collectives_ends_the_workers(tmp_path, run_cli, popen_cli):
    out = tmp_path / "m.jsonl"
    args = ("run", "collectives", "-o", str(out), "--repeats", "40", "--world", "2")
    proc = popen_cli(*args)
    _wait_for_records(out, 1, proc)
    workers = _children(proc.pid)
    assert len(workers) >= 2
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "interrupted" in err and "resume" in err, err
    deadline = time.monotonic() + 10
    while any(_alive(w) for w in workers) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(_alive(w) for w in workers)
    points = len(OPS) * len(SMALL_SIZES)  # one group shape at world 2 on the small grid
    kept = len(load_measurements(out).records)
    assert 1 <= kept < points

    resumed = run_cli(*args, "--repeats", "3")
    assert resumed.returncode == 0, resumed.stderr
    records = load_measurements(out).records
    assert len({r.key for r in records}) == len(records) == points


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["run", "nosuchjob", "-o", "{out}"], "unknown job 'nosuchjob'"),
        (["run", "gemm", "-o", "{out}", "--device", "tpu"], "'tpu' is not one of"),
        (["run", "gemm", "-o", "{out}", "--device", "npu"], "npu"),
        (["run", "gemm", "-o", "{out}", "--device", "cuda"], "cuda"),
        (["run", "gemm", "-o", "{tmp}/missing/m.jsonl"], "does not exist"),
        (["run", "gemm", "-o", "{tmp}"], "is a directory"),
        (["run", "gemm"], "Missing option"),
        (["run", "gemm", "-o", "{out}", "--grid", "huge"], "'huge' is not one of"),
        (["run", "collectives", "-o", "{out}", "--world", "1"], "--world"),
        (["run", "decode", "-o", "{out}", "--model-config", "{tmp}/none.json"], "not a readable file"),
        (["ingest", "{tmp}/none.jsonl", "-o", "{out}"], "no such file"),
    ],
)
def test_bad_input_is_one_line_on_stderr(tmp_path, args, message, run_cli):
    out = tmp_path / "m.jsonl"
    result = run_cli(*[a.format(out=out, tmp=tmp_path) for a in args])
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert message in lines[0] and "Traceback" not in result.stderr
    assert not out.exists()


@pytest.mark.parametrize("content", [
    (REPO / "scenarios" / "cpu-tiny-grpo.yaml").read_bytes(),  # a scenario
    b'{\n  "schema": 1,\n  "scenario": {}\n}\n',  # a plan.json
    b"\x89PNG\r\n\x1a\n\x00\x00",  # a binary file
    b'{"kind": "job"}\n',  # JSON lines that are not records
])
def test_run_appends_only_to_a_file_of_records(tmp_path, content, run_cli):
    out = tmp_path / "out"
    out.write_bytes(content)
    result = run_cli("run", "copy", "-o", str(out), "--repeats", "1", "--warmup", "0")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert len(result.stderr.splitlines()) == 1, result.stderr
    assert f"--output {out}: not a measurements file" in result.stderr and "line 1: " in result.stderr
    assert out.read_bytes() == content


def test_help_works_without_importing_torch():
    probe = ("import sys; from calibration.cli import main\n"
             "try:\n    main(['--help'])\nexcept SystemExit as e:\n    assert e.code == 0\n"
             "assert 'torch' not in sys.modules, 'torch imported'\nprint('ok')")
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and result.stdout.strip().endswith("ok"), result.stderr


def test_run_writes_json_lines(tmp_path, run_cli):
    out = tmp_path / "m.jsonl"
    result = run_cli("run", "copy", "-o", str(out), "--repeats", "2")
    assert result.returncode == 0, result.stderr
    lines = out.read_text().splitlines()
    assert len(lines) == 3 and all(json.loads(line)["kind"] == "job" for line in lines)
