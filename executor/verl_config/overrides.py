"""An ordered set of Hydra overrides and how each value is spelled on the command line."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

from executor.errors import ExecutorError

Value = bool | int | float | str | None | list

_PLAIN = re.compile(r"[A-Za-z0-9_./@-]+")
# in a quoted value a backslash escapes only a quote (or the closing quote): a run of backslashes before a quote or
# the end is doubled, the quote itself escaped; other backslashes are literal (Hydra's override grammar, 1.1+)
_BEFORE_QUOTE = re.compile(r"(\\*)('|\Z)")
INTERPOLATION = "${"  # OmegaConf resolves it in any string value, quoted or not, and again after verl resolves


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
    if _PLAIN.fullmatch(value) and value not in ("null", "true", "false") and not _looks_numeric(value):
        return value
    return quoted(value)


def quoted(text: str) -> str:
    """`text` as a quoted Hydra string that verl's config reads back unchanged; ExecutorError for text holding
    '${', which no escaping keeps literal (verl's main_ppo resolves the config, then reads it again)."""
    if INTERPOLATION in text:
        raise ExecutorError(f"{text!r} holds '{INTERPOLATION}', which verl's config would read as an interpolation; "
                            "it cannot be passed to verl")
    return "'" + _BEFORE_QUOTE.sub(lambda m: m.group(1) * 2 + ("\\'" if m.group(2) else ""), text) + "'"


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
