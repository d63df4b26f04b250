"""What megatron-core 0.16.1 needs to run a GPTModel forward and backward on CPU over gloo: named patches.

Each is an `Optimization` (executor/npu_opt/base.py), detected before use, reported, and installed in a
process by `apply_in_worker` (executor/npu_opt/patching.py: when the module is imported), like
executor/cpu/vllm_compat.py. Model construction needs none of them (`use_cpu_initialization=True`); the
forward pass does:

- `megatron_cpu_rng_tracker`: attention dropout runs inside the model-parallel CUDA RNG tracker's `fork()`
  (megatron/core/tensor_parallel/random.py `CudaRNGStatesTracker.fork`), which reads and sets CUDA
  generator states. On CPU the fork keeps the CPU generator (dropout is 0 in the models here).
- `megatron_cpu_rotary`: the rotary embedding moves its `inv_freq` to `torch.cuda.current_device()` at the
  first forward (megatron/core/models/common/embeddings/rotary_pos_embedding.py `RotaryEmbedding.get_emb`);
  on CPU `current_device()` answers "cpu" while get_emb runs, so it stays where it is.
- `megatron_cpu_memory_buffer`: unfused attention takes its score buffer from the global memory buffer,
  allocated on `torch.cuda.current_device()` (megatron/core/utils.py `GlobalMemoryBuffer.get_tensor`); on
  CPU it is allocated on CPU.
- `megatron_cpu_causal_mask`: the unfused softmax builds its causal mask with `device="cuda"`
  (megatron/core/transformer/utils.py `get_default_causal_mask`, imported by name into
  megatron/core/fusions/fused_softmax.py); on CPU the mask is built on CPU.

- `megatron_cpu_grouped_gemm`: Megatron's legacy GroupedMLP (the expert module of MindSpeed's moe_tp_extend_ep,
  mindspeed/core/transformer/moe/moe_feature/adaptor.py MindSpeedTpExtendEpGmmExperts) asserts the grouped_gemm
  CUDA package when built and runs its GEMMs through it (megatron/core/transformer/moe/grouped_gemm_util.py,
  experts.py GroupedMLP.forward `gg.ops.gmm`); on CPU the grouped GEMM is one torch matmul per local expert over
  its rows of the permuted tokens, differentiable as torch is.
- `megatron_cpu_moe`: the MoE router moves its weights and builds its buffers on `torch.cuda.current_device()`
  (megatron/core/transformer/moe/router.py `TopKRouter.__init__`, `Router.gating`); its gating GEMM calls
  Transformer Engine's `te_general_gemm`, a name megatron-core 0.16.1 leaves undefined without Transformer Engine
  (megatron/core/transformer/moe/moe_utils.py:1192, `RouterGatingLinearFunction.forward`), replaced by torch's
  linear in the router's dtype; the all-to-all token dispatcher (the one verl and mbridge choose) creates a CUDA
  stream when built (megatron/core/transformer/moe/token_dispatcher.py:445, `MoEAlltoAllTokenDispatcher.__init__`)
  and copies its split sizes to the host on it (`_maybe_dtoh_and_synchronize`): on CPU there is no stream and the
  split sizes become host arrays in place; the collectives' output buffers are allocated on the current CUDA device
  (megatron/core/tensor_parallel/mappings.py), which on CPU is the host. Uneven token counts per rank, as verl's
  batches have, go through the all-to-all with uneven splits over gloo.

MoE layers run on CPU with `MOE_ON_CPU` (below).

- `megatron_cpu_mla`: multi-latent attention (DeepSeek-V3) builds its rotary embeddings on
  `torch.cuda.current_device()` (megatron/core/models/common/embeddings/rotary_pos_embedding.py:78
  `RotaryEmbedding.__init__`, yarn_rotary_pos_embedding.py:76 and `get_emb`), and its constructor asks
  `isinstance(self.linear_proj, TELinear)` (multi_latent_attention.py:185), where without Transformer Engine
  `TELinear` is a MagicMock instance, not a type (megatron/core/extensions/transformer_engine.py:76 mocks the
  package): a TypeError on any host without Transformer Engine. On CPU the embeddings stay on the host and MLA's
  `TELinear` is a class no module is an instance of.
- `mbridge_deepseek_v3_config`: mbridge 0.15.1's DeepSeek-V3 bridge reads `hf_config.rope_theta` and, when
  `"rope_scaling" in hf_config`, its yarn settings (mbridge/models/deepseek_v3.py:120,157), which transformers 5
  keeps in `rope_parameters` (and `in` no longer finds), and passes `max_position_embeddings` to megatron-core's
  MLATransformerConfig, which 0.16.1 names `original_max_position_embeddings` (deepseek_v3.py:162). The bridge
  gets those three from `rope_parameters` and the field under its megatron-core name.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator

from executor.npu_opt.base import (
    Optimization,
    PatchTarget,
    TargetPatches,
    WorkerPatchResult,
)

DIST = "megatron-core"
MOE_ON_CPU = {"moe_grouped_gemm": False, "bias_activation_fusion": False, "persist_layer_norm": False,
              "moe_shared_expert_overlap": False}
"""What megatron-core's MoE layers run with on CPU, beyond the patches: one SequentialMLP module per local expert
(mbridge asks for grouped GEMM, which needs Transformer Engine) and unfused activation and norm kernels. The token
dispatcher is the all-to-all one that verl and mbridge choose (`megatron_cpu_moe` makes it run on CPU). Shared experts
(DeepSeek-V3) run after the routed ones, not overlapped with the dispatch on a CUDA stream of their own
(megatron/core/transformer/moe/shared_experts.py:123). None of them changes where a weight lives or what it
computes."""

RNG_FORK = PatchTarget(module="megatron.core.tensor_parallel.random", attribute="CudaRNGStatesTracker.fork",
                       dist=DIST)
ROTARY_EMB = PatchTarget(module="megatron.core.models.common.embeddings.rotary_pos_embedding",
                         attribute="RotaryEmbedding.get_emb", dist=DIST)
MEMORY_BUFFER = PatchTarget(module="megatron.core.utils", attribute="GlobalMemoryBuffer.get_tensor", dist=DIST)
CAUSAL_MASK = PatchTarget(module="megatron.core.fusions.fused_softmax", attribute="get_default_causal_mask",
                          dist=DIST)
ROUTER = "megatron.core.transformer.moe.router"
ROUTER_INIT = PatchTarget(module=ROUTER, attribute="TopKRouter.__init__", dist=DIST)
ROUTER_GATING = PatchTarget(module=ROUTER, attribute="Router.gating", dist=DIST)
ROUTER_GEMM = PatchTarget(module=ROUTER, attribute="router_gating_linear", dist=DIST)
GATHERS = PatchTarget(module="megatron.core.tensor_parallel.mappings", attribute="torch", dist=DIST)
DISPATCHER = "megatron.core.transformer.moe.token_dispatcher"
ALLTOALL_INIT = PatchTarget(module=DISPATCHER, attribute="MoEAlltoAllTokenDispatcher.__init__", dist=DIST)
ALLTOALL_DTOH = PatchTarget(module=DISPATCHER, attribute="MoEAlltoAllTokenDispatcher._maybe_dtoh_and_synchronize",
                            dist=DIST)
HOST_STREAM = "host (no CUDA stream)"
ROTARY = "megatron.core.models.common.embeddings.rotary_pos_embedding"
YARN = "megatron.core.models.common.embeddings.yarn_rotary_pos_embedding"
MLA_TARGETS = (PatchTarget(module=ROTARY, attribute="RotaryEmbedding.__init__", dist=DIST),
               PatchTarget(module=YARN, attribute="YarnRotaryEmbedding.__init__", dist=DIST),
               PatchTarget(module=YARN, attribute="YarnRotaryEmbedding.get_emb", dist=DIST))
MLA_TE_LINEAR = PatchTarget(module="megatron.core.transformer.multi_latent_attention", attribute="TELinear",
                            dist=DIST)
GROUPED_GEMM = "megatron.core.transformer.moe.grouped_gemm_util"
GROUPED_GEMM_TARGETS = (PatchTarget(module=GROUPED_GEMM, attribute="grouped_gemm_is_available", dist=DIST),
                        PatchTarget(module=GROUPED_GEMM, attribute="assert_grouped_gemm_is_available", dist=DIST),
                        PatchTarget(module=GROUPED_GEMM, attribute="ops", dist=DIST))
MBRIDGE = "mbridge"
DSV3_CONFIG = PatchTarget(module="mbridge.models.deepseek_v3", attribute="DeepseekV3Bridge._build_config",
                          dist=MBRIDGE)
YARN_FIELDS = {"rotary_scaling_factor": "factor", "mscale": "mscale", "mscale_all_dim": "mscale_all_dim",
               "beta_fast": "beta_fast", "beta_slow": "beta_slow",
               "max_position_embeddings": "original_max_position_embeddings"}
"""The yarn arguments mbridge's DeepSeek-V3 bridge passes to megatron-core's MLATransformerConfig -> the HF rope
parameter each comes from; mbridge's own value (its default) stays where the config has none."""


