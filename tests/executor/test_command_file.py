"""`executor command-file`, as `twin plan` starts it before its search (--when-told) and as a user runs it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

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
