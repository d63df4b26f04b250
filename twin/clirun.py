"""Run a typer app so that user errors become one line on stderr and a non-zero exit, never a traceback.

Shared by the `twin`, `executor` and `calibration` commands.
"""

from __future__ import annotations

import sys

import typer
from rich.console import Console

from twin.errors import TwinError


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
        sys.stderr.write(f"{prog}: error: {exc}\n")
        sys.exit(2)
    except typer.TyperException as exc:  # usage errors: missing option, bad value, ...
        if exc.format_message():  # empty when help was shown for a bare command
            sys.stderr.write(f"{prog}: error: {exc.format_message()} (see `{prog} --help`)\n")
        sys.exit(getattr(exc, "exit_code", 2) or 2)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except (typer.Abort, KeyboardInterrupt):
        sys.stderr.write(f"{prog}: interrupted\n")
        sys.exit(130)
    except BrokenPipeError:
        sys.exit(0)
    if isinstance(code, int) and code:
        sys.exit(code)
