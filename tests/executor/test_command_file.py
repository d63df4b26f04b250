"""`executor command-file`, as `twin plan` starts it before its search (--when-told) and as a user runs it."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _command_file(plan: Path, out: Path, *extra: str, told: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "executor", "command-file", str(plan), "-o", str(out), *extra],
                          input=told, capture_output=True, text=True, timeout=300, cwd=REPO)


def test_told_to_write_it_writes_what_the_plain_command_writes(make_plan, tmp_path: Path) -> None:
    plan = make_plan()
    plain = _command_file(plan, tmp_path / "plain.sh", "--workdir", str(tmp_path / "run"))
    told = _command_file(plan, tmp_path / "told.sh", "--workdir", str(tmp_path / "run"), "--when-told", told="write\n")
    assert plain.returncode == 0 and told.returncode == 0, (plain.stderr, told.stderr)
    assert (tmp_path / "told.sh").read_text() == (tmp_path / "plain.sh").read_text()
    assert "verl.trainer.main_ppo" in (tmp_path / "told.sh").read_text()


def test_input_ending_before_write_writes_nothing(tmp_path: Path) -> None:
    """The plan was never saved (the file does not even exist): the prepared executor exits quietly."""
    done = _command_file(tmp_path / "plan.json", tmp_path / "c.sh", "--when-told", told="")
    assert done.returncode == 0 and not done.stdout and not done.stderr
    assert not (tmp_path / "c.sh").exists()


def test_an_invalid_override_writes_nothing_and_says_why(make_plan, tmp_path: Path) -> None:
    """A plan whose rollout vLLM's scheduler would refuse (more sequences than batched tokens): no file."""
    import json

    plan = make_plan()
    raw = json.loads(plan.read_text())
    raw["layout"]["rollout"]["max_num_seqs"] = 4096  # above max_num_batched_tokens: vLLM's scheduler refuses it
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(raw))
    done = _command_file(bad, tmp_path / "c.sh")
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "max_num_seqs" in done.stderr
    assert not (tmp_path / "c.sh").exists()


def test_the_plan_it_reads_is_never_its_output(make_plan, tmp_path: Path) -> None:
    plan = make_plan()
    before = plan.read_bytes()
    for extra, told in (((), None), (("--when-told",), "write\n")):
        done = _command_file(plan, plan, *extra, told=told)
        assert done.returncode != 0 and "Traceback" not in done.stderr
        assert len(done.stderr.strip().splitlines()) == 1 and "is also an input of this command" in done.stderr
        assert plan.read_bytes() == before


CPU_SCENARIO = REPO / "scenarios" / "cpu-tiny-grpo.yaml"
CATALOG = REPO / "twin" / "catalog" / "configs"


def _assets(root: Path) -> tuple[Path, Path]:
    """A model directory whose config.json is the plan's tiny model, and a data directory with (empty) parquet files."""
    model, data = root / "model", root / "data"
    model.mkdir(parents=True)
    data.mkdir()
    (model / "config.json").write_text((CATALOG / "tiny.json").read_text())
    for name in ("train.parquet", "test.parquet"):
        (data / name).write_bytes(b"")
    return model, data


def _refused(done: subprocess.CompletedProcess, expected: str) -> None:
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("executor: error: ") and expected in lines[0], done.stderr


@pytest.mark.parametrize(("target", "expected"), [
    ("model/config.json", "lies inside --model-path"),
    ("model/new.sh", "lies inside --model-path"),
    ("data/train.parquet", "lies inside --data-dir"),
    ("link.json", "lies inside --model-path"),  # a link to the model's config.json, outside the model directory
    ("run/run.log", "is also an input of this command"),  # the log of an earlier run, kept
    ("run/checkpoints/c.sh", "lies inside the run's checkpoints"),
    ("run/metrics.jsonl", "is the run's metrics"),
])
def test_the_output_is_never_an_input_or_inside_one(make_plan, tmp_path: Path, target: str, expected: str) -> None:
    plan = make_plan(CPU_SCENARIO)
    model, data = _assets(tmp_path)
    (tmp_path / "run" / "checkpoints").mkdir(parents=True)
    (tmp_path / "run" / "run.log").write_text("the log of an earlier run\n")
    (tmp_path / "link.json").symlink_to(model / "config.json")
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    done = _command_file(plan, tmp_path / target, "--model-path", str(model), "--data-dir", str(data),
                         "--workdir", str(tmp_path / "run"))
    _refused(done, expected)
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before
    assert not (model / "new.sh").exists()


