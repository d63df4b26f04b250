"""Memory of every device in every phase, from the tensor inventory and the two layouts.

Phases: `update` (actor forward/backward and optimizer step), `log_prob` (ref and old-policy forward
passes), `rollout` (vLLM generation) and `transition` (reshard from training to rollout shards).
Static parts (weights, gradients, optimizer state, KV bytes per token, reshard staging) are exact byte
counts; activations follow the layer's tensor shapes; framework overhead comes from the profile.

Precision recipe (Megatron bf16 training): bf16 weights, fp32 gradient buffer (Megatron forces fp32
gradient accumulation for bf16), distributed Adam with an fp32 master copy and two fp32 moments (12 bytes
per parameter) sharded over the data-parallel group (expert-DP for routed experts). FSDP: fp32 sharded
parameters, gradients and moments (16 bytes per parameter over all ranks) plus a bf16 copy of the largest
layer gathered for compute.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

from twin.catalog.inventory import TensorSpec
from twin.cost_models.placement import VLLM_VOCAB_MULTIPLE, Placement
from twin.profile import Profile
from twin.results import MemoryBreakdown
from twin.scenario import Scenario

GB = 1e9
BF16 = 2
FP32 = 4
ADAM_BYTES = 12  # fp32 master + two fp32 moments, per parameter
LOGIT_BYTES = 2 + FP32 + FP32  # bf16 logits, fp32 log-softmax and its gradient, per vocabulary entry


@dataclass
class StageStatic:
    """Parameter bytes of one training device (all devices of a pipeline stage are alike)."""

    weight_bytes: int = 0
    dense_numel: int = 0  # non-expert parameters on the device (sharded over DP x CP by the optimizer)
    expert_numel: int = 0  # routed-expert parameters on the device (sharded over expert-DP)
    layers: int = 0
    has_head: bool = False
    largest_layer_bytes: int = 0  # FSDP: bf16 bytes of the largest layer gathered for compute


@dataclass
class MemoryReport:
    """Per-phase breakdown of the worst device, peaks, and host memory per node."""

    phases: dict[str, MemoryBreakdown]
    peak_gb: dict[str, float]
    worst_stage: dict[str, int]
    hbm_gb: float
    host_gb_per_node: float
    host_capacity_gb_per_node: float
    kv_bytes_per_token: int
    kv_cache_bytes: int
    kv_tokens: int
    notes: list[str] = field(default_factory=list)

    @property
    def peak_gb_max(self) -> float:
        return max(self.peak_gb.values())

    @property
    def peak_phase(self) -> str:
        return max(self.peak_gb, key=self.peak_gb.__getitem__)

    @property
    def fits(self) -> bool:
        return self.peak_gb_max <= self.hbm_gb and self.kv_tokens > 0

    @property
    def host_fits(self) -> bool:
        return self.host_gb_per_node <= self.host_capacity_gb_per_node


class MemoryModel:
    """Memory of one scenario's layout pair."""

    def __init__(self, pl: Placement, scenario: Scenario, profile: Profile, hbm_gb: float,
                 host_gb_per_node: float, devices_per_node: int, reshard_extra_bytes: int,
                 sleep_mode_frees: bool) -> None:
        self.pl = pl
        self.sc = scenario
        self.pf = profile
        self.hbm_gb = hbm_gb
        self.host_capacity = host_gb_per_node
        self.devices_per_node = devices_per_node
        self.reshard_extra = reshard_extra_bytes
        self.sleep_mode_frees = sleep_mode_frees
        self.cfg = pl.inv.config

    # ---- static training state ---------------------------------------------------------------
    @cached_property
    def stages(self) -> list[StageStatic]:
        pl, lay = self.pl, self.pl.train
        n_stages = lay.pp if lay.engine == "megatron" else 1
        out = [StageStatic() for _ in range(n_stages)]
        layer_bytes: dict[int, int] = {}
        for t in pl.tensors:
            s = out[pl.stage(t)]
            b = self._train_shard_bytes(t)
            s.weight_bytes += b
            numel = b // t.dtype_bytes
            if t.shard.ep_dim is not None:
                s.expert_numel += numel
            else:
                s.dense_numel += numel
            s.has_head |= t.group == "head"
            if t.layer is not None:
                layer_bytes[t.layer] = layer_bytes.get(t.layer, 0) + t.numel * BF16
        if self.pl.inv.tied_head and lay.engine == "megatron" and lay.pp > 1:
            emb = next(t for t in pl.tensors if t.group == "embedding")
            b = self._train_shard_bytes(emb)  # the last stage keeps its own copy of the tied output layer
            out[-1].weight_bytes += b
            out[-1].dense_numel += b // emb.dtype_bytes
            out[-1].has_head = True
        for i, count in enumerate(lay.stage_layers(self.cfg.num_layers) if lay.engine == "megatron"
                                  else (self.cfg.num_layers,)):
            out[i].layers = count
        largest = max(layer_bytes.values(), default=0)
        for s in out:
            s.largest_layer_bytes = largest
        return out

    def _train_shard_bytes(self, t: TensorSpec) -> int:
        lay = self.pl.train
        if lay.engine == "fsdp":
            rows = -(-t.shape[0] // self.pl.devices)
            return rows * (t.numel // t.shape[0]) * t.dtype_bytes
        if t.shard.ep_dim is not None:
            return t.shard_bytes(tp=lay.expert_tp, ep=lay.expert_partition)
        return t.shard_bytes(tp=lay.tp, vocab_multiple=self.pl.train_vocab_multiple)

    def grad_and_optimizer_bytes(self, s: StageStatic) -> tuple[float, float]:
        """(gradient bytes, optimizer bytes) of a device of stage `s` when both are on the device."""
        lay = self.pl.train
        if lay.engine == "fsdp":
            numel = s.dense_numel + s.expert_numel
            return numel * FP32, numel * (ADAM_BYTES - FP32)
        dp = lay.dp(self.pl.devices) * lay.cp
        edp = self.pl.devices // lay.pp // (lay.expert_partition * lay.expert_tp)
        grads = (s.dense_numel + s.expert_numel) * FP32
        opt = s.dense_numel * ADAM_BYTES / dp + s.expert_numel * ADAM_BYTES / max(edp, 1)
        return grads, opt

    # ---- activations ---------------------------------------------------------------------------
    def _layer_activation_bytes(self, tokens: float, moe: bool) -> float:
        """Bytes one layer keeps for backward for `tokens` tokens on one device (no recompute)."""
        c, lay = self.cfg, self.pl.train
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
            mlp_bytes = routed * (h + 3 * c.moe.expert_intermediate_size / etp)
            mlp_bytes += local / sp * c.moe.num_experts * FP32 / BF16  # router logits in fp32
            if c.moe.shared_experts:
                mlp_bytes += local * 3 * c.moe.shared_experts * c.moe.expert_intermediate_size / tp
        else:
            mlp_bytes = local * 3 * c.intermediate_size / tp
        return BF16 * (local * (attn + norms_and_inputs) + mlp_bytes)

    def _mean_layer_activation(self, tokens: float) -> tuple[float, float]:
        """(mean, largest) per-layer activation bytes over the model's layers for `tokens` tokens."""
        dense = self._layer_activation_bytes(tokens, moe=False)
        sparse = self._layer_activation_bytes(tokens, moe=True)
        n_moe = sum(1 for i in range(self.cfg.num_layers) if self.cfg.is_moe_layer(i))
        mean = (dense * (self.cfg.num_layers - n_moe) + sparse * n_moe) / self.cfg.num_layers
        return mean, max(dense, sparse if n_moe else dense)

    def _logits_bytes(self, tokens: float) -> float:
        lay = self.pl.train
        tp = lay.tp if lay.engine == "megatron" else 1
        return tokens / lay.cp * self.cfg.vocab_size / tp * LOGIT_BYTES

    def update_activation_bytes(self, stage: int) -> float:
        """Peak activation bytes of a stage during update_actor (1F1B: stage s holds pp - s micro-batches)."""
        lay, wl = self.pl.train, self.sc.workload
        tokens = lay.micro_batch * wl.max_seq_len
        mean, largest = self._mean_layer_activation(tokens)
        st = self.stages[stage]
        h = self.cfg.hidden_size
        sp = lay.tp if (lay.sequence_parallel and lay.engine == "megatron") else 1
        rc = lay.recompute
        if rc.granularity == "full":
            per_unit = rc.layers or 1
            if rc.method == "uniform":
                stored_layers = -(-st.layers // per_unit)  # one checkpoint per unit of layers
                per_mb = stored_layers * tokens / lay.cp / sp * h * BF16
            else:  # block: the first `layers` layers recomputed, the rest stored
                recomputed = min(per_unit, st.layers)
                per_mb = recomputed * tokens / lay.cp / sp * h * BF16 + (st.layers - recomputed) * mean
            working = largest * per_unit  # a recompute unit rematerialised during backward
        elif rc.granularity == "selective":
            per_mb = st.layers * mean * 0.8  # attention core not stored (flash attention keeps no scores)
            working = largest
        else:
            per_mb = st.layers * mean
            working = largest
        in_flight = (lay.pp - stage) if lay.engine == "megatron" else 1
        logits = self._logits_bytes(tokens) if st.has_head else 0.0
        frag = 1 + self.pf["activation_fragmentation"]
        return (per_mb * in_flight + working + logits) * frag

    def log_prob_activation_bytes(self, stage: int) -> float:
        """Forward-only pass: one layer live at a time, plus the logits of the micro-batch."""
        lay, wl = self.pl.train, self.sc.workload
        tokens = lay.log_prob_micro_batch * wl.max_seq_len
        _, largest = self._mean_layer_activation(tokens)
        logits = self._logits_bytes(tokens) * FP32 / LOGIT_BYTES if self.stages[stage].has_head else 0.0
        return (largest + logits) * (1 + self.pf["activation_fragmentation"])

    # ---- rollout ---------------------------------------------------------------------------------
    @cached_property
    def rollout_weight_bytes(self) -> int:
        """Bytes of the rollout shard on the worst device (every rank holds every layer)."""
        pl = self.pl
        out = 0
        for t in pl.tensors:
            if t.shard.ep_dim is not None and pl.rollout.ep > 1:
                out += t.shard_bytes(ep=pl.rollout.ep)
            else:
                out += t.shard_bytes(tp=pl.rollout.tp, vocab_multiple=VLLM_VOCAB_MULTIPLE)
        return out

    @cached_property
    def kv_bytes_per_token(self) -> int:
        """KV-cache bytes per token on one device: MLA's compressed latent (not split by TP), else GQA heads."""
        c, tp = self.cfg, self.pl.rollout.tp
        if c.mla is not None:
            per_layer = (c.mla.kv_lora_rank + c.mla.qk_rope_head_dim) * BF16
        else:
            heads = c.num_kv_heads // tp if c.num_kv_heads >= tp else 1
            per_layer = 2 * heads * c.head_dim * BF16
        return per_layer * c.num_layers

    @cached_property
    def rollout_activation_bytes(self) -> float:
        """vLLM's profiling peak: one layer for max_num_batched_tokens tokens plus sampled logits."""
        ro = self.pl.rollout
        c = self.cfg
        tokens = ro.max_num_batched_tokens
        inter = max(c.intermediate_size, (c.moe.expert_intermediate_size * c.moe.experts_per_token) if c.moe else 0)
        per_token = BF16 * (4 * c.hidden_size + 3 * inter / ro.tp)
        logits = ro.max_num_seqs * c.vocab_size / ro.tp * FP32
        return tokens * per_token + logits

    @cached_property
    def kv_cache_bytes(self) -> int:
        """KV cache vLLM allocates: its memory budget minus weights, activation peak and its overheads."""
        ro = self.pl.rollout
        budget = ro.gpu_memory_utilization * self.hbm_gb * GB
        graph = self.pf["graph_memory_gb"] * GB if ro.graph_mode else 0.0
        used = self.rollout_weight_bytes + self.rollout_activation_bytes + graph + self.pf["vllm_overhead_gb"] * GB
        return max(0, int(budget - used))

    @property
    def kv_tokens(self) -> int:
        return self.kv_cache_bytes // self.kv_bytes_per_token

    # ---- phases ----------------------------------------------------------------------------------
    def phase_breakdowns(self, stage: int) -> dict[str, MemoryBreakdown]:
        lay, sc = self.pl.train, self.sc
        off = lay.offload
        st = self.stages[stage]
        grads, opt = self.grad_and_optimizer_bytes(st)
        weights = st.weight_bytes
        overhead = self.pf["framework_overhead_gb"] * GB
        ascend_sleep = not sc.has("no_sleep_mode") and not self.sleep_mode_frees
        rollout_resident = (self.rollout_weight_bytes + self.kv_cache_bytes) if ascend_sleep else 0
        ref_resident = 0 if off.param or not sc.workload.use_kl_loss else weights
        grads_idle = 0 if off.grad else grads
        opt_idle = 0 if off.optimizer != "none" else opt
        swap_bucket = self.pf["swap_optimizer_bucket_gb"] * GB
        opt_step = swap_bucket if off.optimizer == "swap" else opt
        act_update = self.update_activation_bytes(stage)

        def gb(**parts: float) -> MemoryBreakdown:
            return MemoryBreakdown(**{k: v / GB for k, v in parts.items()})

        fwd_bwd = gb(weights=weights + ref_resident + rollout_resident, grads=grads,
                     optimizer=opt_idle if off.optimizer == "none" else 0, activations=act_update,
                     overhead=overhead)
        step = gb(weights=weights + ref_resident + rollout_resident, grads=grads, optimizer=opt_step,
                  overhead=overhead)
        update = max((fwd_bwd, step), key=lambda b: b.total)
        # ref pass: the actor's weights stay unless offloaded; the ref's own weights are on device
        actor_idle = 0 if off.param else weights
        log_prob = gb(weights=weights + actor_idle + rollout_resident, grads=grads_idle, optimizer=opt_idle,
                      activations=self.log_prob_activation_bytes(stage), overhead=overhead)
        graph = self.pf["graph_memory_gb"] * GB if self.pl.rollout.graph_mode else 0.0
        rollout = gb(weights=self.rollout_weight_bytes + actor_idle + ref_resident, grads=grads_idle,
                     optimizer=opt_idle, kv_cache=self.kv_cache_bytes,
                     activations=self.rollout_activation_bytes + graph,
                     overhead=overhead + self.pf["vllm_overhead_gb"] * GB)
        kv_during_reshard = 0 if sc.has("late_kv_cache_init") else self.kv_cache_bytes
        transition = gb(weights=weights + self.rollout_weight_bytes + ref_resident, grads=grads_idle,
                        optimizer=opt_idle, kv_cache=kv_during_reshard, reshard_buffer=self.reshard_extra,
                        overhead=overhead)
        return {"update": update, "log_prob": log_prob, "rollout": rollout, "transition": transition}

    def host_bytes_per_node(self) -> float:
        """Host memory per node for what is offloaded, in the phase where most of it is on the host."""
        lay, off = self.pl.train, self.pl.train.offload
        per_device_peak = 0.0
        for st in self.stages:
            grads, opt = self.grad_and_optimizer_bytes(st)
            actor = st.weight_bytes if off.param else 0
            ref = st.weight_bytes if off.param and self.sc.workload.use_kl_loss else 0
            g = grads if off.grad else 0
            o = opt if off.optimizer != "none" else 0
            rollout_w = self.rollout_weight_bytes if (self.sc.has("no_sleep_mode") or self.sleep_mode_frees) else 0
            during_rollout = actor + ref + g + o
            during_update = ref + o * (lay.offload.optimizer == "swap") + rollout_w
            per_device_peak = max(per_device_peak, during_rollout, during_update)
        return per_device_peak * min(self.devices_per_node, self.pl.devices)

    def report(self) -> MemoryReport:
        phases: dict[str, MemoryBreakdown] = {}
        worst: dict[str, int] = {}
        for s in range(len(self.stages)):
            for name, b in self.phase_breakdowns(s).items():
                if name not in phases or b.total > phases[name].total:
                    phases[name], worst[name] = b, s
        notes = []
        if self.kv_tokens == 0:
            notes.append("the KV cache gets no memory: weights and overheads exceed gpu_memory_utilization")
        return MemoryReport(
            phases=phases,
            peak_gb={k: b.total for k, b in phases.items()},
            worst_stage=worst,
            hbm_gb=self.hbm_gb,
            host_gb_per_node=self.host_bytes_per_node() / GB,
            host_capacity_gb_per_node=self.host_capacity,
            kv_bytes_per_token=self.kv_bytes_per_token,
            kv_cache_bytes=self.kv_cache_bytes,
            kv_tokens=self.kv_tokens,
            notes=notes,
        )
