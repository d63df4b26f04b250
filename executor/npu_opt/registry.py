"""The optimizations of DESIGN section 6, one module each, keyed by id, and applying them to a launch."""

from __future__ import annotations

import importlib
from functools import cache

from executor.npu_opt.base import ApplyContext, Optimization, OptReport
from executor.npu_opt.host import HostEnv
from executor.verl_config.overrides import OverrideSet
from twin.optimizations import RECIPE_OPTIMIZATIONS, executor_refusals

MODULES = RECIPE_OPTIMIZATIONS  # one module per optimization id, named after it


@cache
def registry() -> dict[str, Optimization]:
    """id -> optimization, in DESIGN section 6 order."""
    out: dict[str, Optimization] = {}
    for name in MODULES:
        opt = importlib.import_module(f"executor.npu_opt.{name}").OPTIMIZATION
        out[opt.id] = opt
    return out


def find(opt_id: str) -> Optimization | None:
    """A DESIGN section 6 optimization, or an engine-compatibility patch of the CPU target, by id."""
    from executor.cpu import megatron_compat, megatron_verl_compat, vllm_compat

    patches = (*vllm_compat.PATCHES, *megatron_compat.PATCHES, *megatron_verl_compat.PATCHES)
    return registry().get(opt_id) or next((p for p in patches if p.id == opt_id), None)


def apply_all(ctx: ApplyContext, host: HostEnv) -> list[OptReport]:
    """Detect every optimization; apply the plan's enabled, available and supported ones; report each."""
    from twin.catalog.registry import load_config

    config = load_config(ctx.plan.scenario.model)
    reports = []
    for opt_id, opt in registry().items():
        found = opt.detect(host)
        if not ctx.plan.enabled(opt_id):
            reports.append(OptReport(id=opt_id, mechanism=found.mechanism, state="off", detail="not in the plan",
                                     targets=found.targets))
            continue
        if not found.available:
            reports.append(OptReport(id=opt_id, mechanism=found.mechanism, state="unavailable", detail=found.reason,
                                     targets=found.targets))
            continue
        refusals = executor_refusals(opt_id, ctx.plan.layout, config)
        if refusals:
            reports.append(OptReport(id=opt_id, mechanism=found.mechanism, state="refused",
                                     detail="cannot run this plan's layout: " + "; ".join(refusals),
                                     targets=found.targets))
            continue
        own = ApplyContext(plan=ctx.plan, overrides=OverrideSet(), env={}, worker_patches=ctx.worker_patches)
        detail = opt.apply_config(own)
        for override in own.overrides:
            ctx.overrides.set(override.key, override.value, add=override.add)
        ctx.env.update(own.env)
        reports.append(OptReport(id=opt_id, mechanism=found.mechanism, state="applied",
                                 detail=f"{found.reason}; {detail}", overrides=own.overrides.render(), env=own.env,
                                 targets=found.targets))
    return reports
