"""A Megatron-core GPTModel on CPU over gloo, loaded from a HuggingFace checkpoint with mbridge's converters.

`MegatronCpuModel.build(hf_config, tp, pp)` initialises Megatron's parallel state on the default (gloo)
process group, builds this rank's pipeline stage of a GPTModel with Megatron's local (non-Transformer-Engine)
layer spec and CPU initialisation, and `load(checkpoint)` fills it: for every local parameter, mbridge names
the HF tensors it comes from (`_weight_name_mapping_mcore_to_hf`), merges them into Megatron's layout
(`_weight_to_mcore_format`: fused QKV in query groups, gate/up stacked) and cuts this TP
rank's part (`_weight_split_across_tp`), the path mbridge's own `load_weights` takes, without its scatter.
`hf_blocks()` and `hf_shards()` say which HF blocks each local parameter holds and cut them out
(executor/reshard/megatron_blocks.py, shared with verl's Megatron engine).

Dense and MoE models of the families mbridge knows (Qwen2/Qwen3/Llama, Qwen3-MoE, DeepSeek-V3 with multi-latent
attention built as executor/cpu/megatron_mla.py says). MoE layers are
built with expert parallelism `ep` and expert TP `etp` (Megatron's default: the TP size) as Megatron's local
SequentialMLP, one module per local expert (mbridge's grouped-GEMM default needs Transformer Engine), with the
settings of executor/cpu/megatron_compat.py `MOE_ON_CPU`, which verl's Megatron engine runs with on CPU; or, with
`grouped_experts`, as the legacy GroupedMLP MindSpeed's moe_tp_extend_ep builds (whole experts in two tensors per
layer, loaded and read through executor/reshard/megatron_blocks.py `grouped_expert_views`). Sequence
parallelism is off (torch's RMSNorm refuses it; it does not change where weights live).
The vocabulary is not padded: the bridge is built as verl's Megatron engine builds it, without
make_vocab_size_divisible_by (twin/cost_models/placement.py TRAIN_VOCAB_MULTIPLE says where), so TP must divide it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from executor.reshard.megatron_blocks import (
    HfSlice,
    cut_hf_shards,
    grouped_expert_shards,
    grouped_expert_views,
    hf_sources,
    local_part,
    trace_hf_blocks,
)

if TYPE_CHECKING:
    import torch

    from twin.catalog.inventory import Block

class MegatronModelError(Exception):
    """The model cannot be built or loaded as asked; the message says why."""


@dataclass
class MegatronCpuModel:
    """This rank's stage of a Megatron GPTModel and the mbridge bridge that maps it to HF tensors."""

    bridge: Any
    model: Any
    sources: dict[str, list[str]]  # local parameter -> HF names, in order (mbridge's mapping)
    # local grouped-MLP expert parameter -> (HF name, the view of its data holding that tensor)
    # (executor/reshard/megatron_blocks.py grouped_expert_views)
    grouped: dict[str, list[tuple[str, torch.Tensor]]] = field(default_factory=dict)

    @classmethod
    def build(cls, hf_config: dict[str, Any], tp: int, pp: int, seed: int = 0, dtype: torch.dtype | None = None,
              ep: int = 1, etp: int | None = None, grouped_experts: bool = False) -> MegatronCpuModel:
        """Build this rank's stage in `dtype` (float32 by default); the default process group must be initialised
        (gloo). `grouped_experts`: routed experts as Megatron's legacy GroupedMLP (two tensors per layer, whole
        experts: expert TP 1), as MindSpeed's moe_tp_extend_ep builds them, instead of one SequentialMLP module each."""
        import torch
        from mbridge import AutoBridge
        from mbridge.core.parallel_states import ParallelStates
        from megatron.core import parallel_state as mpu
        from megatron.core.models.gpt.gpt_model import GPTModel
        from transformers import AutoConfig

        from executor.cpu.megatron_compat import MOE_ON_CPU, apply_all
        from executor.cpu.megatron_mla import cpu_block_spec
        from twin.catalog.config import parse_config

        apply_all()
        fields = {k: v for k, v in hf_config.items() if k != "model_type"}
        config = AutoConfig.for_model(hf_config["model_type"], **fields)
        if config.num_hidden_layers % pp:
            raise MegatronModelError(f"{config.num_hidden_layers} layers cannot be split into PP{pp} even stages")
        if config.vocab_size % tp:
            raise MegatronModelError(f"{config.vocab_size} vocabulary rows cannot be split over TP{tp} (unpadded, as "
                                     "verl's Megatron engine builds it)")
        mpu.destroy_model_parallel()
        mpu.initialize_model_parallel(tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp,
                                      expert_model_parallel_size=ep, expert_tensor_parallel_size=etp)
        torch.manual_seed(seed)
        try:
            bridge = AutoBridge.from_config(config, dtype=dtype or torch.float32,
                                            parallel_states=ParallelStates.get_parallel_state())
        except ValueError as exc:
            raise MegatronModelError(f"mbridge has no bridge for model type {hf_config['model_type']!r}") from exc
        moe = dict(MOE_ON_CPU) if parse_config(hf_config, "the check's model").moe else {}
        if grouped_experts:
            if (etp or tp) != 1:
                raise MegatronModelError("grouped-MLP experts are read whole: expert TP must be 1")
            moe.update(moe_grouped_gemm=True, moe_use_legacy_grouped_gemm=True)
        bridge.set_extra_args(use_cpu_initialization=True, masked_softmax_fusion=False, sequence_parallel=False,
                              gradient_accumulation_fusion=False, bias_dropout_fusion=False, apply_rope_fusion=False,
                              **moe)
        rope = (getattr(config, "rope_parameters", None) or {}).get("rope_theta") or config.rope_theta
        model = GPTModel(config=bridge.config,
                         transformer_layer_spec=cpu_block_spec(bridge.config),
                         vocab_size=config.vocab_size, max_sequence_length=config.max_position_embeddings,
                         pre_process=mpu.is_pipeline_first_stage(), post_process=mpu.is_pipeline_last_stage(),
                         share_embeddings_and_output_weights=bool(getattr(config, "tie_word_embeddings", False)),
                         position_embedding_type="rope", rotary_base=rope)
        params = {n: p.data for n, p in model.named_parameters()}
        return cls(bridge, model, hf_sources(bridge, model), grouped_expert_views(bridge, model, params))

    def parameters(self) -> dict[str, torch.Tensor]:
        return {n: p for n, p in self.model.state_dict(keep_vars=True).items()
                if n in self.sources or n in self.grouped}

    def load(self, checkpoint: dict[str, torch.Tensor]) -> None:
        """Fill every local parameter from a full HF state dict (every rank reads the checkpoint itself)."""
        import torch

        with torch.no_grad():
            for name, views in self.grouped.items():
                for hf, view in views:
                    if hf not in checkpoint:
                        raise MegatronModelError(f"{name}: {hf} is not in the checkpoint")
                    view.copy_(checkpoint[hf])
            for name, param in self.parameters().items():
                if name in self.grouped:
                    continue
                missing = [n for n in self.sources[name] if n not in checkpoint]
                if missing:
                    raise MegatronModelError(f"{name}: {missing[0]} is not in the checkpoint")
                part = local_part(self.bridge, name, [checkpoint[n] for n in self.sources[name]], param)
                if tuple(part.shape) != tuple(param.shape):
                    raise MegatronModelError(f"{name}: mbridge gives {tuple(part.shape)}, the module holds "
                                             f"{tuple(param.shape)}")
                param.copy_(part)

    def hf_blocks(self, shapes: dict[str, tuple[int, ...]]) -> dict[str, list[HfSlice]]:
        """Local parameter -> the HF blocks it holds (the grouped-MLP experts' are `grouped`)."""
        params = {n: p for n, p in self.parameters().items() if n not in self.grouped}
        return trace_hf_blocks(self.bridge, params, self.sources, shapes)

    def hf_shards(self, blocks: dict[str, list[HfSlice]]) -> dict[str, dict[Block, torch.Tensor]]:
        """This rank's HF blocks cut from its live parameters: {HF name: {block: tensor}}."""
        return {**cut_hf_shards(self.parameters(), blocks), **grouped_expert_shards(self.grouped)}
