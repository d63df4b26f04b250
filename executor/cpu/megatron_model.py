"""A Megatron-core GPTModel on CPU over gloo, loaded from a HuggingFace checkpoint with mbridge's converters.

`MegatronCpuModel.build(hf_config, tp, pp)` initialises Megatron's parallel state on the default (gloo)
process group, builds this rank's pipeline stage of a GPTModel with Megatron's local (non-Transformer-Engine)
layer spec and CPU initialisation, and `load(checkpoint)` fills it: for every local parameter, mbridge names
the HF tensors it comes from (`_weight_name_mapping_mcore_to_hf`), merges them into Megatron's layout
(`_weight_to_mcore_format`: fused QKV in query groups, gate/up stacked, vocabulary padded) and cuts this TP
rank's part (`_weight_split_across_tp`), the path mbridge's own `load_weights` takes, without its scatter.

`hf_blocks()` answers, for every local parameter, which HF tensor slices it holds, by running the same
converters on tensors of element codes (float64, exact below 2**53) instead of weights: the codes that land
in the local shard name the HF elements it holds. `hf_shards()` cuts the local parameters into those HF
blocks (the directed reshard's input).

Dense models (Qwen2/Qwen3/Llama families mbridge knows): MoE layers need the all-to-all dispatcher patches
not in executor/cpu/megatron_compat.py. Sequence parallelism is off (torch's RMSNorm refuses it; it does
not change where weights live). The vocabulary is padded to 128 x TP, Megatron's default.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

    from twin.catalog.inventory import Block

VOCAB_DIVISOR = 128  # x TP: Megatron's --make-vocab-size-divisible-by default
LOCAL_TO_TE = {"input_layernorm.weight": "self_attention.linear_qkv.layer_norm_weight",
               "pre_mlp_layernorm.weight": "mlp.linear_fc1.layer_norm_weight"}
"""Megatron's local spec keeps the norms as modules; mbridge names them as Transformer Engine fuses them."""


class MegatronModelError(Exception):
    """The model cannot be built or loaded as asked; the message says why."""


@dataclass
class HfSlice:
    """One HF tensor block a local parameter holds, and where its elements sit in the local tensor."""

    name: str
    block: Block
    mask: torch.Tensor  # bool, local parameter shape; its True elements in row-major order are the block's