@pytest.mark.parametrize(("option", "kind", "expected"), [
    ("--workdir", "file", "is not a directory"),
    ("--data-dir", "file", "is not a directory"),
    ("--model-path", "missing", "no such directory"),
    ("--model-path", "file", "is not a directory"),
    ("--model-path", "empty dir", "no config.json"),
    ("--data-dir", "empty dir", "train.parquet not found"),
])
def test_paths_a_run_refuses_are_refused(make_plan, tmp_path: Path, option: str, kind: str, expected: str) -> None:
    plan = make_plan(CPU_SCENARIO)
    model, data = _assets(tmp_path)
    bad = {"file": plan, "missing": tmp_path / "nonexistent", "empty dir": tmp_path / "empty"}[kind]
    (tmp_path / "empty").mkdir()
    paths = {"--model-path": str(model), "--data-dir": str(data), "--workdir": str(tmp_path / "run"), option: str(bad)}
    done = _command_file(plan, tmp_path / "c.sh", *(x for item in paths.items() for x in item))
    _refused(done, expected)
    assert not (tmp_path / "c.sh").exists()


def test_a_run_directory_with_equals_and_quotes_is_written_quoted(make_plan, tmp_path: Path) -> None:
    plan = make_plan(CPU_SCENARIO)
    model, data = _assets(tmp_path / "a=b")
    workdir = tmp_path / "w=1 it's"
    done = _command_file(plan, tmp_path / "c.sh", "--model-path", str(model), "--data-dir", str(data),
                         "--workdir", str(workdir))
    assert done.returncode == 0, done.stderr
    script = (tmp_path / "c.sh").read_text()
    assert subprocess.run(["bash", "-n", str(tmp_path / "c.sh")]).returncode == 0
    args = shlex.split(script.split("exec ", 1)[1].replace("\\\n", " "))
    assert f"data.train_files='{data.resolve()}/train.parquet'" in args
    assert "trainer.default_local_dir='" + str(workdir).replace("'", "\\'") + "/checkpoints'" in args


def test_a_path_cannot_end_the_scripts_comment_line(make_plan, tmp_path: Path) -> None:
    plan = make_plan(CPU_SCENARIO)
    model, data = _assets(tmp_path)
    done = _command_file(plan, tmp_path / "c.sh", "--model-path", str(model), "--data-dir", str(data),
                         "--workdir", str(tmp_path / "run\ntouch injected"))
    assert done.returncode == 0, done.stderr
    lines = (tmp_path / "c.sh").read_text().splitlines()
    assert lines[1].startswith("# What `executor run ") and "run\\ntouch injected" in lines[1]
    assert lines[2].startswith("# ")  # the comment goes on; the path's second line is no command of its own


@pytest.mark.parametrize("option", ["--workdir", "--model-path"])
def test_a_path_verl_or_ray_would_expand_is_refused(make_plan, tmp_path: Path, option: str) -> None:
    plan = make_plan(CPU_SCENARIO)
    model, data = _assets(tmp_path)
    odd = tmp_path / "x${HOME}"
    odd.mkdir()
    paths = {"--model-path": str(model), "--data-dir": str(data), "--workdir": str(tmp_path / "run"), option: str(odd)}
    _refused(_command_file(plan, tmp_path / "c.sh", *(x for item in paths.items() for x in item)), "holds '${'")
