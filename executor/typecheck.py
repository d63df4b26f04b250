"""Check config values against the field types of verl's config dataclasses.

verl converts its config sections with Hydra's `instantiate` (verl/utils/config.py omega_conf_to_dataclass),
which calls the dataclass without checking types: a string where an int belongs only fails deep inside a
worker. This walks a resolved section and its `_target_` dataclass and reports each primitive field whose
value has the wrong type.

The field types come from the imported dataclass (`imported_hints`, `executor run`) or from its source
(`source_hints`, `executor command-file`: the class and its base dataclasses read with `ast`, verl not imported).
"""

from __future__ import annotations

import ast
import dataclasses
import types
import typing
from collections.abc import Callable
from typing import Any

from executor.source_lookup import Found, Undecided, lookup, resolve_base

_PRIMITIVES = (bool, int, float, str)
Hints = Callable[[str | None], dict[str, tuple[type, ...]]]  # `_target_` -> field -> the primitive types it accepts


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


def imported_hints(target: str | None) -> dict[str, tuple[type, ...]]:
    """The primitive fields of the imported `_target_` dataclass (none when it is not one)."""
    if not target:
        return {}
    from hydra.utils import get_class

    try:
        cls = get_class(target)
        hints = typing.get_type_hints(cls) if dataclasses.is_dataclass(cls) else {}
    except Exception:
        return {}
    return {k: a for k, a in ((k, _allowed(v)) for k, v in hints.items()) if a is not None}


_NAMES: dict[str, type] = {"bool": bool, "int": int, "float": float, "str": str, "None": type(None)}


def _members(node: ast.expr) -> list[type] | None:
    """The types a source annotation admits, unions flattened (None when one is not a primitive or None)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):  # a string annotation
        return _members(ast.parse(node.value, mode="eval").body)
    if isinstance(node, ast.Constant) and node.value is None:
        return [type(None)]
    if isinstance(node, ast.Name):
        return [_NAMES[node.id]] if node.id in _NAMES else None
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        left, right = _members(node.left), _members(node.right)
        return None if left is None or right is None else left + right
    if isinstance(node, ast.Subscript):
        origin = node.value.attr if isinstance(node.value, ast.Attribute) else getattr(node.value, "id", "")
        args = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        parts = [_members(a) for a in args]
        if origin not in ("Optional", "Union") or any(p is None for p in parts):
            return None
        flat = [t for p in parts for t in p or ()]
        return [*flat, type(None)] if origin == "Optional" else flat
    return None


def _source_allowed(node: ast.expr) -> tuple[type, ...] | None:
    """`_allowed` of an annotation read from source, with typing's union rules (flattened, duplicates dropped)."""
    members = _members(node)
    if members is None:
        return None
    unique = tuple(dict.fromkeys(members))
    if len(unique) == 1:
        return unique if unique[0] is not type(None) else None
    return unique


def _bases(found: Found) -> list[Found]:
    """The class's base classes found in the source (built-ins left out); Undecided when one cannot be found."""
    node = found.node
    if not isinstance(node, ast.ClassDef):
        raise Undecided("not a class in the source")
    out = []
    for base in node.bases:
        resolved = resolve_base(found.module, base)
        if resolved is None:
            raise Undecided(f"base {ast.unparse(base)} of {node.name} is not bound in {found.module}")
        if resolved.module != "builtins":
            out.append(resolved)
    return out


def _is_dataclass(found: Found, depth: int = 0) -> bool:
    """dataclasses.is_dataclass from the source: the class or one of its bases is decorated @dataclass."""
    node = found.node
    if not isinstance(node, ast.ClassDef) or depth > 16:
        return False
    if any(ast.unparse(d.func if isinstance(d, ast.Call) else d).split(".")[-1] == "dataclass"
           for d in node.decorator_list):
        return True
    return any(_is_dataclass(b, depth + 1) for b in _bases(found))


def _class_hints(found: Found, depth: int = 0) -> dict[str, tuple[type, ...] | None]:
    """Annotated fields of a class in the source, its bases' first (as typing.get_type_hints collects them)."""
    if depth > 16:
        raise Undecided("class hierarchy too deep")
    hints: dict[str, tuple[type, ...] | None] = {}
    for base in reversed(_bases(found)):
        hints.update(_class_hints(base, depth + 1))
    for stmt in found.node.body:  # type: ignore[union-attr]
        if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
            hints[stmt.target.id] = _source_allowed(stmt.annotation)
    return hints


def source_hints(target: str | None) -> dict[str, tuple[type, ...]]:
    """`imported_hints` read from the installed source, without importing the `_target_`'s module (imported
    only where the source cannot say)."""
    if not target or "." not in target:
        return {}
    module, _, name = target.rpartition(".")
    try:
        found = lookup(module, name)
        if found is None or not _is_dataclass(found):
            return {}
        hints = _class_hints(found)
    except (Undecided, SyntaxError, OSError):
        return imported_hints(target)
    except ModuleNotFoundError:
        return {}
    return {k: v for k, v in hints.items() if v is not None}


def type_problems(section: dict[str, Any], prefix: str, hints_of: Hints = imported_hints) -> list[str]:
    """One message per value in `section` (resolved, plain containers) of the wrong primitive type."""
    hints = hints_of(section.get("_target_"))
    problems = []
    for key, value in section.items():
        if isinstance(value, dict):
            problems += type_problems(value, f"{prefix}.{key}", hints_of)
            continue
        allowed = hints.get(key)
        if allowed is not None and not _accepts(allowed, value):
            names = " or ".join("None" if t is type(None) else t.__name__ for t in allowed)
            problems.append(f"{prefix}.{key}={value!r}: expected {names}")
    return problems
