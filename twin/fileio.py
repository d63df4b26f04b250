"""The one boundary for every file the tools read or write.

Reading: only regular files, at most `max_bytes`, UTF-8 text only, nesting at most MAX_DEPTH levels
(checked before or while parsing, so a deep document never reaches Python's recursion limit), YAML
aliases only where the document they expand to stays within MAX_NODES nodes and MAX_DEPTH levels and refers to
nothing that contains it (a few lines of anchors can stand for billions of nodes). Writing: the target is checked
first (a directory, a device, a system path, an input of the same command, a missing or unwritable
directory, a read-only filesystem), then written through a temporary file in the same directory and a
rename, keeping the existing file's permissions. Every failure is one TwinError line naming the file.
"""

from __future__ import annotations

import errno
import json
import os
import re
import stat
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Literal, TypeVar

from pydantic import BaseModel, ValidationError

from twin.errors import TwinError

M = TypeVar("M", bound=BaseModel)

MAX_BYTES = 16 << 20  # scenario, plan and profile files are a few kB; 16 MiB leaves room for any of them
MAX_DEPTH = 64  # the deepest real document (a plan.json) nests 6 levels
MAX_NODES = 1_000_000  # a YAML document with its aliases expanded (the shipped cluster files: a few hundred)
SYSTEM_DIRS = ("/proc", "/sys", "/dev")  # pseudo-filesystems: never a place for an output file


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def _oserror(exc: OSError) -> str:
    return exc.strerror or str(exc)


