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

The MoE all-to-all dispatcher needs more (it creates a CUDA stream when built,
megatron/core/transformer/moe/token_dispatcher.py:445, and its split sizes on CPU); it is not patched here:
executor/cpu/megatron_model.py builds MoE layers with the all-gather dispatcher, for loading and resharding
weights (a forward through MoE layers is not run on CPU here).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator

from executor.npu_opt.base import ApplyContext, Availability, Optimization, PatchTarget, WorkerPatchResult
from executor.npu_opt.host import HostEnv

DIST = "megatron-core"
RNG_FORK = PatchTarget(module="megatron.core.tensor_parallel.random", attribute="CudaRNGStatesTracker.fork",
                       dist=DIST)
ROTARY_EMB = PatchTarget(module="megatron.core.models.common.embeddings.rotary_pos_embedding",
                         attribute="RotaryEmbedding.get_emb", dist=DIST)
MEMORY_BUFFER = PatchTarget(module="megatron.core.utils", attribute="GlobalMemoryBuffer.get_tensor", dist=DIST)
CAUSAL_MASK = PatchTarget(module="megatron.core.fusions.fused_softmax", attribute="get_default_causal_mask",
                          dist=DIST)


def _cpu_fork(_original: Callable) -> Callable:
    @contextlib.contextmanager
    def fork(self: object, name: str = "model-parallel-rng") -> Iterator[None]:
        yield  # the CPU generator stays current: there is no CUDA generator state to switch

    return fork


def _current_device_cpu(original: Callable) -> Callable:
    """`original` with `torch.cuda.current_device()` answering "cpu" while it runs (its one CUDA call)."""

    @functools.wraps(original)
    def on_cpu(*args: object, **kwargs: object) -> object:
        import torch

        current = torch.cuda.current_device
        torch.cuda.current_device = lambda: "cpu"
        try:
            return original(*args, **kwargs)
        finally:
            torch.cuda.current_device = current

    return on_cpu


def _cpu_causal_mask(_original: Callable) -> Callable:
    def get_default_causal_mask(sq: int) -> object:
        import torch

        return torch.triu(torch.ones(sq, sq, dtype=torch.bool), diagonal=1)

    return get_default_causal_mask


class _MegatronCpuPatch(Optimization):
    """One named megatron-core patch: a target and the factory that replaces it."""

    mechanism = "patch"
    worker_dists = (DIST,)
    target: PatchTarget
    factory: Callable[[Callable], Callable]
    what: str

    def detect(self, host: HostEnv) -> Availability:
        return self.detect_patch(host, [self.target])

    def apply_config(self, ctx: ApplyContext) -> str:
        ctx.request_patch(self.id)
        return f"worker hook patches {self.target.label} ({self.what})"

    def apply_in_worker(self) -> WorkerPatchResult:
        from executor.npu_opt.patching import install

        return install(self.id, [(self.target, type(self).factory)])


class MegatronCpuRngTracker(_MegatronCpuPatch):
    id = "megatron_cpu_rng_tracker"
    target = RNG_FORK
    factory = staticmethod(_cpu_fork)
    what = "the RNG fork keeps the CPU generator"


class MegatronCpuRotary(_MegatronCpuPatch):
    id = "megatron_cpu_rotary"
    target = ROTARY_EMB
    factory = staticmethod(_current_device_cpu)
    what = "inv_freq stays on CPU"


class MegatronCpuMemoryBuffer(_MegatronCpuPatch):
    id = "megatron_cpu_memory_buffer"
    target = MEMORY_BUFFER
    factory = staticmethod(_current_device_cpu)
    what = "attention's scratch buffer allocated on CPU"


class MegatronCpuCausalMask(_MegatronCpuPatch):
    id = "megatron_cpu_causal_mask"
    target = CAUSAL_MASK
    factory = staticmethod(_cpu_causal_mask)
    what = "causal mask built on CPU"


PATCHES: tuple[Optimization, ...] = (MegatronCpuRngTracker(), MegatronCpuRotary(), MegatronCpuMemoryBuffer(),
                                     MegatronCpuCausalMask())


def apply_all() -> list[WorkerPatchResult]:
    """Install every patch in this process (before or after megatron-core is imported)."""
    return [patch.apply_in_worker() for patch in PATCHES]
