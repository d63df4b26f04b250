"""Find a module's classes, functions and attributes in its installed source, without importing it.

Importing verl takes seconds (it imports torch); `executor command-file` answers the same questions from the
source files: the module is located with importlib's path finders (its parent packages are not imported), parsed
with `ast`, and a dotted attribute is followed through class bodies, base classes, `from ... import` and
`import ... as`. Whatever the source alone cannot decide (a module without Python source, a module-level
`__getattr__`, a base class built at run time) raises `Undecided`, so that the caller imports instead of guessing.
"""

from __future__ import annotations

import ast
import builtins
import importlib.machinery
import importlib.util
import sys
from dataclasses import dataclass
from functools import cache
from importlib.machinery import ModuleSpec
from pathlib import Path

_MAX_DEPTH = 24  # import/alias hops followed before giving up (a re-export cycle)


class Undecided(Exception):
    """The installed source alone cannot say whether the name exists."""


@dataclass(frozen=True)
class Found:
    """Where a name is bound: `node` (ClassDef, FunctionDef, an assigned value, or None for a module) in `module`."""

    module: str
    node: ast.AST | None
    submodule: str | None = None  # the name is a module (or package)


def module_spec(name: str) -> ModuleSpec | None:
    """The spec of module `name` without importing it or its parent packages (None when there is no such module)."""
    loaded = sys.modules.get(name)
    if loaded is not None and getattr(loaded, "__spec__", None) is not None:
        return loaded.__spec__
    return _located(name)


@cache  # for this process: the installed files do not change while one command runs
def _located(name: str) -> ModuleSpec | None:
    top, *rest = name.split(".")
    try:
        spec = importlib.util.find_spec(top)  # a top-level name: nothing is imported
    except (ImportError, ValueError):
        return None
    for i, _ in enumerate(rest):
        if spec is None or not spec.submodule_search_locations:
            return None
        spec = importlib.machinery.PathFinder.find_spec(".".join([top, *rest[:i + 1]]),
                                                        list(spec.submodule_search_locations))
    return spec


def module_exists(name: str) -> bool:
    return module_spec(name) is not None


@cache
def _tree(path: str) -> ast.Module:
    return ast.parse(Path(path).read_text(encoding="utf-8"), filename=path)


def module_tree(name: str) -> ast.Module:
    """The parsed source of module `name`; ModuleNotFoundError when absent, Undecided when it has no .py source."""
    spec = module_spec(name)
    if spec is None:
        raise ModuleNotFoundError(name)
    origin = spec.origin
    if origin == "frozen":  # a frozen standard-library module: its source is on the standard path
        on_path = importlib.machinery.PathFinder.find_spec(name)
        origin = on_path.origin if on_path is not None else None
    if origin is None or not origin.endswith(".py"):
        raise Undecided(f"{name} has no Python source ({spec.origin})")
    return _tree(origin)


def _is_package(name: str) -> bool:
    spec = module_spec(name)
    return spec is not None and spec.submodule_search_locations is not None


def _statements(body: list[ast.stmt]) -> list[ast.stmt]:
    """Statements of a module or class body, with those inside if/try/with blocks (bound at run time too)."""
    out: list[ast.stmt] = []
    for stmt in body:
        out.append(stmt)
        if isinstance(stmt, ast.If):
            out += _statements(stmt.body) + _statements(stmt.orelse)
        elif isinstance(stmt, ast.Try | ast.TryStar):
            out += _statements(stmt.body) + _statements(stmt.orelse) + _statements(stmt.finalbody)
            for handler in stmt.handlers:
                out += _statements(handler.body)
        elif isinstance(stmt, ast.With | ast.AsyncWith):
            out += _statements(stmt.body)
    return out


def _names(target: ast.expr) -> list[str]:
    if isinstance(target, ast.Name):
        return [target.id]
    if isinstance(target, ast.Tuple | ast.List):
        return [n for t in target.elts for n in _names(t)]
    return []


