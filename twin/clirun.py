"""Run a typer app so that user errors become one line on stderr and a non-zero exit, never a traceback.

Shared by the `twin`, `executor` and `calibration` commands.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable
from typing import Any

import typer
from pydantic import ValidationError
from rich.console import Console

from twin.errors import TwinError

INTERRUPTED = 130  # the shell's exit status of a command ended by SIGINT


def make_console(stderr: bool = False) -> Console:
    """A rich console; when output is not a terminal, wide enough that tables are not truncated."""
    stream = sys.stderr if stderr else sys.stdout
    return Console(stderr=stderr, width=None if stream.isatty() else 160)


def run_app(app: typer.Typer, prog: str, user_errors: tuple[type[BaseException], ...] = (),
            argv: list[str] | None = None) -> None:
    """Call `app` (on `argv`, default sys.argv); TwinError and `user_errors` exit 2, usage errors with
    their code."""
    try:
        code = app(args=argv, standalone_mode=False, prog_name=prog)  # a command's typer.Exit comes back as its code
    except (TwinError, *user_errors) as exc:
        sys.stderr.write(f"{prog}: error: {one_line(str(exc))}\n")
        sys.exit(2)
    except ValidationError as exc:  # a model built from options (e.g. --cards) rather than read from a file
        from twin.fileio import validation_message

        sys.stderr.write(f"{prog}: error: {validation_message(exc, exc.title)}\n")
        sys.exit(2)
    except RecursionError:
        sys.stderr.write(f"{prog}: error: the input is nested too deeply\n")
        sys.exit(2)
    except MemoryError:
        sys.stderr.write(f"{prog}: error: out of memory; the input asks for more than this machine has\n")
        sys.exit(2)
    except typer.TyperException as exc:  # usage errors: missing option, bad value, ...
        if exc.format_message():  # empty when help was shown for a bare command
            sys.stderr.write(f"{prog}: error: {exc.format_message()} (see `{prog} --help`)\n")
        sys.exit(getattr(exc, "exit_code", 2) or 2)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except (typer.Abort, KeyboardInterrupt):
        sys.stderr.write(f"{prog}: interrupted\n")
        sys.exit(INTERRUPTED)
    except BrokenPipeError:
        sys.exit(0)
    if code == INTERRUPTED:  # typer turns Ctrl-C inside a command into this code
        sys.stderr.write(f"{prog}: interrupted\n")
    if isinstance(code, int) and code:
        sys.exit(code)


def one_line(message: str) -> str:
    """A message as a single line (newlines folded)."""
    return " ".join(message.split())


def bounded(lo: int | None, hi: int | None, why: str) -> Callable[[Any], Any]:
    """A typer option callback refusing a value outside [lo, hi] with one line saying the limit and `why`."""

    def check(value: Any) -> Any:
        if value is None:
            return value
        if value != value or (lo is not None and value < lo) or (hi is not None and value > hi):  # NaN, or out
            span = f"at least {lo:,}" if hi is None else f"at most {hi:,}" if lo is None else f"{lo:,} to {hi:,}"
            raise typer.BadParameter(f"{value} is outside its domain, {span}: {why}")
        return value

    return check


def _finite(obj: Any) -> Any:
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_finite(v) for v in obj]
    return obj


def json_text(obj: Any, indent: int | None = 2) -> str:
    """Strict JSON: a NaN or infinite number becomes null (bare NaN/Infinity is not JSON)."""
    return json.dumps(_finite(obj), indent=indent, allow_nan=False)


def working(what: str):
    """A transient spinner on stderr while a long computation runs (drawn only on a terminal)."""
    return make_console(stderr=True).status(f"{what}...", spinner="dots")
