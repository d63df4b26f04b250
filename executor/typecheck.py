"""Check config values against the field types of verl's config dataclasses.

verl converts its config sections with Hydra's `instantiate` (verl/utils/config.py omega_conf_to_dataclass),
which calls the dataclass without checking types: a string where an int belongs only fails deep inside a
worker. This walks a resolved section and its `_target_` dataclass and reports each primitive field whose
value has the wrong type.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any

_PRIMITIVES = (bool, int, float, str)


def _allowed(annotation: Any) -> tuple[type, ...] | None:
    """The primitive types a field accepts (None when the annotation is not a primitive or an optional one)."""
    if annotation in _PRIMITIVES:
        return (annotation,)
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = typing.get_args(annotation)
        if all(a in _PRIMITIVES or a is type(None) for a in args):
            return tuple(args)
    return None


def _accepts(allowed: tuple[type, ...], value: Any) -> bool:
    if value is None:  # verl's own YAML leaves some non-Optional fields null; only wrong types count
        return True
    if isinstance(value, bool):
        return bool in allowed
    if isinstance(value, int):
        return int in allowed or float in allowed
    return any(isinstance(value, t) for t in allowed if t is not type(None))


def _hints(target: str | None) -> dict[str, Any]:
    if not target:
        return {}
    from hydra.utils import get_class

    try:
        cls = get_class(target)
        return typing.get_type_hints(cls) if dataclasses.is_dataclass(cls) else {}
    except Exception:
        return {}


def type_problems(section: dict[str, Any], prefix: str) -> list[str]:
    """One message per value in `section` (resolved, plain containers) of the wrong primitive type."""
    hints = _hints(section.get("_target_"))
    problems = []
    for key, value in section.items():
        if isinstance(value, dict):
            problems += type_problems(value, f"{prefix}.{key}")
            continue
        allowed = _allowed(hints.get(key))
        if allowed is not None and not _accepts(allowed, value):
            names = " or ".join("None" if t is type(None) else t.__name__ for t in allowed)
            problems.append(f"{prefix}.{key}={value!r}: expected {names}")
    return problems