def _absolute(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    """The absolute module an ImportFrom in `module` names."""
    if not node.level:
        return node.module or ""
    base = module.split(".")
    base = base if is_package else base[:-1]
    base = base[:len(base) - node.level + 1]
    return ".".join([*base, *([node.module] if node.module else [])])


def _all_names(tree: ast.Module) -> set[str] | None:
    """A literal `__all__` of a module, or None."""
    for stmt in _statements(tree.body):
        if isinstance(stmt, ast.Assign) and "__all__" in [n for t in stmt.targets for n in _names(t)]:
            try:
                return set(ast.literal_eval(stmt.value))
            except ValueError:
                return None
    return None


def _binding(stmt: ast.stmt, name: str) -> ast.AST | None:
    """What `stmt` binds to `name` in a body (a definition or an assigned value), or None when it does not."""
    if isinstance(stmt, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and stmt.name == name:
        return stmt
    if isinstance(stmt, ast.Assign) and name in [n for t in stmt.targets for n in _names(t)]:
        return stmt.value
    if isinstance(stmt, ast.AnnAssign | ast.AugAssign) and stmt.value is not None and _names(stmt.target) == [name]:
        return stmt.value
    return None


_FOUND: dict[tuple[str, str], Found | None] = {}  # for this process, as _located


def find_in_module(module: str, name: str, depth: int = 0) -> Found | None:
    """Where `name` is bound at the top level of `module` (following re-exports), or None when it is not."""
    if (module, name) not in _FOUND:
        _FOUND[module, name] = _find_in_module(module, name, depth)
    return _FOUND[module, name]


def _find_in_module(module: str, name: str, depth: int) -> Found | None:
    if depth > _MAX_DEPTH:
        raise Undecided(f"{module}.{name}: re-exports too deep to follow")
    tree = module_tree(module)
    package = _is_package(module)
    found: Found | None = None
    for stmt in _statements(tree.body):
        bound = _binding(stmt, name)
        if bound is not None:
            found = Found(module, bound)
        elif isinstance(stmt, ast.Import):
            for alias in stmt.names:
                if alias.asname == name:
                    found = Found(module, None, alias.name)
                elif alias.asname is None and alias.name.split(".")[0] == name:
                    found = Found(module, None, name)
        elif isinstance(stmt, ast.ImportFrom):
            source = _absolute(module, package, stmt)
            for alias in stmt.names:
                if alias.name == "*":
                    exported = _all_names(module_tree(source)) if module_exists(source) else None
                    if exported is None or name in exported:
                        found = _from_import(source, name, depth) or found
                elif (alias.asname or alias.name) == name:
                    found = _from_import(source, alias.name, depth, required=True)
    if found is None and any(_binding(s, "__getattr__") is not None for s in tree.body):
        raise Undecided(f"{module} defines a module __getattr__")
    return found


def _from_import(source: str, name: str, depth: int, required: bool = False) -> Found | None:
    """`from source import name`: the name in `source`, else its submodule; Undecided for an explicit import
    the source cannot resolve (the import itself would fail)."""
    if module_exists(source):
        found = find_in_module(source, name, depth + 1)
        if found is not None:
            return found
    if module_exists(f"{source}.{name}"):
        return Found(source, None, f"{source}.{name}")
    if required:
        raise Undecided(f"from {source} import {name}: not found in the installed source")
    return None


def resolve_base(module: str, expr: ast.expr, depth: int = 0) -> Found | None:
    """What a name or dotted name in `module` refers to (a base class, an alias)."""
    if isinstance(expr, ast.Subscript):  # Generic[T], Base[Config]
        return resolve_base(module, expr.value, depth)
    if isinstance(expr, ast.Name):
        found = find_in_module(module, expr.id, depth + 1)
        if found is None and hasattr(builtins, expr.id):
            return Found("builtins", None)
        return found
    if isinstance(expr, ast.Attribute):
        owner = resolve_base(module, expr.value, depth + 1)
        return None if owner is None else member(owner, expr.attr, depth + 1)
    raise Undecided(f"{module}: {ast.unparse(expr)} is computed at run time")


def member(owner: Found, name: str, depth: int = 0) -> Found | None:
    """Attribute `name` of what `owner` is (a module, a class and its bases, an alias), or None when absent."""
    if depth > _MAX_DEPTH:
        raise Undecided(f"{name}: too many hops to follow")
    if owner.submodule is not None:
        found = find_in_module(owner.submodule, name, depth + 1)
        if found is None and name == "__path__":
            return Found(owner.submodule, None) if _is_package(owner.submodule) else None
        if found is None and module_exists(f"{owner.submodule}.{name}"):  # `import a.b` bound a's attribute b
            return Found(owner.submodule, None, f"{owner.submodule}.{name}")
        return found
    if owner.module == "builtins":
        raise Undecided(f"{name}: looked up on a built-in")
    node = owner.node
    if isinstance(node, ast.Name | ast.Attribute | ast.Subscript):  # an alias: X = Y
        target = resolve_base(owner.module, node, depth + 1)
        if target is None:
            raise Undecided(f"{ast.unparse(node)} is not bound in {owner.module}")
        return member(target, name, depth + 1)
    if not isinstance(node, ast.ClassDef):
        raise Undecided(f"{name}: looked up on a value the source does not describe")
    for stmt in _statements(node.body):
        bound = _binding(stmt, name)
        if bound is not None:
            return Found(owner.module, bound)
    for base in node.bases:
        resolved = resolve_base(owner.module, base, depth + 1)
        if resolved is None:
            raise Undecided(f"base {ast.unparse(base)} of {node.name} is not bound in {owner.module}")
        if resolved.module == "builtins":
            if hasattr(getattr(builtins, ast.unparse(base).split("[")[0]), name):
                return resolved
            continue
        found = member(resolved, name, depth + 1)
        if found is not None:
            return found
    return None


def lookup(module: str, attribute: str) -> Found | None:
    """`module` + dotted `attribute` in the installed source: where it is bound, or None when it is absent
    (ModuleNotFoundError when the module is, Undecided when the source cannot say)."""
    if module_spec(module) is None:
        raise ModuleNotFoundError(module)
    found: Found | None = Found(module, None, module)
    for part in attribute.split("."):
        found = member(found, part) if found is not None else None
        if found is None:
            return None
    return found


def parameters(found: Found) -> list[str]:
    """Parameter names of a function found in the source (Undecided for anything else)."""
    node = found.node
    if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
        raise Undecided("not a function definition in the source")
    a = node.args
    return [p.arg for p in (*a.posonlyargs, *a.args, *((a.vararg,) if a.vararg else ()), *a.kwonlyargs,
                            *((a.kwarg,) if a.kwarg else ()))]
