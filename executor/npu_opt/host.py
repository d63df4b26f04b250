"""What is installed on this host, looked up without importing heavy packages where possible."""

from __future__ import annotations

import ast
import importlib.util
from functools import cache
from pathlib import Path

from executor.npu_opt.patch_target import PatchTarget, PatchTargetMissing, TargetCheck
from executor.source_lookup import Undecided, lookup, parameters
from executor.versions import installed_version


class HostEnv:
    """Installed distributions and verl's source tree (read as text: importing verl takes seconds).

    `from_source=True` (`executor command-file`) looks patch targets up in the installed source instead of
    importing their modules (executor/source_lookup.py), falling back to the import only where the source cannot
    decide; `executor run` imports them (the default).
    """

    def __init__(self, from_source: bool = False) -> None:
        self.from_source = from_source

    def version(self, dist: str) -> str | None:
        return installed_version(dist)

    def has(self, dist: str) -> bool:
        return self.version(dist) is not None

    def missing(self, dist: str) -> str:
        return f"{dist} not installed"

    @staticmethod
    @cache
    def verl_root() -> Path | None:
        spec = importlib.util.find_spec("verl")
        if spec is None or not spec.submodule_search_locations:
            return None
        return Path(next(iter(spec.submodule_search_locations)))

    def verl_source(self, rel: str) -> ast.Module | None:
        """The parsed source of `verl/<rel>`, or None when the file is absent."""
        root = self.verl_root()
        if root is None or not (root / rel).is_file():
            return None
        return _parse(root / rel)

    def check(self, target: PatchTarget) -> TargetCheck:
        """Look the target's attribute up, in its source or by importing its module (only when its distribution
        is installed)."""
        if not self.has(target.dist):
            return TargetCheck(label=target.label, found=False, detail=self.missing(target.dist))
        try:
            if not (self.from_source and in_source(target)):
                target.resolve()
        except PatchTargetMissing as exc:
            return TargetCheck(label=target.label, found=False, detail=str(exc))
        return TargetCheck(label=target.label, found=True, detail=f"{target.dist} {self.version(target.dist)}")


def in_source(target: PatchTarget) -> bool:
    """Whether the installed source has `target` (and its parameters); PatchTargetMissing when it has not, False
    when the source cannot decide."""
    try:
        found = lookup(target.module, target.attribute)
        if found is None:
            raise PatchTargetMissing(f"patch target {target.label}: {_first_missing(target)!r} is missing from the "
                                     f"installed {target.dist}")
        if target.params:
            target.require_params(parameters(found))
    except ModuleNotFoundError:
        raise PatchTargetMissing(f"patch target {target.label}: no module {target.module} in the installed "
                                 f"{target.dist}") from None
    except (Undecided, SyntaxError, UnicodeDecodeError, OSError):
        return False
    return True


def _first_missing(target: PatchTarget) -> str:
    """The first part of the target's attribute path the source lacks."""
    parts = target.attribute.split(".")
    for i in range(1, len(parts)):
        if lookup(target.module, ".".join(parts[:i])) is None:
            return parts[i - 1]
    return parts[-1]


@cache
def _parse(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), filename=str(path))


def class_fields(tree: ast.Module, cls: str) -> set[str]:
    """Annotated field names of class `cls` in `tree` (dataclass fields)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == cls:
            return {s.target.id for s in node.body if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)}
    return set()


def method_source(tree: ast.Module, cls: str, method: str) -> str | None:
    """The unparsed source of `cls.method` in `tree`, or None."""
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == cls:
            for item in node.body:
                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef) and item.name == method:
                    return ast.unparse(item)
    return None
