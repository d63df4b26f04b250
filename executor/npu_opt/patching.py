"""Replace named attributes (functions, methods, staticmethods) idempotently, when their module loads."""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType

from executor.npu_opt.base import PatchTarget, PatchTargetMissing, WorkerPatchResult, is_patched, mark_patched
from executor.npu_opt.post_import import when_imported

Factory = Callable[[Callable], Callable]  # original -> replacement
FailureListener = Callable[[str, str], None]  # (optimization id, error) of a patch that failed when its module loaded

_failure_listeners: list[FailureListener] = []


def on_late_failure(listener: FailureListener) -> None:
    """Call `listener(opt_id, error)` when a patch waiting for its module fails as the module loads (the worker hook
    records it in its report before the import raises)."""
    _failure_listeners.append(listener)


def replace(target: PatchTarget, factory: Factory, opt_id: str) -> None:
    """Resolve `target` (raising PatchTargetMissing when absent) and install `factory(original)` once."""
    owner, name = target.resolve()
    if is_patched(owner, name, opt_id):
        return
    raw = owner.__dict__.get(name) if isinstance(owner, type) else None
    if isinstance(raw, staticmethod):
        setattr(owner, name, staticmethod(mark_patched(factory(raw.__func__), opt_id)))
    else:
        setattr(owner, name, mark_patched(factory(getattr(owner, name)), opt_id))


def install(opt_id: str, patches: list[tuple[PatchTarget, Factory]]) -> WorkerPatchResult:
    """Patch each target now if its module is loaded, else as soon as it is imported in this process."""
    result = WorkerPatchResult(id=opt_id)
    for target, factory in patches:
        def apply(_module: ModuleType, target: PatchTarget = target, factory: Factory = factory) -> None:
            try:
                replace(target, factory, opt_id)
            except PatchTargetMissing as exc:
                for listener in _failure_listeners:
                    listener(opt_id, str(exc))
                raise

        (result.applied if when_imported(target.module, apply) else result.pending).append(target.label)
    return result
