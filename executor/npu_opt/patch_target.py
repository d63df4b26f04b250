"""Patch targets (module + attribute) and whether the installed packages have them."""

from __future__ import annotations

import importlib

from pydantic import BaseModel, ConfigDict

from executor.errors import ExecutorError


class PatchTargetMissing(ExecutorError):
    """A patch target (module + attribute) is absent from the installed package version."""


class PatchTarget(BaseModel):
    """One thing a patch changes: an attribute path inside an importable module."""

    model_config = ConfigDict(frozen=True)

    module: str
    attribute: str  # dotted path inside the module, e.g. "ParallelConfig.has_unfinished_dp"
    dist: str  # distribution that ships the module
    params: tuple[str, ...] = ()  # parameters of the original a replacement takes the same arguments as


    @property
    def label(self) -> str:
        return f"{self.module}:{self.attribute}"

    def resolve(self) -> tuple[object, str]:
        """Import the module and return (owner, attribute name); raise PatchTargetMissing when absent."""
        try:
            obj: object = importlib.import_module(self.module)
        except ImportError as exc:
            raise PatchTargetMissing(f"patch target {self.label}: cannot import {self.module} ({exc})") from None
        *owners, name = self.attribute.split(".")
        for part in owners:
            if not hasattr(obj, part):
                raise PatchTargetMissing(f"patch target {self.label}: {part!r} is missing from the installed "
                                         f"{self.dist}")
            obj = getattr(obj, part)
        if not hasattr(obj, name):
            raise PatchTargetMissing(f"patch target {self.label}: {name!r} is missing from the installed {self.dist}")
        if self.params:
            import inspect

            self.require_params(list(inspect.signature(getattr(obj, name)).parameters))
        return obj, name

    def require_params(self, found: list[str]) -> None:
        """Raise PatchTargetMissing unless every one of `params` is among the parameters `found`."""
        lacking = [p for p in self.params if p not in found]
        if lacking:
            raise PatchTargetMissing(f"patch target {self.label}: the installed {self.dist}'s signature has no "
                                     f"parameter {', '.join(lacking)} (it has {', '.join(found) or 'none'})")


class TargetCheck(BaseModel):
    """Whether one patch target was found in the installed packages."""

    label: str
    found: bool
    detail: str = ""
