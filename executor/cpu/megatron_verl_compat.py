"""What verl's Megatron engine (mbridge, megatron-core 0.16.1) needs beyond executor/cpu/megatron_compat.py to
build, train and export a model on CPU over gloo: named patches, detected, reported and installed in every verl
worker like the others.

- `megatron_cpu_rng_seed`: verl seeds Megatron's model-parallel RNG tracker (verl/workers/engine/megatron/
  utils.py `set_random_seed` -> megatron/core/tensor_parallel/random.py `CudaRNGStatesTracker.add`), which reads
  and sets CUDA generator states. On CPU the tracker keeps CPU generator states seeded the same way.
- `mbridge_cpu_model_placement`: mbridge's `get_model` (mbridge/core/util.py) moves each built chunk to
  `torch.cuda.current_device()` and Megatron's DDP allocates its parameter and gradient buffers there
  (megatron/core/distributed/param_and_grad_buffer.py); on CPU both stay on the host while it runs.
- `mbridge_cpu_layer_spec`: mbridge builds every model with Transformer Engine's layer spec
  (mbridge/core/llm_bridge.py `_get_transformer_layer_spec`); on CPU it takes megatron-core's local spec.
- `mbridge_cpu_norm_names`: that local spec keeps the layer norms as modules of their own
  (`input_layernorm`, `pre_mlp_layernorm`), which mbridge's name mappings and converters (mbridge/core/bridge.py
  `Bridge._weight_name_mapping_mcore_to_hf`, `_weight_to_mcore_format`, `_weight_to_hf_format`,
  `_weight_split_across_tp`, `_weight_merge_across_tp`) know only under Transformer Engine's fused names; the
  names are translated on the way in (executor/reshard/megatron_blocks.py `mbridge_name`), and so are the local
  experts of MoE layers (`local_experts.i`, which mbridge knows only as Transformer Engine's grouped `weight<g>`,
  with g the global expert index of this EP rank's expert i), and the norms of multi-latent attention
  (DeepSeek-V3, whose bridge overrides two of these methods, patched as well). GLM's bridge is not covered.
- `mbridge_cpu_deepseek_reader`: mbridge's DeepSeek-V3 bridge reads a bf16 checkpoint through its FP8-dequantising
  reader (mbridge/models/deepseek_v3.py `_get_safetensor_io`), which needs a safetensors index and opens every file
  on device "cuda" (mbridge/models/ext/deepseek_v3/dequant_fp8_safetensor_io.py:21-33). A checkpoint without FP8
  weights (no `quantization_config`) is read on CPU by mbridge's plain reader (mbridge/core/safetensor_io.py), as
  every other bridge reads; an FP8 checkpoint keeps the dequantising one.
- `megatron_cpu_host_tensors`: Megatron's mixed-precision optimizer, gradient clipping and pipeline schedules
  create their scalars with `device='cuda'` (megatron/core/optimizer/optimizer.py, distrib_optimizer.py,
  clip_grads.py, megatron/core/pipeline_parallel/schedules.py `total_num_tokens`, the gradient norm of
  megatron/core/utils.py `local_multi_tensor_l2_norm`), and the optimizer accepts
  parameters and gradients only when `Tensor.type()` names a CUDA type (optimizer.py
  `Float16OptimizerWithFloat16Params`, distrib_optimizer.py `DistributedOptimizer`, clip_grads.py
  `clip_grad_by_total_norm_fp32`). On CPU those modules see a `torch` whose CUDA scalars are made
  on the host, and the two type checks see CPU tensors under their CUDA type names while they run.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from executor.cpu.megatron_compat import DIST, MBRIDGE, _current_device_cpu, _host_torch, _MegatronCpuPatch
from executor.npu_opt.base import Optimization, PatchTarget

RNG_ADD = PatchTarget(module="megatron.core.tensor_parallel.random", attribute="CudaRNGStatesTracker.add", dist=DIST)
GET_MODEL = PatchTarget(module="mbridge.core.bridge", attribute="get_model", dist=MBRIDGE)
LAYER_SPEC = PatchTarget(module="mbridge.core.llm_bridge", attribute="get_gpt_decoder_block_spec", dist=MBRIDGE)
HOST_TENSOR_MODULES = ("megatron.core.optimizer.optimizer", "megatron.core.optimizer.distrib_optimizer",
                       "megatron.core.optimizer.clip_grads", "megatron.core.pipeline_parallel.schedules",
                       "megatron.core.utils")
TORCH_TARGETS = [PatchTarget(module=m, attribute="torch", dist=DIST) for m in HOST_TENSOR_MODULES]
TYPE_CHECKED = [PatchTarget(module="megatron.core.optimizer.optimizer",
                            attribute="Float16OptimizerWithFloat16Params.__init__", dist=DIST),
                PatchTarget(module="megatron.core.optimizer.distrib_optimizer",
                            attribute="DistributedOptimizer.__init__", dist=DIST),
                PatchTarget(module="megatron.core.optimizer.clip_grads", attribute="clip_grad_by_total_norm_fp32",
                            dist=DIST)]
DSV3_READER = PatchTarget(module="mbridge.models.deepseek_v3", attribute="DeepseekV3Bridge._get_safetensor_io",
                          dist=MBRIDGE)
SOFTMAX = PatchTarget(module="megatron.core.fusions.fused_softmax", attribute="FusedScaleMaskSoftmax.forward",
                      dist=DIST)
NAMED_METHODS = ("_weight_name_mapping_mcore_to_hf", "_weight_to_mcore_format", "_weight_to_hf_format",
                 "_weight_split_across_tp", "_weight_merge_across_tp")
NAME_TARGETS = [*(PatchTarget(module="mbridge.core.bridge", attribute=f"Bridge.{m}", dist=MBRIDGE)
                  for m in NAMED_METHODS),
                *(PatchTarget(module="mbridge.models.deepseek_v3", attribute=f"DeepseekV3Bridge.{m}", dist=MBRIDGE)
                  for m in ("_weight_name_mapping_mcore_to_hf", "_weight_to_hf_format"))]
"""The methods that take a Megatron name: the base bridge's, and DeepSeek-V3's overrides of them (which call the base
ones: `mbridge_name` gives a name already in mbridge's spelling back unchanged)."""


def _cpu_rng_add(_original: Callable) -> Callable:
    def add(self: object, name: str, seed: int) -> None:
        import torch

        if seed in self.seeds_:
            raise Exception(f"seed {seed} already exists")
        if name in self.states_:
            raise Exception(f"rng state {name} already exists")
        self.seeds_.add(seed)
        outer = torch.get_rng_state()
        torch.manual_seed(seed)
        self.states_[name] = torch.get_rng_state()
        torch.set_rng_state(outer)

    return add


def _built_on_cpu(original: Callable) -> Callable:
    """`original` with `torch.cuda.current_device()` answering "cpu" and `Module.cuda()` a no-op while it runs."""
    return _current_device_cpu(original, modules_stay=True)


def _te_named(original: Callable) -> Callable:
    """A Bridge method whose first argument is a Megatron parameter name, called with mbridge's spelling of it."""
    from executor.reshard.megatron_blocks import mbridge_name

    @functools.wraps(original)
    def translated(self: object, name: str, *args: object, **kwargs: object) -> object:
        return original(self, mbridge_name(self, name), *args, **kwargs)

    return translated


def _plain_reader_unless_fp8(original: Callable) -> Callable:
    """mbridge's plain safetensors reader for a checkpoint that holds no FP8 weights."""

    @functools.wraps(original)
    def _get_safetensor_io(self: object, weights_path: str) -> object:
        if getattr(self.hf_config, "quantization_config", None):
            return original(self, weights_path)
        from mbridge.core.safetensor_io import SafeTensorIO

        return SafeTensorIO(self._get_actual_hf_path(weights_path))

    return _get_safetensor_io


def _cuda_type_names(original: Callable) -> Callable:
    """`original` with `Tensor.type()` naming CPU tensors as the CUDA types Megatron checks for while it runs."""

    @functools.wraps(original)
    def checked(*args: object, **kwargs: object) -> object:
        import torch

        plain = torch.Tensor.type

        def type_name(tensor: torch.Tensor, *a: object, **k: object) -> object:
            name = plain(tensor, *a, **k)
            return name.replace("torch.", "torch.cuda.", 1) if not a and not k and tensor.device.type == "cpu" else name

        torch.Tensor.type = type_name
        try:
            return original(*args, **kwargs)
        finally:
            torch.Tensor.type = plain

    return checked


def _causal_over_padding(original: Callable) -> Callable:
    @functools.wraps(original)
    def forward(self: object, input: object, mask: object, *args: object, **kwargs: object) -> object:
        from megatron.core.transformer.enums import AttnMaskType

        if mask is not None and mask.dim() == 2 and self.attn_mask_type == AttnMaskType.causal:
            mask = None
        return original(self, input, mask, *args, **kwargs)

    return forward


def _local_layer_spec(original: Callable) -> Callable:
    def get_gpt_decoder_block_spec(config: object, use_transformer_engine: bool, **kwargs: object) -> object:
        from executor.cpu.megatron_mla import adapt_block_spec

        return adapt_block_spec(original(config, use_transformer_engine=False, **kwargs))

    return get_gpt_decoder_block_spec


class MegatronCpuRngSeed(_MegatronCpuPatch):
    id = "megatron_cpu_rng_seed"
    patches = ((RNG_ADD, _cpu_rng_add),)
    what = "RNG tracker states seeded on the CPU generator"


class MbridgeCpuModelPlacement(_MegatronCpuPatch):
    id = "mbridge_cpu_model_placement"
    worker_dists = (DIST, MBRIDGE)
    patches = ((GET_MODEL, _built_on_cpu),)
    what = "model chunks and DDP buffers stay on CPU"


class MbridgeCpuLayerSpec(_MegatronCpuPatch):
    id = "mbridge_cpu_layer_spec"
    worker_dists = (DIST, MBRIDGE)
    patches = ((LAYER_SPEC, _local_layer_spec),)
    what = "megatron-core's local layer spec instead of Transformer Engine's"


class MbridgeCpuNormNames(_MegatronCpuPatch):
    id = "mbridge_cpu_norm_names"
    worker_dists = (DIST, MBRIDGE)
    patches = tuple((t, _te_named) for t in NAME_TARGETS)
    what = "the local spec's norm modules under mbridge's fused-norm names"


class MbridgeCpuDeepseekReader(_MegatronCpuPatch):
    id = "mbridge_cpu_deepseek_reader"
    worker_dists = (DIST, MBRIDGE)
    patches = ((DSV3_READER, _plain_reader_unless_fp8),)
    what = "a DeepSeek-V3 checkpoint without FP8 weights read by mbridge's plain reader on CPU"


class MegatronCpuHostTensors(_MegatronCpuPatch):
    id = "megatron_cpu_host_tensors"
    patches = (*((t, _host_torch) for t in TORCH_TARGETS), *((t, _cuda_type_names) for t in TYPE_CHECKED))
    what = "optimizer and schedule scalars on the host; the optimizer's CUDA type checks pass CPU tensors"


class MegatronCpuPaddingMask(_MegatronCpuPatch):
    id = "megatron_cpu_padding_mask"
    patches = ((SOFTMAX, _causal_over_padding),)
    what = "verl's left-packed padding mask read as the causal mask by the local softmax"


PATCHES: tuple[Optimization, ...] = (MegatronCpuRngSeed(), MbridgeCpuModelPlacement(), MbridgeCpuLayerSpec(),
                                     MbridgeCpuNormNames(), MbridgeCpuDeepseekReader(), MegatronCpuHostTensors(),
                                     MegatronCpuPaddingMask())
