"""Atomic file writes and a refusal to overwrite what a user measured."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Literal, TypeVar

from pydantic import BaseModel, ValidationError

from twin.errors import TwinError

M = TypeVar("M", bound=BaseModel)


def write_atomic(path: Path | str, text: str) -> None:
    """Write `text` to `path` through a temporary file in the same directory and a rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def refuse_overwrite(path: Path | str, what: str) -> None:
    """Raise when `path` exists: measured data and fitted profiles are never silently replaced."""
    if Path(path).exists():
        raise TwinError(f"{path} exists; {what} is never overwritten, choose another output path")


def parse_mapping(text: str, label: str, fmt: Literal["json", "yaml"]) -> dict:
    """A JSON or YAML document that must be a mapping; a malformed one is a one-line TwinError."""
    if fmt == "json":
        try:
            raw = json.loads(text)
        except json.JSONDecodeError as exc:
            raise TwinError(f"{label}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
    else:
        import yaml

        try:
            raw = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise TwinError(f"{label}: not valid YAML ({str(exc).splitlines()[0]})") from None
    if not isinstance(raw, dict):
        raise TwinError(f"{label}: expected a mapping at the top level")
    return raw


def read_mapping(path: Path | str, label: str, fmt: Literal["json", "yaml"]) -> dict:
    path = Path(path)
    if not path.is_file():
        raise TwinError(f"{label}: no such file")
    return parse_mapping(path.read_text(), label, fmt)


def validation_message(exc: ValidationError, label: str) -> str:
    """One line naming the first offending field and why."""
    err = exc.errors()[0]
    where = ".".join(str(p) for p in err["loc"]) or "(top level)"
    msg = err["msg"].removeprefix("Value error, ")
    extra = f" (and {len(exc.errors()) - 1} more)" if len(exc.errors()) > 1 else ""
    return f"{label}: field '{where}': {msg}{extra}"


def validated(cls: type[M], raw: dict, label: str) -> M:
    """`raw` as a `cls`; the first invalid field is a one-line TwinError."""
    try:
        return cls.model_validate(raw)
    except ValidationError as exc:
        raise TwinError(validation_message(exc, label)) from None
