"""Readers of verl's per-step metrics: the file logger's JSONL and the console logger's lines.

verl's FileLogger (verl/utils/tracking.py) writes one JSON object per step, {"step": N, "data": {...}};
a flat {"step": N, "name": value, ...} is read too. The console logger prints
`step:N - name:value - name:value` (values through pprint.pformat, so numpy scalars look like
`np.float64(1.5)`), possibly behind a Ray prefix such as `(TaskRunner pid=12)`.

A line is either read whole or reported as bad with its number and reason: a metrics line with a pair
that does not parse, or a console metrics line cut off before its newline, contributes nothing.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from calibration.measurements import BadLine

LogFormat = Literal["metrics-jsonl", "console"]

_STEP = re.compile(r"(?:^|[\s)])step:(\d+)((?: - .*)?)$")
_NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?|nan|inf)")
_NUMPY = re.compile(r"np\.(?:float|int|uint)\d+\((.*)\)")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


@dataclass
class StepMetrics:
    """The numeric metrics of one step, read from one line."""

    step: int
    line: int
    values: dict[str, float | None]  # None: not finite (NaN, inf; orjson writes NaN as null)


@dataclass
class ParsedLog:
    path: Path
    format: LogFormat
    steps: list[StepMetrics] = field(default_factory=list)
    bad_lines: list[BadLine] = field(default_factory=list)
    other_lines: int = 0  # console output that is not a metrics line


def detect_format(path: Path, text: str) -> LogFormat:
    """JSONL when the name says so or the first non-blank line is a step object, else console."""
    if path.suffix == ".jsonl":
        return "metrics-jsonl"
    first = next((line for line in text.splitlines() if line.strip()), "")
    try:
        _jsonl_line(first, 1)
    except ValueError:
        return "console"
    return "metrics-jsonl"


def parse_log(path: Path, text: str) -> ParsedLog:
    """Every step's metrics in `text`, and every line that could not be read."""
    parsed = ParsedLog(path, detect_format(path, text))
    lines = text.split("\n")
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        complete = number < len(lines)  # the last piece has no newline after it
        try:
            if parsed.format == "metrics-jsonl":
                parsed.steps.append(_jsonl_line(line, number))
                continue
            step = _console_line(_ANSI.sub("", line).rstrip("\r"), number, complete)
        except ValueError as exc:
            parsed.bad_lines.append(BadLine(number, str(exc)))
            continue
        if step is None:
            parsed.other_lines += 1
        else:
            parsed.steps.append(step)
    return parsed


def _jsonl_line(line: str, number: int) -> StepMetrics:
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not JSON ({exc.msg})") from None
    if not isinstance(obj, dict):
        raise ValueError("not a JSON object")
    step = obj.get("step")
    if not isinstance(step, int) or isinstance(step, bool):
        raise ValueError("no integer 'step'")
    data = obj["data"] if "data" in obj else {k: v for k, v in obj.items() if k != "step"}
    if not isinstance(data, dict):
        raise ValueError("'data' is not an object")
    values: dict[str, float | None] = {}
    for name, value in data.items():
        if value is None:
            values[name] = None
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            values[name] = finite_or_none(value)
    return StepMetrics(step, number, values)


def _console_line(line: str, number: int, complete: bool) -> StepMetrics | None:
    match = _STEP.search(line)
    if match is None:
        return None
    if not complete:
        raise ValueError("metrics line cut off (no newline)")
    values: dict[str, float | None] = {}
    pairs = match.group(2)[len(" - "):].split(" - ") if match.group(2) else []
    for pair in pairs:
        name, sep, raw = pair.rpartition(":")
        if not sep or not name:
            raise ValueError(f"malformed pair {pair[:40]!r}")
        values[name] = finite_or_none(console_value(raw.strip(), pair))
    return StepMetrics(int(match.group(1)), number, values)


def finite_or_none(value: float | int) -> float | None:
    """`value` as a float; None for NaN, inf and an integer beyond the largest float (JSON allows any digits)."""
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def console_value(raw: str, pair: str) -> float:
    """A value as pprint.pformat writes a number: 1, 0.5, nan, True, np.float64(0.5)."""
    if raw in ("True", "False"):
        return float(raw == "True")
    numpy = _NUMPY.fullmatch(raw)
    if numpy:
        raw = numpy.group(1)
    if not _NUMBER.fullmatch(raw):
        raise ValueError(f"value is not a number in {pair[:40]!r}")
    return float(raw)
