"""The executor's consoles and its one-line refusal, shared by every executor command."""

from __future__ import annotations

import typer
from rich.console import Console

err = Console(stderr=True, highlight=False, soft_wrap=True)
out = Console(highlight=False, soft_wrap=True)


def fail(message: str, code: int = 2) -> typer.Exit:
    """Print `message` as one error line on stderr; return the Exit to raise."""
    err.print(f"executor: error: {message}", markup=False)
    return typer.Exit(code)