def read_bytes(path: Path | str, label: str, max_bytes: int = MAX_BYTES) -> bytes:
    """The content of a regular file of at most `max_bytes`; anything else is a one-line TwinError.

    The file is opened without blocking and checked with fstat, so a FIFO or device given in its place
    (even one swapped in after a first look) is refused instead of read without end.
    """
    path = Path(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise TwinError(f"{label}: no such file") from None
    except IsADirectoryError:
        raise TwinError(f"{label}: is a directory, not a file") from None
    except OSError as exc:
        raise TwinError(f"{label}: cannot open ({_oserror(exc)})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise TwinError(f"{label}: is {_kind(st.st_mode)}, not a regular file")
        if st.st_size > max_bytes:
            raise TwinError(f"{label}: {st.st_size:,} bytes, more than the {max_bytes:,} this file can have")
        chunks, size = [], 0
        while chunk := os.read(fd, 1 << 20):
            size += len(chunk)
            if size > max_bytes:  # grew while read
                raise TwinError(f"{label}: more than the {max_bytes:,} bytes this file can have")
            chunks.append(chunk)
        return b"".join(chunks)
    except OSError as exc:
        raise TwinError(f"{label}: cannot read ({_oserror(exc)})") from None
    finally:
        os.close(fd)


def decode_text(data: bytes, label: str) -> str:
    """`data` as UTF-8 text; UTF-16, Latin-1 and binary content are refused with the offending offset."""
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise TwinError(f"{label}: is UTF-16 text; save it as UTF-8")
    nul = data.find(b"\0")
    if nul >= 0:
        raise TwinError(f"{label}: binary content (a NUL byte at offset {nul}); expected UTF-8 text")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise TwinError(f"{label}: not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start}); "
                        "save it as UTF-8") from None


def read_text(path: Path | str, label: str, max_bytes: int = MAX_BYTES) -> str:
    """A regular UTF-8 text file of at most `max_bytes`."""
    return decode_text(read_bytes(path, label, max_bytes), label)


_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.S)
_BRACKET = re.compile(r"[\[\]{}]")


def json_depth(text: str) -> int:
    """The deepest nesting of arrays and objects in a JSON text (strings skipped), without parsing it."""
    depth = deepest = 0
    for m in _BRACKET.finditer(_JSON_STRING.sub("", text)):
        depth += 1 if m.group() in "[{" else -1
        deepest = max(deepest, depth)
    return deepest


def _expanded_size(root) -> tuple[int, int]:
    """Nodes and depth of a composed YAML document with every alias expanded, counted once per distinct node
    (iteratively: a chain of aliases nests far deeper than the text). Raises on an alias inside its own anchor."""
    import yaml

    size: dict[int, tuple[int, int]] = {}
    stack: list[tuple[object, bool]] = [(root, False)]
    open_nodes: set[int] = set()
    while stack:
        node, children_done = stack.pop()
        key = id(node)
        if children_done:
            open_nodes.discard(key)
            kids = [size[id(k)] for k in _children(node)]
            size[key] = (1 + sum(n for n, _ in kids), 1 + max((d for _, d in kids), default=0))
            continue
        if key in size:
            continue
        if key in open_nodes:
            raise yaml.YAMLError("an alias refers to a node that contains it")
        open_nodes.add(key)
        stack.append((node, True))
        stack.extend((k, False) for k in _children(node) if id(k) not in size)
    return size[id(root)]


def _children(node) -> list:
    """The nodes directly inside a composed YAML node (keys and values of a mapping, items of a sequence)."""
    import yaml

    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def _yaml_loader():
    """A safe loader that refuses nesting deeper than MAX_DEPTH while composing, and a document whose aliases
    expand past MAX_NODES nodes or MAX_DEPTH levels, or into themselves, before constructing it."""
    import yaml

    class BoundedLoader(yaml.SafeLoader):
        depth = 0

        def compose_node(self, parent, index):
            self.depth += 1
            try:
                if self.depth > MAX_DEPTH:
                    raise yaml.YAMLError(f"nested more than {MAX_DEPTH} levels deep")
                return super().compose_node(parent, index)
            finally:
                self.depth -= 1

        def construct_document(self, node):
            nodes, depth = _expanded_size(node)
            if nodes > MAX_NODES:
                raise yaml.YAMLError(f"its aliases expand to {nodes:,} nodes, more than {MAX_NODES:,}")
            if depth > MAX_DEPTH:
                raise yaml.YAMLError(f"its aliases nest it more than {MAX_DEPTH} levels deep")
            return super().construct_document(node)

    return BoundedLoader


def parse_mapping(text: str, label: str, fmt: Literal["json", "yaml"]) -> dict:
    """A JSON or YAML document that must be a mapping; a malformed or too deep one is a one-line TwinError."""
    if fmt == "json":
        if json_depth(text) > MAX_DEPTH:
            raise TwinError(f"{label}: nested more than {MAX_DEPTH} levels deep")
        try:
            raw = json.loads(text, parse_constant=_no_constant)
        except json.JSONDecodeError as exc:
            raise TwinError(f"{label}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
        except ValueError as exc:
            raise TwinError(f"{label}: not valid JSON ({exc})") from None
    else:
        import yaml

        try:
            raw = yaml.load(text, Loader=_yaml_loader())
        except yaml.YAMLError as exc:
            raise TwinError(f"{label}: not valid YAML ({str(exc).splitlines()[0]})") from None
        except (RecursionError, ValueError, OverflowError) as exc:  # e.g. a timestamp out of range
            raise TwinError(f"{label}: not valid YAML ({type(exc).__name__}: {exc})") from None
    if not isinstance(raw, dict):
        raise TwinError(f"{label}: expected a mapping at the top level")
    return raw


def _no_constant(name: str) -> float:
    raise ValueError(f"{name} is not a JSON number")


def read_mapping(path: Path | str, label: str, fmt: Literal["json", "yaml"]) -> dict:
    """A JSON or YAML mapping read through the file boundary."""
    return parse_mapping(read_text(path, label), label, fmt)


_LIMITS = ("less_than", "less_than_equal", "greater_than", "greater_than_equal", "finite_number")


def validation_message(exc: ValidationError, label: str, cls: type[BaseModel] | None = None) -> str:
    """One line naming the first offending field and why; a limit is followed by the field's description
    (the reason for the limit) when `cls` declares one."""
    err = exc.errors()[0]
    where = ".".join(str(p) for p in err["loc"]) or "(top level)"
    msg = " ".join(err["msg"].removeprefix("Value error, ").split())
    why = _description(cls, err["loc"]) if cls is not None and err["type"] in _LIMITS else None
    extra = f" (and {len(exc.errors()) - 1} more)" if len(exc.errors()) > 1 else ""
    return f"{label}: field '{where}': {msg}{f' ({why})' if why else ''}{extra}"


def _description(cls: type[BaseModel], loc: tuple) -> str | None:
    """The description of the field at `loc` inside `cls` (nested models followed), if any."""
    import typing

    info = None
    for part in loc:
        fields = getattr(cls, "model_fields", None)
        if not isinstance(part, str) or not fields or part not in fields:
            break
        info = fields[part]
        inner = [a for a in typing.get_args(info.annotation) if isinstance(a, type)] or [info.annotation]
        cls = next((a for a in inner if isinstance(a, type) and issubclass(a, BaseModel)), None)
        if cls is None:
            break
    if info is None:
        return None
    return info.description or next((m.description for m in info.metadata if getattr(m, "description", None)), None)


def validated(cls: type[M], raw: dict, label: str) -> M:
    """`raw` as a `cls`; the first invalid field is a one-line TwinError."""
    try:
        return cls.model_validate(raw)
    except ValidationError as exc:
        raise TwinError(validation_message(exc, label, cls)) from None
    except RecursionError:
        raise TwinError(f"{label}: nested too deeply") from None


def _same(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return a.resolve() == b.resolve()


def check_target(path: Path | str, label: str | None = None, inputs: Iterable[Path | str | None] = (),
                 directory: bool = False) -> Path:
    """Refuse an output path that cannot or must not be written; return it.

    Refused: a system path (/proc, /sys, /dev), an existing directory (or, with `directory`, an existing
    non-directory), a device, FIFO or socket, a file that is also an input of the same command, a missing
    or non-directory parent, an unwritable directory, a read-only filesystem.
    """
    path = Path(path)
    label = label or f"output {path}"
    resolved = path.resolve()
    if any(str(resolved) == d or str(resolved).startswith(d + "/") for d in SYSTEM_DIRS):
        raise TwinError(f"{label}: {resolved} is a system path; write to a regular directory")
    try:
        st = os.stat(path)
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise TwinError(f"{label}: cannot inspect it ({_oserror(exc)})") from None
    if st is not None:
        if directory != stat.S_ISDIR(st.st_mode):
            kind = "not a directory" if directory else _kind(st.st_mode)
            raise TwinError(f"{label}: is {kind}; give {'a directory' if directory else 'a file path'}")
        for other in inputs:
            if other is not None and _same(path, Path(other)):
                raise TwinError(f"{label}: is also an input of this command; refusing to overwrite it")
    parent = resolved.parent
    if not parent.is_dir():
        raise TwinError(f"{label}: directory {parent} does not exist")
    if _read_only(parent):
        raise TwinError(f"{label}: {parent} is on a read-only filesystem")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise TwinError(f"{label}: directory {parent} is not writable")
    return path


def _read_only(directory: Path) -> bool:
    try:
        return bool(os.statvfs(directory).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def write_atomic(path: Path | str, content: str | bytes, label: str | None = None,
                 inputs: Iterable[Path | str | None] = ()) -> None:
    """Write `content` to `path` through a temporary file in the same directory and a rename.

    The target is checked first (`check_target`); an existing file keeps its permissions, a new one gets
    those the umask gives. Any failure is a one-line TwinError and leaves no temporary file behind.
    """
    path = check_target(path, label, inputs)
    label = label or f"output {path}"
    data = content.encode() if isinstance(content, str) else content
    try:
        mode = stat.S_IMODE(os.stat(path).st_mode)
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        mode = 0o666 & ~umask
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.resolve().parent)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fchmod(f.fileno(), mode)
            os.fsync(f.fileno())
        os.replace(tmp, path)
        tmp = None
    except OSError as exc:
        why = "the disk is full" if exc.errno == errno.ENOSPC else _oserror(exc)
        raise TwinError(f"{label}: cannot write ({why})") from None
    finally:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)


def output_dir(path: Path | str, label: str | None = None, inputs: Iterable[Path | str | None] = ()) -> Path:
    """A directory for several outputs: checked as `check_target`, created when missing (its parent must exist)."""
    path = check_target(path, label or f"output directory {path}", inputs, directory=True)
    try:
        path.mkdir(exist_ok=True)
    except OSError as exc:
        raise TwinError(f"{label or f'output directory {path}'}: cannot create ({_oserror(exc)})") from None
    return path


def refuse_overwrite(path: Path | str, what: str) -> None:
    """Raise when `path` exists: measured data and fitted profiles are never silently replaced."""
    if Path(path).exists():
        raise TwinError(f"{path} exists; {what} is never overwritten, choose another output path")


def save_figure(fig, path: Path | str, dpi: int, label: str | None = None,
                inputs: Iterable[Path | str | None] = ()) -> Path:
    """Render a matplotlib figure to PNG in memory, then write it through `write_atomic`."""
    import io

    check_target(path, label, inputs)
    buf = io.BytesIO()
    fig.savefig(buf, dpi=dpi, format="png")
    write_atomic(path, buf.getvalue(), label, inputs)
    return Path(path)
