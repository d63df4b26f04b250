"""Validity rules of training and rollout layouts, each failure naming the rule and the numbers.

Sources of the rules: Megatron-LM core (parallel_state and TransformerConfig checks), MindSpeed
(moe_tp_extend_ep), vLLM (tensor/expert parallel loaders and scheduler config) and verl (colocated
hybrid engine: both layouts on the same devices).
"""

from __future__ import annotations

from twin.catalog.config import ModelConfig
from twin.errors import LayoutError
from twin.layout.engine import shared_experts_whole
from twin.layout.models import Layout, RolloutLayout, TrainLayout
from twin.topology.clusters import ClusterKind


def _devices_rules(devices: int, kind: ClusterKind | None) -> list[LayoutError]:
    errs = []
    if kind is not None:
        per_node = kind.devices_per_node
        if devices > per_node and devices % per_node:
            errs.append(LayoutError(
                "whole nodes",
                f"{devices} devices is not a whole number of {kind.name} nodes of {per_node} devices",
            ))
    return errs


def _tp_rules(tp: int, cfg: ModelConfig, kind: ClusterKind | None) -> list[LayoutError]:
    """What TP needs in both layouts: whole heads and FFN columns per rank."""
    errs = []
    if cfg.num_attention_heads % tp:
        errs.append(LayoutError("attention heads divisible by TP", f"{cfg.num_attention_heads} heads % TP{tp} != 0"))
    if cfg.intermediate_size % tp:
        errs.append(LayoutError("FFN size divisible by TP", f"{cfg.intermediate_size} % TP{tp} != 0"))
    return errs


def check_train(lay: TrainLayout, cfg: ModelConfig, devices: int,
                kind: ClusterKind | None = None) -> list[LayoutError]:
    """Every rule `lay` breaks for `cfg` on `devices` devices (empty when valid)."""
    errs = _devices_rules(devices, kind)
    mp = lay.model_parallel
    if devices % mp:
        errs.append(LayoutError("devices = TP x PP x CP x DP",
                                f"{devices} devices are not divisible by TP{lay.tp} x PP{lay.pp} x CP{lay.cp} = {mp}"))
        return errs
    dp = devices // mp
    if lay.engine == "fsdp":
        if lay.tp > 1 or lay.pp > 1 or lay.ep > 1:
            errs.append(LayoutError("FSDP shards over DP only",
                                    f"TP{lay.tp} PP{lay.pp} EP{lay.ep} must all be 1 with the FSDP engine"))
        if cfg.num_attention_heads % lay.cp:
            errs.append(LayoutError("attention heads divisible by Ulysses SP",
                                    f"{cfg.num_attention_heads} heads % SP{lay.cp} != 0"))
        return errs
    errs += _tp_rules(lay.tp, cfg, kind)
    if cfg.vocab_size % lay.tp:  # unpadded: twin/cost_models/placement.py TRAIN_VOCAB_MULTIPLE says why
        errs.append(LayoutError("vocabulary divisible by TP (Megatron, unpadded)",
                                f"{cfg.vocab_size} vocabulary rows % TP{lay.tp} != 0: verl's Megatron engine does "
                                "not pad the vocabulary and Megatron asserts that TP divides it"))
    if cfg.attention == "gqa" and cfg.num_kv_heads % lay.tp:
        errs.append(LayoutError("KV heads divisible by TP (Megatron num_query_groups)",
                                f"{cfg.num_kv_heads} KV heads % TP{lay.tp} != 0"))
    layers = cfg.num_layers
    if lay.pp > layers:
        errs.append(LayoutError("layers over PP stages", f"PP{lay.pp} exceeds the {layers} layers"))
    if lay.pp_layers is not None and sum(lay.pp_layers) != layers:
        errs.append(LayoutError("layers over PP stages",
                                f"pp_layers {list(lay.pp_layers)} sum to {sum(lay.pp_layers)}, the model has {layers}"))
    if lay.vpp is not None and lay.vpp > 1:
        if lay.pp < 2:
            errs.append(LayoutError("virtual pipeline needs PP > 1", f"VPP{lay.vpp} with PP{lay.pp}"))
        short = min(lay.stage_layers(layers)) if lay.pp <= layers else 0
        if short and any(n % lay.vpp for n in lay.stage_layers(layers)):
            errs.append(LayoutError("layers per stage divisible by VPP",
                                    f"stage layers {list(lay.stage_layers(layers))} with VPP{lay.vpp}"))
    errs += _train_moe_rules(lay, cfg, dp)
    if lay.recompute.granularity == "full" and lay.recompute.method == "uniform" and lay.recompute.layers:
        per_stage = max(lay.stage_layers(layers)) if lay.pp <= layers else 0
        if per_stage and lay.recompute.layers > per_stage:
            errs.append(LayoutError("recompute layers per stage",
                                    f"recompute_num_layers {lay.recompute.layers} > {per_stage} layers in a stage"))
    return errs


