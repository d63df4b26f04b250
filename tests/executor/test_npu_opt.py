"""The optimization modules: registry, detection on this host, idempotent config, patch mechanics."""

from __future__ import annotations

import importlib.util
import sys
import typing
from pathlib import Path

import pytest

from executor.npu_opt import post_import
from executor.npu_opt.base import ApplyContext, PatchTarget, PatchTargetMissing
from executor.npu_opt.directed_reshard import TRANSFER_MODULE
from executor.npu_opt.host import HostEnv
from executor.npu_opt.patching import install, replace
from executor.npu_opt.registry import registry
from executor.verl_config.overrides import OverrideSet
from executor.versions import installed_version
from twin.optimizations import OptimizationId
from twin.plan import load_plan

HOST = HostEnv()


def test_one_module_per_design_optimization() -> None:
    assert list(registry()) == list(typing.get_args(OptimizationId))
    for opt_id, opt in registry().items():
        assert opt.__module__ == f"executor.npu_opt.{opt_id}"


def _expected_available(opt_id: str) -> bool:
    """What the installed packages of this host should make of each optimization."""
    has = {d: installed_version(d) is not None for d in ("vllm", "vllm-ascend", "torch-npu", "TransferQueue",
                                                          "math-verify")}
    return {
        "skip_old_log_prob": True, "late_kv_cache_init": True, "dp_group_ports": True, "chunked_prefill": True,
        "graph_mode": True,
        "directed_reshard": importlib.util.find_spec(TRANSFER_MODULE) is not None,
        "no_sleep_mode": has["vllm"] and has["vllm-ascend"],
        "vllm_ascend_patch_first": has["vllm"] and has["vllm-ascend"],
        "hccl_eos_sync": has["vllm"] and has["torch-npu"],
        "d2d_tensor_cache": has["TransferQueue"],
        "math_reward": has["math-verify"] and (Path(sys.modules["executor"].__file__).parent / "reward.py").is_file(),
    }[opt_id]


@pytest.mark.parametrize("opt_id", typing.get_args(OptimizationId))
def test_detection_on_this_host(opt_id: str) -> None:
    found = registry()[opt_id].detect(HOST)
    assert found.id == opt_id
    assert found.available == _expected_available(opt_id), found.reason
    if not found.available:
        assert found.reason
    for dist in ("vllm", "vllm-ascend"):
        if opt_id in ("no_sleep_mode", "vllm_ascend_patch_first") and installed_version(dist) is None:
            assert found.reason == f"unavailable: {dist} not installed"
            break


def test_directed_reshard_reports_the_registry_seam() -> None:
    found = registry()["directed_reshard"].detect(HOST)
    assert [t.label for t in found.targets] == ["verl.checkpoint_engine.base:CheckpointEngineRegistry.register"]
    assert found.targets[0].found


@pytest.mark.parametrize("opt_id", [i for i in typing.get_args(OptimizationId) if _expected_available(i)])
def test_apply_config_is_idempotent(make_plan, opt_id: str) -> None:
    ctx = ApplyContext(plan=load_plan(make_plan()), overrides=OverrideSet(), env={})
    opt = registry()[opt_id]
    opt.apply_config(ctx)
    first = (ctx.overrides.render(), dict(ctx.env), list(ctx.worker_patches))
    opt.apply_config(ctx)
    assert (ctx.overrides.render(), ctx.env, ctx.worker_patches) == first


def test_missing_patch_target_fails_loudly() -> None:
    with pytest.raises(PatchTargetMissing, match=r"json:nope\.deeper.*'nope' is missing from the installed std"):
        PatchTarget(module="json", attribute="nope.deeper", dist="std").resolve()
    with pytest.raises(PatchTargetMissing, match="cannot import no_such_module_x"):
        PatchTarget(module="no_such_module_x", attribute="f", dist="x").resolve()


