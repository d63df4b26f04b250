"""`executor cpu-assets DIR`: a DIR that is no directory, or a write that fails, is one line and leaves nothing."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from executor.cli import app
from twin.clirun import run_app


def _cpu_assets(capsys, *args: str) -> tuple[int, list[str]]:
    with pytest.raises(SystemExit) as exit_:
        run_app(app, "executor", argv=["cpu-assets", *args, "--warm-start-steps", "0"])
    return exit_.value.code, capsys.readouterr().err.strip().splitlines()


@pytest.mark.parametrize(("kind", "expected"), [
    ("file", "is not a directory; give a directory"),
    ("/dev/zero", "is a system path"),
    ("missing parent", "does not exist"),
])
def test_a_directory_it_cannot_make_is_one_line(capsys, tmp_path: Path, kind: str, expected: str) -> None:
    target = {"file": tmp_path / "plan.json", "/dev/zero": Path("/dev/zero"),
              "missing parent": tmp_path / "no" / "assets"}[kind]
    (tmp_path / "plan.json").write_text("{}")
    code, lines = _cpu_assets(capsys, str(target))
    assert code == 2 and len(lines) == 1, lines
    assert lines[0].startswith(f"executor: error: output directory {target}: ") and expected in lines[0]
    assert (tmp_path / "plan.json").read_text() == "{}"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plan.json"]


def _fake_assets(fail: bool):
    def write(root: Path, *args) -> None:
        for name in ("model", "data"):
            (root / name).mkdir()
            (root / name / "part").write_text("x")
            if fail:
                raise OSError(errno.ENOSPC, "No space left on device")
    return write


def test_a_failed_write_is_one_line_and_leaves_nothing_half_made(capsys, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr("executor.cpu.assets_command._write_assets", _fake_assets(fail=True))
    code, lines = _cpu_assets(capsys, str(tmp_path / "assets"))
    assert code == 2 and lines == [f"executor: error: output directory {tmp_path / 'assets'}: cannot write "
                                   "(No space left on device)"]
    assert list((tmp_path / "assets").iterdir()) == []  # no model/, no temporary directory


def test_the_model_and_data_appear_whole(capsys, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr("executor.cpu.assets_command._write_assets", _fake_assets(fail=False))
    run_app(app, "executor", argv=["cpu-assets", str(tmp_path), "--warm-start-steps", "0"])  # returns: success
    assert f"model: {tmp_path / 'model'}" in capsys.readouterr().out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data", "model"]
    assert (tmp_path / "model" / "part").read_text() == "x"
    code, lines = _cpu_assets(capsys, str(tmp_path))  # a second time: refused, nothing replaced
    assert code == 2 and "already holds model/ or data/" in lines[-1]
