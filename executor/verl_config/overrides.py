"""An ordered set of Hydra overrides and how each value is spelled on the command line."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

Value = bool | int | float | str | None | list

_PLAIN = re.compile(r"^[A-Za-z0-9_./@-]+$")


def hydra_value(value: Value) -> str:
    """Spell a Python value in Hydra's override grammar (quoted where the grammar needs it)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list):
        return "[" + ",".join(hydra_value(v) for v in value) + "]"
    if _PLAIN.match(value) and value not in ("null", "true", "false") and not _looks_numeric(value):
        return value
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _looks_numeric(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


@dataclass(frozen=True)
class Override:
    """One `key=value`; `add` marks a key absent from verl's defaults (spelled `+key=value`)."""

    key: str
    value: Value
    add: bool = False

    def render(self) -> str:
        return f"{'+' if self.add else ''}{self.key}={hydra_value(self.value)}"


class OverrideSet:
    """Overrides keyed by their dotted key; setting a key again replaces it (idempotent builders)."""

    def __init__(self) -> None:
        self._items: dict[str, Override] = {}

    def set(self, key: str, value: Value, *, add: bool = False) -> None:
        self._items[key] = Override(key, value, add)

    def __iter__(self) -> Iterator[Override]:
        return iter(self._items.values())

    def render(self) -> list[str]:
        return [o.render() for o in self._items.values()]