def _write_module(tmp_path: Path, name: str) -> None:
    (tmp_path / f"{name}.py").write_text(
        "class Engine:\n"
        "    @staticmethod\n"
        "    def reduce(flag):\n        return flag\n"
        "    def step(self):\n        return 'original'\n")


def test_patches_wait_for_their_module_and_apply_once(tmp_path: Path, monkeypatch) -> None:
    name = f"fake_engine_{tmp_path.name.replace('-', '_')}"
    _write_module(tmp_path, name)
    monkeypatch.syspath_prepend(str(tmp_path))
    step = PatchTarget(module=name, attribute="Engine.step", dist="test")
    reduce_ = PatchTarget(module=name, attribute="Engine.reduce", dist="test")
    result = install("test_opt", [(step, lambda orig: lambda self: "patched:" + orig(self)),
                                  (reduce_, lambda orig: lambda flag: not orig(flag))])
    assert result.pending == [step.label, reduce_.label] and not result.applied
    module = importlib.import_module(name)
    assert module.Engine().step() == "patched:original"
    assert module.Engine.reduce(True) is False  # still a staticmethod
    replace(step, lambda orig: lambda self: "twice:" + orig(self), "test_opt")  # same id: already patched
    assert module.Engine().step() == "patched:original"
    assert post_import.when_imported(name, lambda m: None) is True  # loaded: callbacks run at once


def test_a_waiting_patch_that_fails_as_its_module_loads_is_written_into_the_hooks_report(
        tmp_path: Path, monkeypatch) -> None:
    """The hook reports a patch as pending; when its module loads without the target, the import raises and the
    report now names the error, so the executor can say which process failed and why (executor/probe.py)."""
    from executor.npu_opt import patching, worker_hook
    from executor.npu_opt import registry as registry_module
    from executor.npu_opt.worker_hook_env import PATCHES_ENV, REPORT_DIR_ENV
    from executor.probe import hook_problem

    name = f"fake_engine_late_{tmp_path.name.replace('-', '_')}"
    _write_module(tmp_path, name)
    monkeypatch.syspath_prepend(str(tmp_path))
    missing = PatchTarget(module=name, attribute="Engine.gone", dist="test")

    class Late:
        id, worker_dists = "test_late", ()

        def apply_in_worker(self):
            return install(self.id, [(missing, lambda orig: orig)])

    monkeypatch.setattr(patching, "_failure_listeners", [])
    monkeypatch.setattr(registry_module, "find", lambda opt_id: Late() if opt_id == "test_late" else None)
    monkeypatch.setenv(PATCHES_ENV, "test_late")
    monkeypatch.setenv(REPORT_DIR_ENV, str(tmp_path / "reports"))
    (result,) = worker_hook.run()
    assert result.pending == [missing.label] and result.error is None
    reports = tmp_path / "reports"
    # this process reported, and is not the driver
    assert hook_problem(reports, 0.0, driver_pid=-1, patches="test_late", expect_workers=True) is None
    with pytest.raises(PatchTargetMissing, match="'gone' is missing"):
        importlib.import_module(name)
    problem = hook_problem(reports, 0.0, driver_pid=-1, patches="test_late", expect_workers=False)
    assert problem is not None and problem.startswith("worker hook failed in process ")
    assert problem.endswith(f"patch target {missing.label}: 'gone' is missing from the installed test")


def test_reports_name_what_each_optimization_set(make_plan, build, tmp_path: Path) -> None:
    reports = {r.id: r for r in build(make_plan(), tmp_path).optimizations}
    assert reports["skip_old_log_prob"].overrides == ["algorithm.rollout_correction.bypass_mode=true",
                                                      "actor_rollout_ref.rollout.calculate_log_probs=true"]
    assert reports["graph_mode"].env == {"HCCL_OP_EXPANSION_MODE": "AIV", "TASK_QUEUE_ENABLE": "2",
                                         "VLLM_ENABLE_GRAPH_MODE": "1"}
    assert reports["math_reward"].state == "off"  # not among C1's optimizations
