"""Memory of every device in every phase, from the tensor inventory and the two layouts.

Phases: `update` (actor forward/backward and optimizer step), `log_prob` (ref and old-policy forward
passes), `rollout` (vLLM generation) and `transition` (reshard from training to rollout shards). PPO's critic
(`TrainMemory.value_model`) joins the first two with its update and its values pass, and keeps what it does not
offload beside the actor in every phase.
Static parts (weights, gradients, optimizer state, KV bytes per token, reshard staging) are exact byte
counts; activations follow the layer's tensor shapes for the step's largest micro-batch, drawn from the
workload's lengths; framework overheads come from the profile.

Precision recipe (Megatron bf16 training): bf16 weights, fp32 gradient buffer (Megatron forces fp32
gradient accumulation for bf16), distributed Adam with an fp32 master copy and two fp32 moments (12 bytes
per parameter) sharded over the data-parallel group (expert-DP for routed experts). FSDP: fp32 sharded
parameters, gradients and moments (16 bytes per parameter over all ranks) plus a bf16 copy of the largest
layer gathered for compute.

The training side (`TrainMemory`) and the rollout side (`RolloutMemory`) are computed separately so that
the planner can pair thousands of them; `phase_memory` combines one of each.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property

from twin.catalog.inventory import Inventory
from twin.cost_models.static import StageBytes, tensor_table
from twin.layout.models import RolloutLayout, TrainLayout
from twin.profile import Profile
from twin.results import MemoryBreakdown
from twin.scenario import Scenario
from twin.workload import largest_sequences_tokens, longest_sequence

GB = 1e9
BF16 = 2
FP32 = 4
ADAM_BYTES = 12  # fp32 master + two fp32 moments, per parameter
LOGIT_BYTES = 2 + FP32 + FP32  # bf16 logits, fp32 log-softmax and its gradient, per vocabulary entry
# verl's FSDP actor takes log-probs with a fused cross-entropy whose backward writes the gradient into the bf16
# logits in place (flash-attn's triton cross_entropy, inplace_backward) or row by row (logprobs_from_logits_v2):
# the bf16 logits and one bf16 working copy per vocabulary entry
FSDP_LOGIT_BYTES = 2 + 2


def dynamic_micro_batches(tokens: float, sequences: int, max_tokens: int, vpp: int | None = None) -> int:
    """verl's use_dynamic_bsz (utils/seqlen_balancing.rearrange_micro_batches): as many micro-batches as
    the tokens need at `max_tokens` each, at most one per sequence, rounded up to a multiple of the virtual
    pipeline size."""
    m = max(1, min(sequences, math.ceil(tokens / max_tokens - 1e-9)))
    if vpp and vpp > 1:
        m = -(-m // vpp) * vpp
    return m


class TrainMemory:
    """Per-stage memory of the actor (and reference) model in the training layout, or with `critic` of PPO's critic
    (`inv` its value model: twin.catalog.inventory.value_model), which has no reference model."""

    def __init__(self, inv: Inventory, lay: TrainLayout, devices: int, scenario: Scenario,
                 profile: Profile, critic: bool = False) -> None:
        self.inv, self.lay, self.devices, self.sc, self.pf = inv, lay, devices, scenario, profile
        self.cfg = inv.config
        self.is_critic = critic
        self.has_ref = scenario.workload.use_kl_loss and not critic

    @cached_property
    def value_model(self) -> TrainMemory | None:
        """The critic's memory where the workload trains one (PPO), in the same layout with the micro-batches verl
        gives a critic (TrainLayout.for_critic); None otherwise."""
        if self.is_critic or not self.sc.workload.has_critic:
            return None
        from twin.catalog.registry import load_value_model

        return TrainMemory(load_value_model(self.cfg), self.lay.for_critic(), self.devices, self.sc, self.pf,
                           critic=True)

    @cached_property
    def stages(self) -> StageBytes:
        return tensor_table(self.inv).train_stage_bytes(self.lay, self.devices)

    @property
    def n_stages(self) -> int:
        return len(self.stages.weight_bytes)

    def weight_bytes(self, stage: int) -> float:
        """Bytes of one device's shard of the model in its stored dtype (the reference model's, the reshard's)."""
        return float(self.stages.weight_bytes[stage])

    @cached_property
    def heaviest_stage(self) -> int:
        """The pipeline stage holding the most weights: its devices' copies time every offload."""
        return max(range(self.n_stages), key=self.weight_bytes)

    def offloaded_between_phases(self, stage: int) -> tuple[float, float]:
        """(parameters, gradients and optimizer state) bytes of one device of `stage` that the layout moves to the
        host between phases (the swap and CPU optimizers keep theirs where they are)."""
        off = self.lay.offload
        rest = ((self.grads_bytes(stage) if off.grad else 0.0)
                + (self.optimizer_bytes(stage) if off.optimizer == "offload" else 0.0))
        return (self.param_bytes(stage) if off.param else 0.0), rest

    def param_bytes(self, stage: int) -> float:
        """Bytes of the actor's own parameters on one device: verl's FSDP actor holds them in fp32 (fsdp_workers
        builds the actor with torch_dtype float32 unless model_dtype is set; mixed precision casts a gathered
        layer to bf16 for compute), Megatron's in bf16 (its fp32 main copy is part of the optimizer state)."""
        if self.lay.engine == "fsdp":
            return self._fp32_param_bytes(stage)
        return self.weight_bytes(stage)

    def _fp32_param_bytes(self, stage: int) -> float:
        """One fp32 value per parameter of one device's shard."""
        return float(self.stages.dense_numel[stage] + self.stages.expert_numel[stage]) * FP32

    def optimizer_step_temp_bytes(self, stage: int) -> float:
        """Scratch the optimizer step allocates: torch's foreach Adam/AdamW (verl's FSDP optimizer) computes
        sqrt(exp_avg_sq) into new fp32 tensors, one per parameter (torch/optim/adam.py _multi_tensor_adam,
        `exp_avg_sq_sqrt = torch._foreach_sqrt(...)`); Megatron's distributed optimizer steps with a fused
        Adam kernel in place (none)."""
        return self._fp32_param_bytes(stage) if self.lay.engine == "fsdp" else 0.0

    @property
    def dp(self) -> int:
        """Data-parallel replicas: devices over TP x PP x CP; for FSDP, over its Ulysses sequence-parallel size,
        whose ranks share one replica's sequences (verl fsdp_workers divides the mini-batch by
        world size // ulysses_sequence_parallel_size)."""
        return self.lay.dp(self.devices)

    @property
    def edp(self) -> int:
        lay = self.lay
        return max(1, self.devices // lay.pp // (lay.expert_partition * lay.expert_tp))

    def grads_bytes(self, stage: int) -> float:
        return float(self.stages.dense_numel[stage] + self.stages.expert_numel[stage]) * FP32

    def optimizer_bytes(self, stage: int) -> float:
        """Adam state of one device (distributed optimizer; FSDP: fp32 moments of the flat shard)."""
        dense, expert = float(self.stages.dense_numel[stage]), float(self.stages.expert_numel[stage])
        if self.lay.engine == "fsdp":
            return (dense + expert) * (ADAM_BYTES - FP32)
        return dense * ADAM_BYTES / (self.dp * self.lay.cp) + expert * ADAM_BYTES / self.edp

    def host_optimizer_bytes(self, stage: int) -> float:
        """The optimizer's bytes on the host when it lives there: its Adam state, and with Megatron's CPU
        optimizer also the fp32 gradients it copies from the device into pinned host buffers to step on
        (megatron/core/optimizer/cpu_offloading/hybrid_optimizer.py)."""
        off = self.lay.offload
        if off.optimizer == "none":
            return 0.0
        state = self.optimizer_bytes(stage)
        return state + (state / ADAM_BYTES * FP32 if off.optimizer == "cpu" else 0.0)

    # ---- activations ---------------------------------------------------------------------------
    def _layer_activation_bytes(self, tokens: float, moe: bool) -> float:
        """Bytes one layer keeps for backward for `tokens` tokens on one device (no recompute)."""
        c, lay = self.cfg, self.lay
        tp = lay.tp if lay.engine == "megatron" else 1
        sp = tp if lay.sequence_parallel or lay.engine == "fsdp" else 1
        local = tokens / lay.cp
        h = c.hidden_size
        if c.mla is not None:
            m = c.mla
            attn = (m.q_lora_rank or 0) * 2 + c.num_attention_heads * (m.qk_head_dim * 2 + m.v_head_dim * 2) / tp
            attn += (m.kv_lora_rank + m.qk_rope_head_dim) * 2
        else:
            q = c.num_attention_heads * c.head_dim
            kv = 2 * c.num_kv_heads * c.head_dim
            attn = (q + kv + 2 * q) / tp  # q, k, v, attention output (flash attention keeps no scores)
        norms_and_inputs = 4 * h / sp  # two norm inputs and two projection inputs
        if moe and c.moe is not None:
            # routed tokens per rank: all local tokens x top-k, spread over the TP ranks unless experts are TP-split
            etp = lay.expert_tp if lay.engine == "megatron" else 1
            routed = local * c.moe.experts_per_token * etp / tp
            # MindSpeed moe_zero_memory releases, for recompute in backward, the experts' activation output
            # (level0) and also the dispatched inputs (level1)
            kept_ffn = {"none": 3, "level0": 2, "level1": 2}[lay.moe_zero_memory]
            kept_in = 0 if lay.moe_zero_memory == "level1" else h
            mlp_bytes = routed * (kept_in + kept_ffn * c.moe.expert_intermediate_size / etp)
            mlp_bytes += local / sp * c.moe.num_experts * FP32 / BF16  # router logits in fp32
            if c.moe.shared_experts:
                mlp_bytes += local * 3 * c.moe.shared_experts * c.moe.expert_intermediate_size / tp
        else:
            mlp_bytes = local * 3 * c.intermediate_size / tp
        return BF16 * (local * (attn + norms_and_inputs) + mlp_bytes)

    @cached_property
    def moe_layers(self) -> int:
        return sum(1 for i in range(self.cfg.num_layers) if self.cfg.is_moe_layer(i))

    def _layer_activations(self, tokens: float) -> tuple[float, float]:
        """(mean, largest) per-layer activation bytes over the model's layers for `tokens` tokens."""
        dense = self._layer_activation_bytes(tokens, moe=False)
        sparse = self._layer_activation_bytes(tokens, moe=True)
        n_moe = self.moe_layers
        mean = (dense * (self.cfg.num_layers - n_moe) + sparse * n_moe) / self.cfg.num_layers
        return mean, max(dense, sparse if n_moe else dense)

    def _logits_bytes(self, tokens: float, forward_only: bool = False) -> float:
        """The logits of a micro-batch's last stage: Megatron's vocab-parallel fp32 cross-entropy (forward
        only: the fp32 logits), FSDP's fused bf16 one; a critic's one value per token (its head is not split)."""
        megatron = self.lay.engine == "megatron"
        tp = self.lay.tp if megatron and not self.is_critic else 1
        per_entry = (FP32 if forward_only else LOGIT_BYTES) if megatron else FSDP_LOGIT_BYTES
        return tokens / self.lay.cp * self.inv.head_outputs / tp * per_entry

    def passes(self, forward_only: bool) -> int:
        """Passes a step makes over its sequences: one log-prob pass, one update pass per optimizer step."""
        return 1 if forward_only else self.sc.workload.optimizer_steps

    def sequences_per_pass(self, forward_only: bool) -> float:
        """Sequences one DP rank runs through one pass: the whole step's in a log-prob pass, one optimizer
        step's (its share of a mini-batch) in the update."""
        return self.sc.workload.responses / self.dp / self.passes(forward_only)

    def _micro_batch_tokens(self, forward_only: bool) -> float:
        """Tokens of the largest micro-batch of a CP group in one step, from the workload's lengths: of fixed
        micro-batches, the largest of the step's groups of micro_batch (log-prob passes: log_prob_micro_batch)
        sequences (verl and MindSpeed-RL pack them
        without padding: use_remove_padding, verl's default); with dynamic batching, the busiest rank's sequences
        of one pass balanced into as few micro-batches as the token budget allows (verl's ppo_max_token_len_per_gpu,
        log_prob_max_token_len_per_gpu in the log-prob passes, x CP): a budget larger than a rank's tokens leaves
        its micro-batch at those tokens, not at the budget. The largest of a step, not of a whole run. Padded
        (`TrainLayout.padding`), at least the micro-batch that holds the step's longest sequence, its sequences at
        that length."""
        lay, wl = self.lay, self.sc.workload
        sequences = lay.log_prob_micro_batch if forward_only else lay.micro_batch
        per = self.sequences_per_pass(forward_only)
        passes = self.passes(forward_only)
        held = max(1, int(per))  # a rank given less than one sequence still runs one
        budget = lay.token_budget(forward_only)
        if budget is None:
            group = min(sequences, held)
            packed = largest_sequences_tokens(wl, group, self.dp * passes * max(1, held // group))
        else:
            busiest = largest_sequences_tokens(wl, held, self.dp * passes)
            vpp = lay.vpp if lay.engine == "megatron" else None
            group = held / dynamic_micro_batches(busiest, held, budget * lay.cp, vpp)
            packed = busiest * group / held
        if lay.padding == "none":
            return packed
        return max(packed, group * longest_sequence(wl, wl.global_batch, wl.responses))

    @cached_property
    def _pass_activations(self) -> dict[bool, tuple[float, float, float]]:
        """By forward_only: (tokens, mean and largest per-layer activation bytes) of the pass's largest
        micro-batch, the same on every stage."""
        passes = {}
        for forward_only in (False, True):
            tokens = self._micro_batch_tokens(forward_only)
            passes[forward_only] = (tokens, *self._layer_activations(tokens))
        return passes

    def update_activation_bytes(self, stage: int, fragmented: bool = True) -> float:
        """Peak activation bytes of a stage in update_actor (1F1B: stage s holds pp - s micro-batches); with
        `fragmented`, as the caching allocator reserves them (its fragmentation on top of what is allocated)."""
        tokens, mean, largest = self._pass_activations[False]
        lay = self.lay
        layers = int(self.stages.layers[stage])
        h = self.cfg.hidden_size
        sp = lay.tp if (lay.sequence_parallel and lay.engine == "megatron") else 1
        rc = lay.recompute
        working = largest
        if rc.granularity == "full":
            unit = rc.layers or 1
            checkpoint = tokens / lay.cp / sp * h * BF16
            if rc.method == "uniform":
                per_mb = -(-layers // unit) * checkpoint  # one checkpoint per unit of layers
            else:  # block: the first `unit` layers recomputed, the rest stored
                recomputed = min(unit, layers)
                per_mb = recomputed * checkpoint + (layers - recomputed) * mean
            working = largest * unit  # a recompute unit rematerialised during backward
        elif rc.granularity == "selective":
            per_mb = layers * mean * self.pf["selective_recompute_kept"]  # the attention core is not stored
        else:
            per_mb = layers * mean
        in_flight = (lay.pp - stage) if lay.engine == "megatron" else 1
        logits = self._logits_bytes(tokens) if self.stages.has_head[stage] else 0.0
        gathered = float(tensor_table(self.inv).largest_layer_bytes) if lay.engine == "fsdp" else 0.0
        allocated = per_mb * in_flight + working + logits + gathered
        return allocated * (1 + self.pf["activation_fragmentation"]) if fragmented else allocated

    def log_prob_activation_bytes(self, stage: int, fragmented: bool = True) -> float:
        """Forward-only pass: one layer live at a time, plus the fp32 logits of the micro-batch; with `fragmented`,
        as the caching allocator reserves them."""
        lay = self.lay
        tokens, _, largest = self._pass_activations[True]
        logits = self._logits_bytes(tokens, forward_only=True) if self.stages.has_head[stage] else 0.0
        gathered = float(tensor_table(self.inv).largest_layer_bytes) if lay.engine == "fsdp" else 0.0
        allocated = largest + logits + gathered
        return allocated * (1 + self.pf["activation_fragmentation"]) if fragmented else allocated

    # ---- what stays on the device outside training -----------------------------------------------
    def resident_outside_training(self, stage: int) -> dict[str, float]:
        """Bytes of the actor and ref that stay on the device during rollout and transitions."""
        off = self.lay.offload
        w = self.param_bytes(stage)
        return {
            "weights": (0 if off.param else w) + self.ref_resident(stage),
            "grads": 0 if off.grad else self.grads_bytes(stage),
            "optimizer": 0 if off.optimizer != "none" else self.optimizer_bytes(stage),
        }

    def ref_resident(self, stage: int) -> float:
        """The reference model's weights stay on the device unless parameters are offloaded."""
        if self.lay.offload.param or not self.has_ref:
            return 0.0
        return self.weight_bytes(stage)

    def host_bytes_in_training(self, stage: int) -> float:
        """Bytes of one device's training state on the host during the training phases."""
        off = self.lay.offload
        ref = self.weight_bytes(stage) if off.param and self.has_ref else 0
        return ref + self.host_optimizer_bytes(stage)

    def host_bytes(self, stage: int) -> float:
        """Bytes of one device's training state held on the host while the rollout runs."""
        off = self.lay.offload
        w = self.param_bytes(stage)
        ref = self.weight_bytes(stage) if off.param and self.has_ref else 0
        return ((w if off.param else 0) + ref + (self.grads_bytes(stage) if off.grad else 0)
                + self.host_optimizer_bytes(stage))


class RolloutMemory:
    """Memory of the vLLM side in the rollout layout."""

    def __init__(self, inv: Inventory, lay: RolloutLayout, profile: Profile, capacity_gb: float) -> None:
        self.inv, self.lay, self.pf, self.capacity_gb = inv, lay, profile, capacity_gb
        self.cfg = inv.config

    @cached_property
    def weight_bytes(self) -> int:
        dense, expert = tensor_table(self.inv).rollout_bytes(self.lay)
        return dense + expert

    @cached_property
    def kv_bytes_per_token(self) -> int:
        """KV bytes per token on one device: MLA's compressed latent (not split by TP), else GQA heads."""
        c, tp = self.cfg, self.lay.tp
        if c.mla is not None:
            per_layer = (c.mla.kv_lora_rank + c.mla.qk_rope_head_dim) * BF16
        else:
            heads = c.num_kv_heads // tp if c.num_kv_heads >= tp else 1
            per_layer = 2 * heads * c.head_dim * BF16
        return per_layer * c.num_layers

    @cached_property
    def profile_peak_bytes(self) -> float:
        """vLLM's profiling peak beyond the weights: one layer for max_num_batched_tokens tokens, sampled logits."""
        ro, c = self.lay, self.cfg
        inter = max(c.intermediate_size, (c.moe.expert_intermediate_size * c.moe.experts_per_token) if c.moe else 0)
        per_token = BF16 * (4 * c.hidden_size + 3 * inter / ro.tp)
        logits = ro.max_num_seqs * c.vocab_size / ro.tp * FP32
        return ro.max_num_batched_tokens * per_token + logits

    @cached_property
    def graph_bytes(self) -> float:
        """The captured graphs' memory pools (graph mode only)."""
        return self.pf["graph_memory_gb"] * GB if self.lay.graph_mode else 0.0

    @cached_property
    def activation_bytes(self) -> float:
        """Activations of the rollout phase: the profiling peak and the graph pools."""
        return self.profile_peak_bytes + self.graph_bytes

    def kv_cache_bytes(self, utilization: float) -> int:
        """KV cache vLLM allocates: its budget minus weights, profiling peak and its own overheads.

        The graph pools are not taken from the budget: vLLM-Ascend's NPUWorker.determine_available_memory sizes
        the KV cache as total x utilization less the profile run's peak, and captures its graphs afterwards
        (compile_or_warm_up_model), so they come out of the memory the utilization leaves; upstream vLLM did
        the same until its CUDA-graph memory estimate became the default (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS,
        v0.21, NVIDIA and XPU only: vllm/v1/worker/gpu_worker.py determine_available_memory). The total is the one
        torch reports (mem_get_info), the device's allocator capacity."""
        budget = utilization * self.capacity_gb * GB
        used = self.weight_bytes + self.profile_peak_bytes + self.pf["vllm_overhead_gb"] * GB
        return max(0, int(budget - used))

    def kv_tokens(self, utilization: float) -> int:
        return self.kv_cache_bytes(utilization) // self.kv_bytes_per_token


@dataclass
class MemoryReport:
    """Per-phase breakdown of the worst device, peaks, host memory per node and the KV cache."""

    phases: dict[str, MemoryBreakdown]
    worst_stage: dict[str, int]
    capacity_gb: float  # the device memory a run can fill (DeviceSpec.capacity_gb)
    host_gb_per_node: float
    host_capacity_gb_per_node: float
    kv_bytes_per_token: int
    kv_cache_bytes: int
    kv_tokens: int
    notes: list[str] = field(default_factory=list)

    @property
    def peak_gb(self) -> dict[str, float]:
        return {k: b.total for k, b in self.phases.items()}

    @property
    def peak_gb_max(self) -> float:
        return max(self.peak_gb.values())

    @property
    def peak_phase(self) -> str:
        return max(self.peak_gb, key=self.peak_gb.__getitem__)

    @property
    def fits(self) -> bool:
        return self.peak_gb_max <= self.capacity_gb and self.kv_tokens > 0

    @property
    def host_fits(self) -> bool:
        return self.host_gb_per_node <= self.host_capacity_gb_per_node


def _gb(**parts: float) -> MemoryBreakdown:
    return MemoryBreakdown(**{k: v / GB for k, v in parts.items()})


def _add(a: MemoryBreakdown, b: MemoryBreakdown) -> MemoryBreakdown:
    return MemoryBreakdown(**{k: getattr(a, k) + getattr(b, k) for k in MemoryBreakdown.model_fields})


def update_parts(tm: TrainMemory, stage: int, allocated: bool = False) -> tuple[MemoryBreakdown, MemoryBreakdown]:
    """The two candidate peaks of update_actor on one device of `stage`: forward/backward (activations) and the
    optimizer step (its state and scratch). `allocated`: what the torch allocator has handed out, without the
    framework's memory outside it (HCCL buffers, runtime workspace) and without fragmentation."""
    overhead = 0.0 if allocated else tm.pf["framework_overhead_gb"] * GB
    weights = tm.param_bytes(stage) + tm.ref_resident(stage)
    grads, opt = tm.grads_bytes(stage), tm.optimizer_bytes(stage)
    # verl's and MindSpeed-RL's optimizer offload moves the state back when update_actor starts (verl 0.9.1
    # workers/engine/base.py BaseEngineCtx: the train mode loads model, gradients and optimizer on entry), so it is
    # on the device through forward/backward; the swap and CPU optimizers keep it on the host until the step
    resident_opt = opt if tm.lay.offload.optimizer in ("none", "offload") else 0
    fwd_bwd = _gb(weights=weights, grads=grads, optimizer=resident_opt,
                  activations=tm.update_activation_bytes(stage, fragmented=not allocated), overhead=overhead)
    return fwd_bwd, optimizer_step_part(tm, stage, allocated)


def optimizer_step_part(tm: TrainMemory, stage: int, allocated: bool = False) -> MemoryBreakdown:
    """update_actor's optimizer-step peak on one device of `stage` (no activations): a lower bound of its peak
    that needs no activation model, which the planner screens training layouts with."""
    pf, off = tm.pf, tm.lay.offload
    # the step holds its state on the device, but for one bucket of the swap optimizer, and none of the CPU one's
    step_opt = {"swap": pf["swap_optimizer_bucket_gb"] * GB, "cpu": 0.0}.get(off.optimizer, tm.optimizer_bytes(stage))
    return _gb(weights=tm.param_bytes(stage) + tm.ref_resident(stage), grads=tm.grads_bytes(stage),
               optimizer=step_opt + tm.optimizer_step_temp_bytes(stage),
               overhead=0.0 if allocated else pf["framework_overhead_gb"] * GB)


def log_prob_part(tm: TrainMemory, stage: int, allocated: bool = False) -> MemoryBreakdown:
    """The log-prob passes' peak on one device of `stage`: the actor's parameters and, unless parameters are
    offloaded, the reference model's weights beside them (offloaded, each pass loads its own model, and the actor's
    parameters are the larger or equal: fp32 under FSDP, bf16 like the ref's under Megatron); `allocated` as in
    update_parts."""
    idle = tm.resident_outside_training(stage)
    return _gb(weights=tm.param_bytes(stage) + tm.ref_resident(stage), grads=idle["grads"], optimizer=idle["optimizer"],
               activations=tm.log_prob_activation_bytes(stage, fragmented=not allocated),
               overhead=0.0 if allocated else tm.pf["framework_overhead_gb"] * GB)


def _total(b: MemoryBreakdown) -> float:
    return b.total


def _idle(tm: TrainMemory, stage: int, overhead: float = 0.0) -> MemoryBreakdown:
    """What one trained model (and the actor's reference) keeps on a device of `stage` outside its own passes, with
    `overhead` bytes of the framework's beside it."""
    idle = tm.resident_outside_training(stage)
    return _gb(weights=idle["weights"], grads=idle["grads"], optimizer=idle["optimizer"], overhead=overhead)


def train_parts(tm: TrainMemory, stage: int) -> dict[str, MemoryBreakdown]:
    """What the training side puts on one device of `stage` in each phase (the rollout side excluded); with a critic
    (PPO), its passes join the actor's phases (update_critic the update, compute_values the log-prob passes) with the
    actor's idle state beside them, and its idle state sits beside the actor's."""
    overhead = tm.pf["framework_overhead_gb"] * GB
    weights = tm.param_bytes(stage)
    ref = tm.ref_resident(stage)
    idle = tm.resident_outside_training(stage)
    parts = {
        "update": max(update_parts(tm, stage), key=_total),
        "log_prob": log_prob_part(tm, stage),
        "rollout": _idle(tm, stage, overhead),
        "transition": _gb(weights=weights + ref, grads=idle["grads"], optimizer=idle["optimizer"], overhead=overhead),
    }
    return with_critic(parts, tm, stage, allocated=False)


def with_critic(parts: dict[str, MemoryBreakdown], tm: TrainMemory, stage: int,
                allocated: bool) -> dict[str, MemoryBreakdown]:
    """`parts` (the actor's, by phase; its update and log_prob at least) with the critic's state and passes where the
    workload trains one."""
    critic = tm.value_model
    if critic is None:
        return parts
    beside_actor, beside_critic = _idle(critic, stage), _idle(tm, stage)
    out = {name: _add(b, beside_actor) for name, b in parts.items()}
    own = {"update": max(update_parts(critic, stage, allocated), key=_total),
           "log_prob": log_prob_part(critic, stage, allocated)}
    for name, b in own.items():
        out[name] = max(out[name], _add(b, beside_critic), key=_total)
    return out


def allocated_peak_gb(tm: TrainMemory, rm: RolloutMemory, sleep_mode_frees: bool) -> float:
    """The torch allocator's peak in the trainer's process on the worst device, GB: what verl logs as
    actor/perf/max_memory_allocated_gb (torch max_memory_allocated() / 1024**3, i.e. GiB; compare after
    converting), which verl never resets (verl 0.9.1 calls reset_peak_memory_stats only in its memory tools): the
    largest of its update_actor and log-prob passes so far. The rollout's weights and KV cache count where they stay
    on the device (torch tensors too)."""
    resident = rollout_parts(tm.sc, rm, 0.0, sleep_mode_frees)["update"]
    worst = 0.0
    for s in range(tm.n_stages):
        # a colocated critic lives in the same worker process (verl fuses the roles: create_colocated_worker_cls)
        passes = with_critic({"update": max(update_parts(tm, s, allocated=True), key=_total),
                              "log_prob": log_prob_part(tm, s, allocated=True)}, tm, s, allocated=True)
        worst = max(worst, *(b.total for b in passes.values()))
    return worst + resident.total


def rollout_parts(sc: Scenario, rm: RolloutMemory, reshard_extra: float,
                  sleep_mode_frees: bool) -> dict[str, MemoryBreakdown]:
    """What the rollout side adds to every device in each phase (the same on every device)."""
    kv = rm.kv_cache_bytes(rm.lay.gpu_memory_utilization)
    # vLLM sleep mode on Ascend does not release device memory (cann-recipes-train): without the explicit
    # offload of no_sleep_mode the rollout weights and KV cache stay during training
    stays = not sc.has("no_sleep_mode") and not sleep_mode_frees
    resident = _gb(weights=rm.weight_bytes, kv_cache=kv) if stays else MemoryBreakdown()
    return {
        "update": resident,
        "log_prob": resident,
        "rollout": _gb(weights=rm.weight_bytes, kv_cache=kv, activations=rm.activation_bytes,
                       overhead=rm.pf["vllm_overhead_gb"] * GB),
        # the KV cache is allocated after the weight sync by the recipes' late init, and by verl where sleep mode
        # frees memory: it wakes the engine's weights, syncs, offloads the trainer's, then wakes the KV cache
        # (verl 0.9.1 workers/engine_workers.py rollout_mode, resume tags "weights" then "kv_cache")
        "transition": _gb(weights=rm.weight_bytes, kv_cache=0 if sc.has("late_kv_cache_init") or sleep_mode_frees
                          else kv, reshard_buffer=reshard_extra),
    }


def phase_memory(tm: TrainMemory, rm: RolloutMemory, reshard_extra: float, sleep_mode_frees: bool,
                 devices_per_node: int, host_capacity_gb: float) -> MemoryReport:
    """The worst device of every phase, host memory per node and the KV cache of the pair."""
    pair = rollout_parts(tm.sc, rm, reshard_extra, sleep_mode_frees)
    phases: dict[str, MemoryBreakdown] = {}
    worst: dict[str, int] = {}
    for s in range(tm.n_stages):
        for name, b in train_parts(tm, s).items():
            if name not in phases or b.total > phases[name].total:
                phases[name], worst[name] = b, s
    phases = {name: _add(b, pair[name]) for name, b in phases.items()}
    util = rm.lay.gpu_memory_utilization
    rollout_on_host = rm.weight_bytes if (tm.sc.has("no_sleep_mode") or sleep_mode_frees) else 0
    critic = tm.value_model  # its offloaded state waits on the host while the rollout runs, like the actor's
    per_device = max(max(tm.host_bytes(s), rollout_on_host + tm.host_bytes_in_training(s))
                     + (critic.host_bytes(s) if critic else 0.0) for s in range(tm.n_stages))
    notes = []
    if rm.kv_tokens(util) == 0:
        notes.append("the KV cache gets no memory: weights and overheads exceed gpu_memory_utilization")
    return MemoryReport(
        phases=phases,
        worst_stage=worst,
        capacity_gb=rm.capacity_gb,
        host_gb_per_node=per_device * min(devices_per_node, tm.devices) / GB,
        host_capacity_gb_per_node=host_capacity_gb,
        kv_bytes_per_token=rm.kv_bytes_per_token,
        kv_cache_bytes=rm.kv_cache_bytes(util),
        kv_tokens=rm.kv_tokens(util),
        notes=notes,
    )
