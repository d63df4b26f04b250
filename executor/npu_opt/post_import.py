"""Run a callback right after a module is imported in this process (now, if it already is).

Patches use this so that a verl process imports vLLM only when it needs it, and the patch is in place
before the module's objects are used: the finder wraps the module's loader once, then steps aside.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from collections.abc import Callable
from types import ModuleType

Callback = Callable[[ModuleType], None]

_callbacks: dict[str, list[Callback]] = {}


class _Loader(importlib.abc.Loader):
    def __init__(self, inner: importlib.abc.Loader) -> None:
        self.inner = inner

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self.inner.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self.inner.exec_module(module)
        for callback in _callbacks.pop(module.__name__, []):
            callback(module)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname: str, path: object = None, target: object = None):
        if fullname not in _callbacks:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _Loader(spec.loader)
                return spec
        return None


_FINDER = _Finder()


def when_imported(module_name: str, callback: Callback) -> bool:
    """Call `callback(module)` once `module_name` is imported; True when it ran immediately."""
    module = sys.modules.get(module_name)
    if module is not None:
        callback(module)
        return True
    _callbacks.setdefault(module_name, []).append(callback)
    if _FINDER not in sys.meta_path:
        sys.meta_path.insert(0, _FINDER)
    return False