def _cpu_fork(_original: Callable) -> Callable:
    @contextlib.contextmanager
    def fork(self: object, name: str = "model-parallel-rng") -> Iterator[None]:
        yield  # the CPU generator stays current: there is no CUDA generator state to switch

    return fork


def _current_device_cpu(original: Callable, *, modules_stay: bool = False) -> Callable:
    """`original` with `torch.cuda.current_device()` answering "cpu" while it runs (its CUDA calls), and with
    `modules_stay` `Module.cuda()` a no-op as well."""

    @functools.wraps(original)
    def on_cpu(*args: object, **kwargs: object) -> object:
        import torch

        current, to_cuda = torch.cuda.current_device, torch.nn.Module.cuda
        torch.cuda.current_device = lambda: "cpu"
        if modules_stay:
            torch.nn.Module.cuda = lambda module, *_a, **_k: module
        try:
            return original(*args, **kwargs)
        finally:
            torch.cuda.current_device, torch.nn.Module.cuda = current, to_cuda

    return on_cpu


def _no_dtoh_stream(original: Callable) -> Callable:
    """The all-to-all dispatcher's constructor without the CUDA stream its device-to-host copies run on."""

    @functools.wraps(original)
    def init(self: object, *args: object, **kwargs: object) -> None:
        owner = next(c for c in type(self).__mro__ if "cuda_dtoh_stream" in vars(c))
        if owner.cuda_dtoh_stream is None:
            owner.cuda_dtoh_stream = HOST_STREAM
        original(self, *args, **kwargs)

    return init


