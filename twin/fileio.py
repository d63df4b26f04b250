"""Atomic file writes and a refusal to overwrite what a user measured."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from twin.errors import TwinError


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
