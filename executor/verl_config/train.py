"""Training layout -> actor and reference engine overrides (Megatron/MindSpeed or FSDP), and PPO's critic's: verl's
`critic` section in the same layout (the twin costs the critic in the actor's layout: TrainLayout.for_critic)."""

from __future__ import annotations

from dataclasses import dataclass

from executor.errors import ExecutorError
from executor.verl_config.overrides import OverrideSet
from twin.hardware.specs import MegatronFlavour
from twin.layout.models import TrainLayout

ACTOR = "actor_rollout_ref.actor"
REF = "actor_rollout_ref.ref"
ROLLOUT = "actor_rollout_ref.rollout"
CRITIC = "critic"


@dataclass(frozen=True)
class Trained:
    """Where verl 0.9's config keeps one trained model's engine settings."""

    prefix: str  # the role's section
    fsdp: str  # its FSDP engine section
    model: str  # its model section
    sharing: tuple[str, ...] = ()  # sections of roles in the same parallel layout (the actor's reference model)

    @property
    def transformer(self) -> str:
        return f"{self.prefix}.megatron.override_transformer_config"

    @property
    def optimizer(self) -> str:
        return f"{self.prefix}.optim.override_optimizer_config"  # verl passes its entries to Megatron's OptimizerConfig


ACTOR_ROLE = Trained(ACTOR, f"{ACTOR}.fsdp_config", "actor_rollout_ref.model", sharing=(REF,))
CRITIC_ROLE = Trained(CRITIC, f"{CRITIC}.fsdp", f"{CRITIC}.model")


def train_overrides(o: OverrideSet, train: TrainLayout, flavour: MegatronFlavour, critic: bool = False) -> None:
    """Set `model_engine` and the actor/ref sharding, recompute and offload of `train`; with `critic`, PPO's critic's
    too (its micro-batches and token budgets: verl_config.workload)."""
    if train.offload.grad and not train.offload.param:
        raise ExecutorError("offload.grad without offload.param cannot be expressed in verl 0.9 "
                            "(param_offload moves parameters and gradient buffers together)")
    for role in (ACTOR_ROLE, CRITIC_ROLE) if critic else (ACTOR_ROLE,):
        if train.engine == "megatron":
            _megatron(o, train, flavour, role)
        else:
            _fsdp(o, train, role)
    if train.dynamic_batch_tokens is not None:
        # use_dynamic_bsz itself is set with the batch sizes (verl_config.workload); the ref and rollout log-prob
        # passes read both through ${oc.select:actor_rollout_ref.actor...} (verl 0.9.1) unless given their own budget
        o.set(f"{ACTOR}.ppo_max_token_len_per_gpu", train.dynamic_batch_tokens)
    if train.log_prob_dynamic_batch_tokens is not None:
        for role in (ROLLOUT, REF):
            o.set(f"{role}.log_prob_max_token_len_per_gpu", train.log_prob_dynamic_batch_tokens)
    if train.balance_batch is not None:  # unset: verl's default (on)
        o.set("trainer.balance_batch", train.balance_batch)


def _megatron(o: OverrideSet, train: TrainLayout, flavour: MegatronFlavour, role: Trained) -> None:
    o.set("model_engine", "megatron")
    parallel = {
        "tensor_model_parallel_size": train.tp,
        "pipeline_model_parallel_size": train.pp,
        "expert_model_parallel_size": train.ep,
        "expert_tensor_parallel_size": train.expert_tp,
        "context_parallel_size": train.cp,
        "virtual_pipeline_model_parallel_size": train.vpp,
        "sequence_parallel": train.sequence_parallel and train.tp > 1,
        "param_offload": train.offload.param,
    }
    for section in (role.prefix, *role.sharing):
        for key, value in parallel.items():
            o.set(f"{section}.megatron.{key}", value)
        if train.padding != "none" and role.prefix == ACTOR:  # the critic packs (TrainLayout.for_critic)
            o.set(f"{section}.megatron.use_remove_padding", False)
            o.set(f"{section}.megatron.pad_bshd_to_minibatch_max", train.padding == "mini_batch")
    o.set(f"{role.prefix}.megatron.optimizer_offload", train.offload.optimizer == "offload")
    tf = role.transformer
    _recompute(o, train, tf)
    _pipeline_split(o, train, flavour, tf)
    if train.moe_tp_extend_ep:
        _mindspeed_only(flavour, "moe_tp_extend_ep")
        # MindSpeed's tp-extend-ep needs grouped GEMM and async permutation (MindSpeed docs, megatron-moe-tp-extend-ep)
        for key in ("moe_tp_extend_ep", "moe_grouped_gemm", "moe_permutation_async_comm"):
            o.set(f"{tf}.{key}", True, add=True)
    elif train.moe_grouped_gemm:
        _mindspeed_only(flavour, "moe_grouped_gemm (GroupedMLP's two tensors a layer)")
        o.set(f"{tf}.moe_grouped_gemm", True, add=True)
    if train.offload.optimizer == "swap":
        _mindspeed_only(flavour, "the swap optimizer")
        o.set(f"{tf}.swap_optimizer", True, add=True)
    if train.offload.optimizer == "cpu":
        _cpu_optimizer(o, flavour, role.optimizer)
    if train.moe_zero_memory != "none":
        _mindspeed_only(flavour, "moe_zero_memory")
        if train.moe_tp_extend_ep:
            raise ExecutorError("moe_zero_memory with moe_tp_extend_ep: MindSpeed's all-to-all overlap, which zero "
                                "memory needs, asks for the alltoall dispatcher in some releases and alltoall_seq "
                                "with tp-extend-ep in others, and no published run shows which works; use "
                                "moe_grouped_gemm with expert TP 1 (as cann-recipes-train's Qwen3-235B recipe)")
        o.set(f"{tf}.moe_zero_memory", train.moe_zero_memory, add=True)
        # MindSpeed refuses moe_zero_memory without its all-to-all overlap, which runs on the all-to-all dispatcher
        # (features_manager/moe/moe_alltoall_overlap.py; cann-recipes-train's Qwen3-235B recipe sets the same)
        o.set(f"{tf}.moe_alltoall_overlap_comm", True, add=True)
        o.set(f"{tf}.moe_token_dispatcher_type", "alltoall", add=True)


