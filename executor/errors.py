"""Executor errors: each becomes one line on stderr and a non-zero exit."""

from __future__ import annotations

from twin.errors import TwinError


class ExecutorError(TwinError):
    """A problem the user can fix: bad plan, unsupported installation, missing hardware or files."""


class ValidationFailed(ExecutorError):
    """verl (or a constraint verl asserts later) rejects the built configuration; one message per problem."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("; ".join(problems))