@dataclass
class MegatronCpuModel:
    """This rank's stage of a Megatron GPTModel and the mbridge bridge that maps it to HF tensors."""

    bridge: Any
    model: Any
    tp: int
    pp: int
    tp_rank: int
    pp_rank: int
    sources: dict[str, list[str]] = field(default_factory=dict)  # local parameter -> HF names, in order

    @classmethod
    def build(cls, hf_config: dict[str, Any], tp: int, pp: int, seed: int = 0,
              dtype: torch.dtype | None = None) -> MegatronCpuModel:
        """Build this rank's stage in `dtype` (float32 by default); the default process group must be initialised
        (gloo)."""
        import torch
        from mbridge import AutoBridge
        from mbridge.core.parallel_states import ParallelStates
        from megatron.core import parallel_state as mpu
        from megatron.core.models.gpt.gpt_layer_specs import get_gpt_decoder_block_spec
        from megatron.core.models.gpt.gpt_model import GPTModel
        from transformers import AutoConfig

        from executor.cpu.megatron_compat import apply_all

        apply_all()
        fields = {k: v for k, v in hf_config.items() if k != "model_type"}
        config = AutoConfig.for_model(hf_config["model_type"], **fields)
        if config.num_hidden_layers % pp:
            raise MegatronModelError(f"{config.num_hidden_layers} layers cannot be split into PP{pp} even stages")
        mpu.destroy_model_parallel()
        mpu.initialize_model_parallel(tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp)
        torch.manual_seed(seed)
        try:
            bridge = AutoBridge.from_config(config, dtype=dtype or torch.float32,
                                            parallel_states=ParallelStates.get_parallel_state(),
                                            make_vocab_size_divisible_by=VOCAB_DIVISOR * tp)
        except ValueError as exc:
            raise MegatronModelError(f"mbridge has no bridge for model type {hf_config['model_type']!r}") from exc
        bridge.set_extra_args(use_cpu_initialization=True, masked_softmax_fusion=False, sequence_parallel=False,
                              gradient_accumulation_fusion=False, bias_dropout_fusion=False, apply_rope_fusion=False)
        if bridge.config.num_moe_experts:
            raise MegatronModelError("MoE layers need the all-to-all dispatcher on CPU, not patched here")
        vocab = -(-config.vocab_size // (VOCAB_DIVISOR * tp)) * VOCAB_DIVISOR * tp
        bridge.vocab_size, bridge.padded_vocab_size = config.vocab_size, vocab
        rope = (getattr(config, "rope_parameters", None) or {}).get("rope_theta") or config.rope_theta
        model = GPTModel(config=bridge.config,
                         transformer_layer_spec=get_gpt_decoder_block_spec(bridge.config, use_transformer_engine=False),
                         vocab_size=vocab, max_sequence_length=config.max_position_embeddings,
                         pre_process=mpu.is_pipeline_first_stage(), post_process=mpu.is_pipeline_last_stage(),
                         share_embeddings_and_output_weights=bool(getattr(config, "tie_word_embeddings", False)),
                         position_embedding_type="rope", rotary_base=rope)
        out = cls(bridge, model, tp, pp, mpu.get_tensor_model_parallel_rank(), mpu.get_pipeline_model_parallel_rank())
        out.sources = {name: bridge._weight_name_mapping_mcore_to_hf(_te_name(global_name))
                       for name, global_name in bridge._weight_name_mapping_mcore_local_to_global(model).items()}
        return out

    def parameters(self) -> dict[str, torch.Tensor]:
        return {n: p for n, p in self.model.state_dict(keep_vars=True).items() if n in self.sources}

    def _local_part(self, name: str, hf: list[torch.Tensor], param: torch.Tensor) -> torch.Tensor:
        """mbridge's conversion of the HF tensors `hf` into this rank's part of Megatron parameter `name`."""
        te = _te_name(name)
        merged = self.bridge._weight_to_mcore_format(te, hf)
        return self.bridge._weight_split_across_tp(te, merged, param, self.tp)[self.tp_rank]

    def load(self, checkpoint: dict[str, torch.Tensor]) -> None:
        """Fill every local parameter from a full HF state dict (every rank reads the checkpoint itself)."""
        import torch

        with torch.no_grad():
            for name, param in self.parameters().items():
                missing = [n for n in self.sources[name] if n not in checkpoint]
                if missing:
                    raise MegatronModelError(f"{name}: {missing[0]} is not in the checkpoint")
                part = self._local_part(name, [checkpoint[n] for n in self.sources[name]], param)
                if tuple(part.shape) != tuple(param.shape):
                    raise MegatronModelError(f"{name}: mbridge gives {tuple(part.shape)}, the module holds "
                                             f"{tuple(param.shape)}")
                param.copy_(part)

    def hf_blocks(self, shapes: dict[str, tuple[int, ...]]) -> dict[str, list[HfSlice]]:
        """Local parameter -> the HF blocks it holds (padding rows hold none), traced through mbridge."""
        import torch

        out: dict[str, list[HfSlice]] = {}
        with _float64(self.bridge):
            for name, param in self.parameters().items():
                hf = self.sources[name]
                bases, codes, base = [], [], 0
                for n in hf:
                    numel = int(torch.Size(shapes[n]).numel())
                    codes.append(torch.arange(base + 1, base + numel + 1, dtype=torch.float64).view(shapes[n]))
                    bases.append(base)
                    base += numel
                local = self._local_part(name, codes, param).to(torch.float64)
                out[name] = [_slice(name, n, shapes[n], local, b) for n, b in zip(hf, bases, strict=True)]
                out[name] = [s for s in out[name] if s is not None]
        return out

    def hf_shards(self, blocks: dict[str, list[HfSlice]]) -> dict[str, dict[Block, torch.Tensor]]:
        """This rank's HF blocks cut from its live parameters: {HF name: {block: tensor}} (a tied head once)."""
        out: dict[str, dict[Block, torch.Tensor]] = {}
        params = self.parameters()
        for name, slices in blocks.items():
            data = params[name].detach()
            for s in slices:
                shape = tuple(b - a for a, b in s.block)
                out.setdefault(s.name, {})[s.block] = data[s.mask].view(shape).contiguous()
        return out


def _te_name(name: str) -> str:
    for local, te in LOCAL_TO_TE.items():
        if name.endswith(local):
            return name[: -len(local)] + te
    return name


@contextlib.contextmanager
def _float64(bridge: Any) -> Iterator[None]:
    """mbridge casts HF tensors to its dtype before merging; float64 keeps element codes exact."""
    import torch

    dtype, bridge.dtype = bridge.dtype, torch.float64
    try:
        yield
    finally:
        bridge.dtype = dtype


def _slice(param: str, hf: str, shape: tuple[int, ...], local: torch.Tensor, base: int) -> HfSlice | None:
    """The block of HF tensor `hf` whose codes sit in `local`; None when it holds none of them."""
    import torch

    numel = int(torch.Size(shape).numel())
    mask = (local > base) & (local <= base + numel)
    flat = (local[mask] - base - 1).to(torch.int64)
    if flat.numel() == 0:
        return None
    index = torch.stack(torch.unravel_index(flat, shape))
    block = tuple((int(lo), int(hi) + 1) for lo, hi in zip(index.min(dim=1).values, index.max(dim=1).values,
                                                          strict=True))
    size = 1
    for a, b in block:
        size *= b - a
    if size != flat.numel() or not bool((flat[1:] > flat[:-1]).all()):
        raise MegatronModelError(f"{param}: the part of {hf} it holds is not one block in row-major order")
    return HfSlice(hf, block, mask)