def _recompute(o: OverrideSet, train: TrainLayout, tf: str) -> None:
    rc = train.recompute
    if rc.granularity == "none":
        return
    o.set(f"{tf}.recompute_granularity", rc.granularity)
    if rc.granularity == "full":
        o.set(f"{tf}.recompute_method", rc.method)
        o.set(f"{tf}.recompute_num_layers", rc.layers or 1)


def _pipeline_split(o: OverrideSet, train: TrainLayout, flavour: MegatronFlavour, tf: str) -> None:
    layers = train.pp_layers
    if layers is None or len(set(layers)) == 1:
        return
    if flavour == "mindspeed":
        o.set(f"{tf}.num_layer_list", ",".join(str(n) for n in layers), add=True)
        return
    middle = set(layers[1:-1])
    if len(middle) > 1:
        raise ExecutorError(f"pp_layers {list(layers)}: Megatron core sets only the first and last stage sizes "
                            "(the middle stages must be equal); MindSpeed's num_layer_list is Ascend-only")
    o.set(f"{tf}.num_layers_in_first_pipeline_stage", layers[0], add=True)
    o.set(f"{tf}.num_layers_in_last_pipeline_stage", layers[-1], add=True)


def _cpu_optimizer(o: OverrideSet, flavour: MegatronFlavour, optimizer: str) -> None:
    """Megatron core's CPU optimizer: every optimizer state on the host, which steps with torch's AdamW while the
    gradient and parameter copies overlap it (OptimizerConfig fields, passed by verl's override_optimizer_config)."""
    if flavour == "mindspeed":
        raise ExecutorError("the CPU optimizer (Megatron core's HybridDeviceOptimizer) is not known to run under "
                            "MindSpeed on NPU; on Ascend use the swap optimizer (offload.optimizer: swap)")
    for key, value in (("optimizer_cpu_offload", True), ("optimizer_offload_fraction", 1.0),
                       ("overlap_cpu_optimizer_d2h_h2d", True), ("use_precision_aware_optimizer", True)):
        o.set(f"{optimizer}.{key}", value, add=True)


def _mindspeed_only(flavour: MegatronFlavour, what: str) -> None:
    if flavour != "mindspeed":
        raise ExecutorError(f"{what} is a MindSpeed feature; this cluster kind trains with Megatron core")


def _fsdp(o: OverrideSet, train: TrainLayout, role: Trained) -> None:
    if train.model_parallel // train.cp != 1 or train.ep != 1:
        raise ExecutorError(f"FSDP layout with TP{train.tp} PP{train.pp} EP{train.ep}: verl's FSDP engine "
                            "shards by data parallelism only (use engine megatron)")
    if train.offload.optimizer in ("swap", "cpu"):
        raise ExecutorError(f"offload.optimizer {train.offload.optimizer!r} is a Megatron-side optimizer; verl's FSDP "
                            "engine offers optimizer offload (offload.optimizer: offload)")
    o.set("model_engine", "dp")
    for section in (role.fsdp, *(f"{shared}.fsdp_config" for shared in role.sharing)):
        o.set(f"{section}.param_offload", train.offload.param)
        o.set(f"{section}.ulysses_sequence_parallel_size", train.cp)
    o.set(f"{role.fsdp}.optimizer_offload", train.offload.optimizer == "offload")
    o.set(f"{role.model}.enable_gradient_checkpointing", train.recompute.granularity != "none")