def _host_splits(_original: Callable) -> Callable:
    """On CPU the split sizes are host tensors already; at the point where the CUDA path copies them to the host,
    they become the numpy arrays the all-to-all calls read (`.tolist()`), with no stream to synchronise."""

    def _maybe_dtoh_and_synchronize(self: object, point: str, tokens_per_expert: object = None) -> object:
        if not self.drop_and_pad and point == self.cuda_dtoh_point:
            for name in ("input_splits", "output_splits", "output_splits_tp"):
                value = getattr(self, name)
                if hasattr(value, "numpy"):
                    setattr(self, name, value.numpy())
        return tokens_per_expert

    return _maybe_dtoh_and_synchronize


def _plain_router_gemm(_original: Callable) -> Callable:
    def router_gating_linear(inp: object, weight: object, bias: object, router_dtype: object) -> object:
        import torch

        return torch.nn.functional.linear(inp.to(router_dtype), weight.to(router_dtype),
                                          None if bias is None else bias.to(router_dtype))

    return router_gating_linear


def _gmm(a: object, b: object, batch_sizes: object, trans_b: bool = False) -> object:
    """grouped_gemm's `gmm` in torch: rows of `a` in `batch_sizes` consecutive groups, group i times b[i]
    (transposed with `trans_b`)."""
    import torch

    groups = a.split([int(n) for n in batch_sizes.tolist()])
    return torch.cat([x @ (w.t() if trans_b else w) for x, w in zip(groups, b, strict=True)])


def _grouped_gemm_available(_original: Callable) -> Callable:
    return lambda: True


def _grouped_gemm_assert(_original: Callable) -> Callable:
    return lambda: None


def _grouped_gemm_ops(_original: object) -> object:
    from types import SimpleNamespace

    return SimpleNamespace(gmm=_gmm)


def _cpu_causal_mask(_original: Callable) -> Callable:
    def get_default_causal_mask(sq: int) -> object:
        import torch

        return torch.triu(torch.ones(sq, sq, dtype=torch.bool), diagonal=1)

    return get_default_causal_mask


def _no_te_linear(_original: object) -> type:
    class AbsentTELinear:
        """Transformer Engine's Linear where Transformer Engine is not installed: nothing is one."""

    return AbsentTELinear


def _transformers5_rope(original: Callable) -> Callable:
    """mbridge's DeepSeek-V3 `_build_config` with the rope settings read from transformers 5's `rope_parameters`
    and `max_position_embeddings` passed under megatron-core 0.16's name."""

    @functools.wraps(original)
    def _build_config(self: object) -> object:
        hf = self.hf_config
        rope = dict(getattr(hf, "rope_parameters", None) or {})
        if not hasattr(hf, "rope_theta"):
            hf.rope_theta = rope["rope_theta"]
        build_base = self._build_base_config

        def base(**kwargs: object) -> object:
            if rope.get("rope_type", "default") not in ("default", "rope") and "rope_scaling" not in hf:
                kwargs["rope_type"] = rope["rope_type"]
                kwargs.update({field: rope[key] for field, key in YARN_FIELDS.items() if key in rope})
            if "max_position_embeddings" in kwargs and not _has_field(self.TransformerConfigClass,
                                                                      "max_position_embeddings"):
                kwargs["original_max_position_embeddings"] = kwargs.pop("max_position_embeddings")
            return build_base(**kwargs)

        self._build_base_config = base
        try:
            return original(self)
        finally:
            del self._build_base_config

    return _build_config