def _train_moe_rules(lay: TrainLayout, cfg: ModelConfig, dp: int) -> list[LayoutError]:
    errs = []
    if cfg.moe is None:
        if lay.ep > 1 or lay.moe_tp_extend_ep:
            errs.append(LayoutError("EP needs an MoE model", f"EP{lay.ep} on dense {cfg.name}"))
        if lay.moe_grouped_gemm:
            errs.append(LayoutError("grouped GEMM needs an MoE model", f"moe_grouped_gemm on dense {cfg.name}"))
        if lay.moe_zero_memory != "none":
            errs.append(LayoutError("moe_zero_memory needs an MoE model", f"moe_zero_memory on dense {cfg.name}"))
        return errs
    experts = cfg.moe.num_experts
    part = lay.expert_partition
    if lay.moe_zero_memory != "none" and (part == 1 or not lay.grouped_experts):
        # MindSpeed refuses moe_zero_memory without moe_alltoall_overlap_comm, which asks for the all-to-all
        # dispatcher over more than one expert rank and grouped GEMM (features_manager/moe/moe_alltoall_overlap.py;
        # docs/features/megatron_moe/megatron-moe-alltoall-overlap-comm.md)
        errs.append(LayoutError("moe_zero_memory needs MindSpeed's all-to-all overlap: EP > 1 and grouped GEMM",
                                f"moe_zero_memory {lay.moe_zero_memory} with EP{part}"
                                f"{'' if lay.grouped_experts else ' and no moe_grouped_gemm'}"))
    if experts % part:
        what = f"TP{lay.tp} x EP{lay.ep}" if lay.moe_tp_extend_ep else f"EP{lay.ep}"
        errs.append(LayoutError("experts divisible by EP", f"{experts} experts % {what} = {part} != 0"))
    etp = lay.expert_tp
    if cfg.moe.expert_intermediate_size % etp:
        errs.append(LayoutError("expert FFN size divisible by expert TP",
                                f"{cfg.moe.expert_intermediate_size} % ETP{etp} != 0"))
    group = lay.tp * lay.cp * dp
    if group % (etp * part):
        errs.append(LayoutError("expert TP x EP divides TP x CP x DP (Megatron expert-data-parallel)",
                                f"ETP{etp} x EP{part} = {etp * part} does not divide {group}"))
    return errs


def check_rollout(lay: RolloutLayout, cfg: ModelConfig, devices: int,
                  kind: ClusterKind | None = None) -> list[LayoutError]:
    """Every rule the rollout layout breaks (vLLM's loaders and scheduler checks)."""
    errs = _devices_rules(devices, kind)
    if lay.devices != devices:
        errs.append(LayoutError("devices = TP x DP (rollout)",
                                f"TP{lay.tp} x DP{lay.dp} = {lay.devices}, the cluster has {devices} devices"))
    errs += _tp_rules(lay.tp, cfg, kind)
    kv = cfg.num_kv_heads
    if cfg.attention == "gqa" and kv % lay.tp and lay.tp % kv:
        errs.append(LayoutError("KV heads divide TP or TP divides KV heads (vLLM replicates KV heads)",
                                f"{kv} KV heads vs TP{lay.tp}"))
    if lay.ep > 1:
        if cfg.moe is None:
            errs.append(LayoutError("EP needs an MoE model", f"rollout EP{lay.ep} on dense {cfg.name}"))
        else:
            if lay.ep % lay.tp or devices % lay.ep:
                errs.append(LayoutError("rollout EP = TP x DP-per-instance",
                                        f"EP{lay.ep} must be a multiple of TP{lay.tp} and divide {devices} devices"))
            if cfg.moe.num_experts % lay.ep:
                errs.append(LayoutError("experts divisible by EP",
                                        f"{cfg.moe.num_experts} experts % rollout EP{lay.ep} != 0"))
    elif cfg.moe is not None and cfg.moe.expert_intermediate_size % lay.tp:
        errs.append(LayoutError("expert FFN size divisible by TP",
                                f"{cfg.moe.expert_intermediate_size} % TP{lay.tp} != 0"))
    if lay.max_num_batched_tokens < lay.max_num_seqs:
        errs.append(LayoutError("max_num_batched_tokens >= max_num_seqs (vLLM scheduler)",
                                f"{lay.max_num_batched_tokens} < {lay.max_num_seqs}"))
    if kind is not None and lay.shared_experts_whole != shared_experts_whole(lay, cfg, kind.rollout_engine):
        builds = "whole on every rank" if not lay.shared_experts_whole else "split over TP"
        errs.append(LayoutError("shared experts as the rollout engine builds them (twin/layout/engine.py)",
                                f"{kind.rollout_engine} keeps the shared experts of {lay.short()} {builds}"))
    return errs


