"""The file boundary: what is read (regular UTF-8 files, bounded size and nesting) and how outputs are written."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from twin.errors import TwinError
from twin.fileio import (
    MAX_DEPTH,
    MAX_NODES,
    check_target,
    json_depth,
    output_dir,
    parse_mapping,
    read_mapping,
    read_text,
    write_atomic,
)


@pytest.mark.parametrize(("content", "message"), [
    ("name: caf\u00e9\n".encode("latin-1"), "not UTF-8 text (byte 0xe9 at offset 9)"),
    ("name: x\n".encode("utf-16"), "is UTF-16 text"),
    (b"\x00\x01\x02", "binary content (a NUL byte at offset 0)"),
])
def test_non_utf8_content_is_refused(tmp_path, content, message):
    f = tmp_path / "in.yaml"
    f.write_bytes(content)
    with pytest.raises(TwinError, match=message.replace("(", r"\(").replace(")", r"\)")):
        read_text(f, "scenario in.yaml")


def test_only_regular_files_are_read(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(TwinError, match="is a FIFO, not a regular file"):
        read_text(fifo, "f")  # returns at once: opened without blocking
    with pytest.raises(TwinError, match="is a device, not a regular file"):
        read_text("/dev/zero", "z")
    with pytest.raises(TwinError, match="is a directory"):
        read_text(tmp_path, "d")
    with pytest.raises(TwinError, match="no such file"):
        read_text(tmp_path / "none", "n")


def test_size_limit_is_checked_before_reading(tmp_path):
    f = tmp_path / "big.yaml"
    f.write_bytes(b"a" * 1001)
    with pytest.raises(TwinError, match="1,001 bytes, more than the 1,000"):
        read_text(f, "big", max_bytes=1000)


def test_nesting_limit_without_recursion_error():
    assert json_depth('{"a": [1, {"b": "[[[["}]}') == 3  # brackets inside strings do not count
    deep = "[" * 100_000 + "]" * 100_000
    with pytest.raises(TwinError, match=f"nested more than {MAX_DEPTH} levels deep"):
        parse_mapping('{"a": ' + deep + "}", "j", "json")
    with pytest.raises(TwinError, match=f"nested more than {MAX_DEPTH} levels deep"):
        parse_mapping("a: " + deep, "y", "yaml")
    deepest_allowed = "[" * (MAX_DEPTH - 2) + "]" * (MAX_DEPTH - 2)  # the mapping and its value count too
    assert parse_mapping("a: " + deepest_allowed, "y", "yaml")["a"] == parse_mapping(
        '{"a": ' + deepest_allowed + "}", "j", "json")["a"]
    assert json_depth('{"a": ' + deepest_allowed + "}") == MAX_DEPTH - 1
    with pytest.raises(TwinError, match="NaN is not a JSON number"):
        parse_mapping('{"a": NaN}', "j", "json")


def test_yaml_aliases_within_bounds_and_never_a_bomb():
    """Anchors as the shipped cluster files use them expand; a billion-laughs document (9^9 leaves from ten
    lines), an alias chain nesting past MAX_DEPTH and an alias inside its own anchor are one-line errors."""
    assert parse_mapping("a: &x [1, {b: 2}]\nc: *x\n", "y", "yaml") == {"a": [1, {"b": 2}], "c": [1, {"b": 2}]}
    lines = ['l0: &l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]" for i in range(1, 10)]
    # nodes: the mapping, 10 keys, and each l_i holds 1 + 9 x (l_{i-1}'s nodes), l0 10
    expanded = 1 + 10 + sum(10 * 9**i + (9**i - 1) // 8 for i in range(10))
    with pytest.raises(TwinError, match=f"expand to {expanded:,} nodes, more than {MAX_NODES:,}"):
        parse_mapping("\n".join(lines), "bomb", "yaml")
    chain = ["c0: &c0 [1]"] + [f"c{i}: &c{i} [*c{i - 1}]" for i in range(1, MAX_DEPTH + 1)]
    with pytest.raises(TwinError, match=f"nest it more than {MAX_DEPTH} levels deep"):
        parse_mapping("\n".join(chain), "chain", "yaml")
    with pytest.raises(TwinError, match="an alias refers to a node that contains it"):
        parse_mapping("a: &x [1, *x]\n", "cycle", "yaml")


@pytest.mark.parametrize("name", ["a2", "a3", "cpu", "h20"])
def test_shipped_cluster_files_read_as_user_files(name):
    path = Path(__file__).resolve().parents[2] / "twin" / "hardware" / "data" / "clusters" / f"{name}.yaml"
    assert read_mapping(path, name, "yaml")["tiers"]


def test_read_mapping_of_a_good_file(tmp_path):
    f = tmp_path / "ok.yaml"
    f.write_text("a: [1, 2]\nb: {c: d}\n")
    assert read_mapping(f, "ok", "yaml") == {"a": [1, 2], "b": {"c": "d"}}


def test_targets_checked_before_writing(tmp_path):
    src = tmp_path / "in.yaml"
    src.write_text("a: 1\n")
    with pytest.raises(TwinError, match="is a directory; give a file path"):
        check_target(tmp_path)
    with pytest.raises(TwinError, match="is a system path"):
        check_target("/dev/null")
    with pytest.raises(TwinError, match="is a system path"):
        check_target("/proc/self/out.json")
    with pytest.raises(TwinError, match="is also an input of this command"):
        check_target(tmp_path / "." / "in.yaml", inputs=[None, src])
    with pytest.raises(TwinError, match="does not exist"):
        check_target(tmp_path / "no" / "out.json")
    with pytest.raises(TwinError, match="is not a directory"):
        check_target(src, directory=True)
    assert check_target(tmp_path / "new.json") == tmp_path / "new.json"


def test_read_only_filesystem_is_refused(tmp_path, monkeypatch):
    class ReadOnly:
        f_flag = os.ST_RDONLY

    monkeypatch.setattr(os, "statvfs", lambda path: ReadOnly())
    with pytest.raises(TwinError, match="is on a read-only filesystem"):
        write_atomic(tmp_path / "out.json", "{}")
    assert not list(tmp_path.iterdir())


def test_atomic_write_keeps_the_mode_and_leaves_nothing_behind(tmp_path):
    out = tmp_path / "plan.json"
    out.write_text("old")
    out.chmod(0o644)
    write_atomic(out, "new")
    assert out.read_text() == "new" and stat.S_IMODE(out.stat().st_mode) == 0o644
    out.chmod(0o640)
    write_atomic(out, b"bytes")
    assert out.read_bytes() == b"bytes" and stat.S_IMODE(out.stat().st_mode) == 0o640
    umask = os.umask(0o022)
    try:
        write_atomic(tmp_path / "fresh.json", "x")
    finally:
        os.umask(umask)
    assert stat.S_IMODE((tmp_path / "fresh.json").stat().st_mode) == 0o644
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fresh.json", "plan.json"]


def test_failed_write_is_one_line_without_temporary_file(tmp_path, monkeypatch):
    def full(*args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", full)
    with pytest.raises(TwinError, match=r"cannot write \(the disk is full\)"):
        write_atomic(tmp_path / "out.json", "x")
    assert not list(tmp_path.iterdir())


def test_output_dir_is_created_once_checked(tmp_path):
    assert output_dir(tmp_path / "plots").is_dir()
    f = tmp_path / "file"
    f.write_text("")
    with pytest.raises(TwinError, match="is not a directory"):
        output_dir(f)