def _has_field(config_class: type, name: str) -> bool:
    import dataclasses

    return any(f.name == name for f in dataclasses.fields(config_class))


class _HostCuda:
    """`torch.cuda` as a CPU module sees it: the current device is the host; the cache has nothing to free."""

    def __init__(self, cuda: object) -> None:
        self._cuda = cuda

    def __getattr__(self, name: str) -> object:
        return getattr(self._cuda, name)

    @staticmethod
    def current_device() -> str:
        return "cpu"

    @staticmethod
    def empty_cache() -> None:
        return None


class _HostTorch:
    """`torch` for one Megatron module on CPU: tensors asked for on 'cuda' are made on the host."""

    def __init__(self, torch: object) -> None:
        self._torch = torch
        self.cuda = _HostCuda(torch.cuda)

    def __getattr__(self, name: str) -> object:
        return getattr(self._torch, name)

    def tensor(self, *args: object, device: object = None, **kwargs: object) -> object:
        return self._torch.tensor(*args, device=_host(device), **kwargs)

    def zeros(self, *args: object, device: object = None, **kwargs: object) -> object:
        return self._torch.zeros(*args, device=_host(device), **kwargs)


def _host(device: object) -> object:
    return "cpu" if device is not None and str(device).startswith("cuda") else device


def _host_torch(original: object) -> object:
    return _HostTorch(original)


class _MegatronCpuPatch(TargetPatches):
    """One named megatron-core patch: the targets it replaces, each with the factory of its replacement."""

    worker_dists = (DIST,)


class MegatronCpuRngTracker(_MegatronCpuPatch):
    id = "megatron_cpu_rng_tracker"
    patches = ((RNG_FORK, _cpu_fork),)
    what = "the RNG fork keeps the CPU generator"


class MegatronCpuRotary(_MegatronCpuPatch):
    id = "megatron_cpu_rotary"
    patches = ((ROTARY_EMB, _current_device_cpu),)
    what = "inv_freq stays on CPU"


class MegatronCpuMemoryBuffer(_MegatronCpuPatch):
    id = "megatron_cpu_memory_buffer"
    patches = ((MEMORY_BUFFER, _current_device_cpu),)
    what = "attention's scratch buffer allocated on CPU"


class MegatronCpuCausalMask(_MegatronCpuPatch):
    id = "megatron_cpu_causal_mask"
    patches = ((CAUSAL_MASK, _cpu_causal_mask),)
    what = "causal mask built on CPU"


class MegatronCpuMoe(_MegatronCpuPatch):
    id = "megatron_cpu_moe"
    patches = ((ROUTER_INIT, _current_device_cpu), (ROUTER_GATING, _current_device_cpu),
               (ROUTER_GEMM, _plain_router_gemm), (GATHERS, _host_torch), (ALLTOALL_INIT, _no_dtoh_stream),
               (ALLTOALL_DTOH, _host_splits))
    what = "the MoE router and the all-to-all token dispatcher on CPU; the gating GEMM is torch's"


class MegatronCpuGroupedGemm(_MegatronCpuPatch):
    id = "megatron_cpu_grouped_gemm"
    patches = tuple(zip(GROUPED_GEMM_TARGETS, (_grouped_gemm_available, _grouped_gemm_assert, _grouped_gemm_ops),
                        strict=True))
    what = "legacy GroupedMLP's grouped GEMM as one torch matmul per local expert"


class MegatronCpuMla(_MegatronCpuPatch):
    id = "megatron_cpu_mla"
    patches = (*((t, _current_device_cpu) for t in MLA_TARGETS), (MLA_TE_LINEAR, _no_te_linear))
    what = "MLA's rotary embeddings on CPU; no Transformer Engine Linear to check against"


class MbridgeDeepseekV3Config(_MegatronCpuPatch):
    id = "mbridge_deepseek_v3_config"
    worker_dists = (DIST, MBRIDGE)
    patches = ((DSV3_CONFIG, _transformers5_rope),)
    what = "DeepSeek-V3's rope settings from transformers 5's rope_parameters, megatron-core 0.16's field names"


PATCHES: tuple[Optimization, ...] = (MegatronCpuRngTracker(), MegatronCpuRotary(), MegatronCpuMemoryBuffer(),
                                     MegatronCpuCausalMask(), MegatronCpuMoe(), MegatronCpuGroupedGemm(),
                                     MegatronCpuMla(), MbridgeDeepseekV3Config())


def apply_all() -> list[WorkerPatchResult]:
    """Install every patch in this process (before or after megatron-core is imported)."""
    return [patch.apply_in_worker() for patch in PATCHES]