def check_verl_replica(lay: RolloutLayout, kind: ClusterKind) -> list[LayoutError]:
    """What verl's vLLM server asks of a replica that runs data parallel (verl 0.9.1 vllm_async_server.py
    vLLMHttpServer.launch_server, for data_parallel_size > 1: TP divides a node's devices and the replica has a
    whole node's workers). A rollout instance runs data parallel where its experts span more than one TP group."""
    per_instance, per_node = lay.instance_size // lay.tp, kind.devices_per_node
    if per_instance > 1 and (per_node % lay.tp or lay.instance_size % per_node):
        return [LayoutError("a data-parallel rollout replica spans whole nodes (verl's vLLM server)",
                            f"TP{lay.tp} x DP{per_instance} = {lay.instance_size} devices with {per_node} a node")]
    return []


def check_pair(train: TrainLayout, rollout: RolloutLayout, cfg: ModelConfig, directed_reshard: bool
               ) -> list[LayoutError]:
    """Rules that tie the two layouts together."""
    errs = []
    if train.moe_grouped_gemm and not train.moe_tp_extend_ep and not directed_reshard:
        errs.append(LayoutError("grouped-GEMM experts need the directed reshard",
                                "verl's weight exporters name no GroupedMLP weight1/weight2 (cann-recipes-train's "
                                "Qwen3 recipe patches them in); the directed reshard reads them (directed_reshard)"))
    if directed_reshard and cfg.moe is not None and rollout.ep > 1:
        part = train.expert_partition
        if rollout.ep % part:
            errs.append(LayoutError("train EP divides rollout EP (directed reshard)",
                                    f"training experts split {part} ways, rollout EP{rollout.ep}"))
    return errs


def check_layout(lay: Layout, cfg: ModelConfig, devices: int, kind: ClusterKind | None = None,
                 directed_reshard: bool = False) -> list[LayoutError]:
    if lay.placement == "separate":
        return check_separate(lay, cfg, devices, kind)
    return (check_train(lay.train, cfg, devices, kind) + check_rollout(lay.rollout, cfg, devices, kind)
            + check_pair(lay.train, lay.rollout, cfg, directed_reshard))


def check_separate(lay: Layout, cfg: ModelConfig, devices: int, kind: ClusterKind | None = None) -> list[LayoutError]:
    """A disaggregated pair: the rollout's TP x DP devices and the trainer's rest, each layout on its own."""
    trainer = lay.trainer_devices(devices)
    if trainer < 1:
        return [LayoutError("a separate rollout leaves the trainer devices",
                            f"rollout TP{lay.rollout.tp} x DP{lay.rollout.dp} = {lay.rollout.devices} of {devices}")]
    return check_train(lay.train, cfg, trainer, kind) + check_rollout(lay.rollout, cfg, lay.rollout.devices, kind)


def validate_layout(lay: Layout, cfg: ModelConfig, devices: int, kind: ClusterKind | None = None,
                    directed_reshard: bool = False) -> None:
    """Raise the first broken rule."""
    errs = check_layout(lay, cfg, devices, kind, directed_reshard)
    if errs:
        raise errs[0]
