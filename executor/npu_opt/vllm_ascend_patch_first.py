"""vllm_ascend_patch_first: vLLM-Ascend's patches must be in place before vLLM is used.

Current vLLM-Ascend registers itself as a vLLM platform plugin (entry point group
`vllm.platform_plugins`), so vLLM loads it before building its platform: native. An older vLLM-Ascend
without that entry point is imported by the worker hook (`vllm_ascend.patch`) before anything imports vLLM.
"""

from __future__ import annotations

import importlib
import sys
from importlib import metadata

from executor.npu_opt.base import (
    ApplyContext,
    Availability,
    Optimization,
    PatchTarget,
    PatchTargetMissing,
    WorkerPatchResult,
)
from executor.npu_opt.host import HostEnv

PATCH_PACKAGE = PatchTarget(module="vllm_ascend.patch", attribute="__path__", dist="vllm-ascend")


def _plugin_entry_point() -> str | None:
    for ep in metadata.entry_points(group="vllm.platform_plugins"):
        if ep.value.startswith("vllm_ascend"):
            return f"{ep.name} = {ep.value}"
    return None


class VllmAscendPatchFirst(Optimization):
    id = "vllm_ascend_patch_first"
    mechanism = "native"
    worker_dists = ("vllm", "vllm-ascend")

    def detect(self, host: HostEnv) -> Availability:
        unavailable = self.missing_dist(host)
        if unavailable is not None:
            return unavailable
        entry = _plugin_entry_point()
        if entry is not None:
            return self.availability(True, f"vLLM loads vLLM-Ascend as a platform plugin ({entry})")
        check = host.check(PATCH_PACKAGE)
        if not check.found:
            return self.availability(False, check.detail, [check], mechanism="patch")
        return self.availability(True, "worker hook imports vllm_ascend.patch before vLLM", [check],
                                 mechanism="patch")

    def apply_config(self, ctx: ApplyContext) -> str:
        if _plugin_entry_point() is not None:
            return "nothing to set: vLLM loads the vLLM-Ascend plugin itself"
        ctx.request_patch(self.id)
        return "worker hook imports vllm_ascend.patch first"

    def apply_in_worker(self) -> WorkerPatchResult:
        if PATCH_PACKAGE.module in sys.modules:
            return WorkerPatchResult(id=self.id, applied=[PATCH_PACKAGE.label])
        if "vllm" in sys.modules:
            raise PatchTargetMissing("vllm was imported before vllm_ascend.patch in this process")
        try:
            importlib.import_module(PATCH_PACKAGE.module)
        except ImportError as exc:
            raise PatchTargetMissing(f"patch target {PATCH_PACKAGE.label}: {exc}") from None
        return WorkerPatchResult(id=self.id, applied=[PATCH_PACKAGE.label])


OPTIMIZATION = VllmAscendPatchFirst()
