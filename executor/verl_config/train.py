"""Training layout -> actor and reference engine overrides (Megatron/MindSpeed or FSDP)."""

from __future__ import annotations

from executor.errors import ExecutorError
from executor.verl_config.overrides import OverrideSet
from twin.hardware.specs import MegatronFlavour
from twin.layout.models import TrainLayout

ACTOR = "actor_rollout_ref.actor"
REF = "actor_rollout_ref.ref"
ROLLOUT = "actor_rollout_ref.rollout"
TF = f"{ACTOR}.megatron.override_transformer_config"
OPTIM_OVERRIDES = f"{ACTOR}.optim.override_optimizer_config"  # verl passes its entries to Megatron's OptimizerConfig


def train_overrides(o: OverrideSet, train: TrainLayout, flavour: MegatronFlavour) -> None:
    """Set `model_engine` and the actor/ref sharding, recompute and offload of `train`."""
    if train.offload.grad and not train.offload.param:
        raise ExecutorError("offload.grad without offload.param cannot be expressed in verl 0.9 "
                            "(param_offload moves parameters and gradient buffers together)")
    if train.engine == "megatron":
        _megatron(o, train, flavour)
    else:
        _fsdp(o, train)
    if train.dynamic_batch_tokens is not None:
        # use_dynamic_bsz itself is set with the batch sizes (verl_config.workload); the ref and rollout log-prob
        # passes read both through ${oc.select:actor_rollout_ref.actor...} (verl 0.9.1) unless given their own budget
        o.set(f"{ACTOR}.ppo_max_token_len_per_gpu", train.dynamic_batch_tokens)
    if train.log_prob_dynamic_batch_tokens is not None:
        for role in (ROLLOUT, REF):
            o.set(f"{role}.log_prob_max_token_len_per_gpu", train.log_prob_dynamic_batch_tokens)


def _megatron(o: OverrideSet, train: TrainLayout, flavour: MegatronFlavour) -> None:
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
    for role in (ACTOR, REF):
        for key, value in parallel.items():
            o.set(f"{role}.megatron.{key}", value)
    o.set(f"{ACTOR}.megatron.optimizer_offload", train.offload.optimizer == "offload")
    _recompute(o, train)
    _pipeline_split(o, train, flavour)
    if train.moe_tp_extend_ep:
        _mindspeed_only(flavour, "moe_tp_extend_ep")
        # MindSpeed's tp-extend-ep needs grouped GEMM and async permutation (MindSpeed docs, megatron-moe-tp-extend-ep)
        for key in ("moe_tp_extend_ep", "moe_grouped_gemm", "moe_permutation_async_comm"):
            o.set(f"{TF}.{key}", True, add=True)
    if train.offload.optimizer == "swap":
        _mindspeed_only(flavour, "the swap optimizer")
        o.set(f"{TF}.swap_optimizer", True, add=True)
    if train.offload.optimizer == "cpu":
        _cpu_optimizer(o, flavour)
    if train.moe_zero_memory != "none":
        _mindspeed_only(flavour, "moe_zero_memory")
        o.set(f"{TF}.moe_zero_memory", train.moe_zero_memory, add=True)


def _recompute(o: OverrideSet, train: TrainLayout) -> None:
    rc = train.recompute
    if rc.granularity == "none":
        return
    o.set(f"{TF}.recompute_granularity", rc.granularity)
    if rc.granularity == "full":
        o.set(f"{TF}.recompute_method", rc.method)
        o.set(f"{TF}.recompute_num_layers", rc.layers or 1)


def _pipeline_split(o: OverrideSet, train: TrainLayout, flavour: MegatronFlavour) -> None:
    layers = train.pp_layers
    if layers is None or len(set(layers)) == 1:
        return
    if flavour == "mindspeed":
        o.set(f"{TF}.num_layer_list", ",".join(str(n) for n in layers), add=True)
        return
    middle = set(layers[1:-1])
    if len(middle) > 1:
        raise ExecutorError(f"pp_layers {list(layers)}: Megatron core sets only the first and last stage sizes "
                            "(the middle stages must be equal); MindSpeed's num_layer_list is Ascend-only")
    o.set(f"{TF}.num_layers_in_first_pipeline_stage", layers[0], add=True)
    o.set(f"{TF}.num_layers_in_last_pipeline_stage", layers[-1], add=True)


def _cpu_optimizer(o: OverrideSet, flavour: MegatronFlavour) -> None:
    """Megatron core's CPU optimizer: every optimizer state on the host, which steps with torch's AdamW while the
    gradient and parameter copies overlap it (OptimizerConfig fields, passed by verl's override_optimizer_config)."""
    if flavour == "mindspeed":
        raise ExecutorError("the CPU optimizer (Megatron core's HybridDeviceOptimizer) is not known to run under "
                            "MindSpeed on NPU; on Ascend use the swap optimizer (offload.optimizer: swap)")
    for key, value in (("optimizer_cpu_offload", True), ("optimizer_offload_fraction", 1.0),
                       ("overlap_cpu_optimizer_d2h_h2d", True), ("use_precision_aware_optimizer", True)):
        o.set(f"{OPTIM_OVERRIDES}.{key}", value, add=True)


def _mindspeed_only(flavour: MegatronFlavour, what: str) -> None:
    if flavour != "mindspeed":
        raise ExecutorError(f"{what} is a MindSpeed feature; this cluster kind trains with Megatron core")


def _fsdp(o: OverrideSet, train: TrainLayout) -> None:
    if train.model_parallel // train.cp != 1 or train.ep != 1:
        raise ExecutorError(f"FSDP layout with TP{train.tp} PP{train.pp} EP{train.ep}: verl's FSDP engine "
                            "shards by data parallelism only (use engine megatron)")
    if train.offload.optimizer in ("swap", "cpu"):
        raise ExecutorError(f"offload.optimizer {train.offload.optimizer!r} is a Megatron-side optimizer; verl's FSDP "
                            "engine offers optimizer offload (offload.optimizer: offload)")
    o.set("model_engine", "dp")
    for role in (ACTOR, REF):
        o.set(f"{role}.fsdp_config.param_offload", train.offload.param)
        o.set(f"{role}.fsdp_config.ulysses_sequence_parallel_size", train.cp)
    o.set(f"{ACTOR}.fsdp_config.optimizer_offload", train.offload.optimizer == "offload")
    o.set("actor_rollout_ref.model.enable_gradient_checkpointing", train.recompute.granularity != "none")
