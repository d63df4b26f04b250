"""The common interface of the Ascend optimizations (DESIGN section 6) and its small data types.

Each optimization module defines one `Optimization` subclass instance named `OPTIMIZATION`:
`detect(host)` says whether the installed verl/vLLM/vLLM-Ascend can provide it and how;
`apply_config(ctx)` sets Hydra overrides and environment variables (idempotent: setting a key again
replaces it); patches also implement `apply_in_worker()`, which runs inside every verl process through
`executor.npu_opt.worker_hook` and changes exactly the `PatchTarget`s the module names.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar, Literal

from pydantic import BaseModel

from executor.npu_opt.patch_target import PatchTarget, PatchTargetMissing, TargetCheck  # noqa: F401  (re-exported)

if TYPE_CHECKING:
    from executor.npu_opt.host import HostEnv
    from executor.verl_config.overrides import OverrideSet
    from twin.plan import Plan

Mechanism = Literal["native", "patch", "config", "env"]
# refused: the plan enables it but the executor's implementation cannot run the plan's layout
# (twin.optimizations.executor_refusals); `executor run` stops before anything starts
State = Literal["applied", "unavailable", "off", "refused"]

PATCH_MARK = "__executor_npu_opt__"


class Availability(BaseModel):
    """What `detect` found on this host."""

    id: str
    mechanism: Mechanism
    available: bool
    reason: str
    targets: list[TargetCheck] = []


class OptReport(BaseModel):
    """What was done for one optimization in one launch (the dry-run table and the run record)."""

    id: str
    mechanism: Mechanism
    state: State
    detail: str
    overrides: list[str] = []
    env: dict[str, str] = {}
    targets: list[TargetCheck] = []


class WorkerPatchResult(BaseModel):
    """What `apply_in_worker` did in one process."""

    id: str
    applied: list[str] = []  # labels patched now or already patched
    pending: list[str] = []  # labels that will be patched when their module is imported
    detail: str = ""
    error: str | None = None


@dataclass
class ApplyContext:
    """What `apply_config` writes into: the run's overrides and environment."""

    plan: Plan
    overrides: OverrideSet
    env: dict[str, str]
    worker_patches: list[str] = field(default_factory=list)  # ids the worker hook must apply

    def request_patch(self, opt_id: str) -> None:
        if opt_id not in self.worker_patches:
            self.worker_patches.append(opt_id)


def mark_patched(func: object, opt_id: str) -> object:
    setattr(func, PATCH_MARK, opt_id)
    return func


def is_patched(owner: object, name: str, opt_id: str) -> bool:
    return getattr(getattr(owner, name), PATCH_MARK, None) == opt_id


class Optimization(ABC):
    """One optimization of DESIGN section 6."""

    id: ClassVar[str]
    mechanism: ClassVar[Mechanism]
    worker_dists: ClassVar[tuple[str, ...]] = ()  # distributions a worker process needs for the patch

    @abstractmethod
    def detect(self, host: HostEnv) -> Availability:
        """Whether the installed packages provide this optimization natively, by a patch, or not at all."""

    @abstractmethod
    def apply_config(self, ctx: ApplyContext) -> str:
        """Set overrides / environment (idempotent); return what was done, in one line."""

    def apply_in_worker(self) -> WorkerPatchResult:
        """Patch the targets inside this process (only patches override this)."""
        raise NotImplementedError(f"{self.id} has no in-worker patch")

    def availability(self, available: bool, reason: str, targets: list[TargetCheck] | None = None,
                     mechanism: Mechanism | None = None) -> Availability:
        return Availability(id=self.id, mechanism=mechanism or self.mechanism, available=available, reason=reason,
                            targets=targets or [])

    def missing_dist(self, host: HostEnv) -> Availability | None:
        """'unavailable' naming the first of `worker_dists` not installed, else None."""
        for dist in self.worker_dists:
            if not host.has(dist):
                return self.availability(False, f"unavailable: {host.missing(dist)}")
        return None

    def detect_patch(self, host: HostEnv, targets: list[PatchTarget]) -> Availability:
        """A patch's availability: its worker distributions installed and every target found."""
        unavailable = self.missing_dist(host)
        if unavailable is not None:
            return unavailable
        checks = [host.check(t) for t in targets]
        missing = [c.detail for c in checks if not c.found]
        if missing:
            return self.availability(False, missing[0], checks)
        return self.availability(True, "patch targets found: " + ", ".join(t.label for t in targets), checks)


class TargetPatches(Optimization):
    """A patch that replaces named targets in the workers, each with what a factory makes of the original (installed
    by executor.npu_opt.patching.install when the target's module loads)."""

    mechanism = "patch"
    patches: ClassVar[tuple[tuple[PatchTarget, Callable], ...]]
    what: ClassVar[str]

    def detect(self, host: HostEnv) -> Availability:
        return self.detect_patch(host, [t for t, _ in self.patches])

    def apply_config(self, ctx: ApplyContext) -> str:
        ctx.request_patch(self.id)
        return f"worker hook patches {', '.join(t.label for t, _ in self.patches)} ({self.what})"

    def apply_in_worker(self) -> WorkerPatchResult:
        from executor.npu_opt.patching import install

        return install(self.id, list(self.patches))
