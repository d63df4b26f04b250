"""Time of the training-side passes: one micro-batch on one pipeline stage, forward or forward+backward,
with its TP/SP, EP and CP communication; the pipeline schedule; gradient sync and the optimizer step.

All efficiencies and latencies come from the profile; FLOPs and bytes from the inventory and layout.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike

from twin.catalog.inventory import Inventory
from twin.cost_models.comm import collective_time, host_copy_time, p2p_time
from twin.cost_models.compute import attention_flops_per_ctx
from twin.cost_models.memory import ADAM_BYTES, BF16, FP32, TrainMemory
from twin.cost_models.static import tensor_table
from twin.layout.ranks import train_group
from twin.profile import Profile
from twin.scenario import Scenario
from twin.topology.routing import Cluster

PassKind = Literal["forward", "backward", "log_prob"]


@dataclass(frozen=True)
class StageFlops:
    """Per-token forward FLOPs of one pipeline stage's share of the model (whole stage, all TP ranks)."""

    dense: float
    expert: float
    attention_per_ctx: float
    moe_layers: int
    layers: int


@dataclass(frozen=True)
class PassTime:
    """One micro-batch on the slowest stage, split into compute and communication seconds."""

    compute_s: ArrayLike
    comm_s: ArrayLike

    @property
    def total(self) -> ArrayLike:
        return self.compute_s + self.comm_s


class TrainCost:
    """Costs of the actor/ref passes for one scenario on one cluster."""

    def __init__(self, inv: Inventory, scenario: Scenario, cluster: Cluster, profile: Profile,
                 memory: TrainMemory) -> None:
        self.inv, self.sc, self.cluster, self.pf, self.mem = inv, scenario, cluster, profile, memory
        self.cfg = inv.config
        self.lay = memory.lay
        self.devices = memory.devices
        self.peak = cluster.kind.device_spec.peak_bf16_tflops.value * 1e12

    @cached_property
    def stage_flops(self) -> list[StageFlops]:
        cfg = self.cfg
        dense, expert = tensor_table(self.inv).stage_flops(self.lay)
        per_layer_attn = attention_flops_per_ctx(cfg) / cfg.num_layers
        out = []
        first = 0
        for s, layers in enumerate(int(n) for n in self.mem.stages.layers):
            moe_layers = sum(1 for i in range(first, first + layers) if cfg.is_moe_layer(i))
            first += layers
            out.append(StageFlops(float(dense[s]), float(expert[s]), per_layer_attn * layers, moe_layers, layers))
        return out

    @property
    def mean_seq(self) -> float:
        wl = self.sc.workload
        return wl.prompt_len.mean + wl.response_len.mean

    @cached_property
    def _groups(self) -> dict[str, list[int]]:
        """One representative rank group per dimension (stage 0)."""
        return {dim: train_group(self.lay, self.devices, dim) for dim in ("tp", "cp", "dp", "ep", "pp")}

    def _comm_per_layer(self, tokens: float, moe: bool, passes: int) -> float:
        """TP/SP, CP and EP communication of one layer for `tokens` tokens of a micro-batch."""
        lay, h = self.lay, self.cfg.hidden_size
        if lay.engine == "fsdp":
            return 0.0
        act = tokens / lay.cp * h * BF16
        t = 0.0
        if lay.tp > 1:
            tp_group = self._groups["tp"]
            if lay.sequence_parallel:
                t += 2 * (collective_time(self.cluster, self.pf, tp_group, "all_gather", act)
                          + collective_time(self.cluster, self.pf, tp_group, "reduce_scatter", act))
            else:
                t += 2 * collective_time(self.cluster, self.pf, tp_group, "all_reduce", act)
            if moe and lay.moe_tp_extend_ep:
                t /= 2  # the MLP half of the TP traffic is replaced by the expert all-to-all
        if lay.cp > 1:
            kv = tokens / lay.cp * 2 * self.cfg.num_kv_heads * self.cfg.head_dim / lay.tp * BF16
            t += collective_time(self.cluster, self.pf, self._groups["cp"], "all_gather", kv * lay.cp)
        if moe and self.cfg.moe is not None and lay.expert_partition > 1:
            k = self.cfg.moe.experts_per_token
            sp = lay.tp if lay.sequence_parallel else 1
            send = tokens / lay.cp / sp * k * h * BF16
            t += 2 * collective_time(self.cluster, self.pf, self._groups["ep"], "all_to_all", send)
        return t * passes

    def microbatch_time(self, stage: int, tokens: ArrayLike, tokens_sq: ArrayLike, kind: PassKind) -> PassTime:
        """A micro-batch of `tokens` tokens whose sequence lengths square-sum to `tokens_sq` through one stage
        (scalars or numpy arrays: compute and communication are linear in them). `kind`: the forward or the
        backward half of a training pass (backward includes the recompute), or a forward-only log-prob pass."""
        lay, pf = self.lay, self.pf
        sf = self.stage_flops[stage]
        tokens = np.asarray(tokens, dtype=float)
        # a micro-batch's work is split over its TP x CP group (FSDP: each rank runs its own sequences)
        shard = lay.tp * lay.cp if lay.engine == "megatron" else 1
        attn = sf.attention_per_ctx * np.asarray(tokens_sq, dtype=float) / 2  # causal: half the context
        fwd = ((sf.dense * tokens) / (self.peak * pf["train_matmul_efficiency"])
               + (sf.expert * tokens) / (self.peak * pf["train_expert_efficiency"])
               + attn / (self.peak * pf["attention_efficiency"])) / shard
        if kind == "log_prob":
            fwd = fwd / pf["log_prob_efficiency_scale"]
        elif kind == "backward":  # twice the forward, plus the recomputed forward
            recompute = {"none": 0.0, "selective": pf["selective_recompute_flops"], "full": 1.0}
            fwd = fwd * (2.0 + recompute[lay.recompute.granularity])
        intercept, slope = self._comm_coefficients(stage, 2 if kind == "backward" else 1)
        return PassTime(compute_s=fwd + pf["microbatch_overhead_ms"] * 1e-3, comm_s=intercept + slope * tokens)

    def _comm_coefficients(self, stage: int, passes: int) -> tuple[float, float]:
        """A micro-batch's communication seconds as intercept + slope x tokens (linear in bytes moved)."""
        key = (stage, passes)
        cache = self.__dict__.setdefault("_comm_cache", {})
        if key not in cache:
            one, two = self._comm_total(stage, 1024.0, passes), self._comm_total(stage, 2048.0, passes)
            slope = (two - one) / 1024.0
            cache[key] = (one - slope * 1024.0, slope)
        return cache[key]

    def _comm_total(self, stage: int, tokens: float, passes: int) -> float:
        """TP/SP, CP, EP traffic of all the stage's layers and the activation send: `passes` 1 for a forward,
        2 for a backward (activation gradients and the recompute's traffic)."""
        lay, pf = self.lay, self.pf
        sf = self.stage_flops[stage]
        comm = (sf.layers - sf.moe_layers) * self._comm_per_layer(tokens, False, passes)
        comm += sf.moe_layers * self._comm_per_layer(tokens, True, passes)
        comm *= 1 - pf["train_comm_overlap"]
        if lay.engine == "megatron" and lay.pp > 1:
            comm += passes * self.p2p_s(tokens)
        return comm

    def p2p_s(self, tokens: float) -> float:
        """Sending one micro-batch's activations to the next pipeline stage."""
        lay = self.lay
        if lay.engine != "megatron" or lay.pp == 1:
            return 0.0
        act = tokens / lay.cp / (lay.tp if lay.sequence_parallel else 1) * self.cfg.hidden_size * BF16
        return p2p_time(self.cluster, self.pf, 0, self.devices // lay.pp, act)

    def microbatch(self, stage: int, sequences: int, backward: bool) -> PassTime:
        """One micro-batch of `sequences` mean-length sequences through one stage: forward and backward of
        a training pass, or a forward-only log-prob pass."""
        mean = self.mean_seq
        tokens, sq = sequences * mean, sequences * mean * mean
        if not backward:
            return self.microbatch_time(stage, tokens, sq, "log_prob")
        f, b = self.microbatch_time(stage, tokens, sq, "forward"), self.microbatch_time(stage, tokens, sq, "backward")
        return PassTime(compute_s=f.compute_s + b.compute_s, comm_s=f.comm_s + b.comm_s)

    def sequences_per_dp_rank(self) -> float:
        return self.sc.workload.responses / self.mem.dp

    def pipeline_time(self, micro: int, backward: bool) -> tuple[float, int]:
        """(seconds, micro-batches) of one pass over the whole step's sequences with the 1F1B schedule."""
        lay = self.lay
        m = max(1, round(self.sequences_per_dp_rank() / micro))
        slowest = max(float(self.microbatch(s, micro, backward).total) for s in range(self.mem.n_stages))
        if lay.engine == "fsdp" or lay.pp == 1:
            return m * slowest, m
        vpp = lay.vpp or 1
        steps = self.sc.workload.optimizer_steps if backward else 1
        per_batch = max(1, m // steps)
        bubble = (lay.pp - 1) / vpp
        return steps * (per_batch + bubble) * slowest, m

    def optimizer_time(self) -> float:
        """Gradient sync (reduce-scatter + all-gather) and the Adam step, per optimizer step, summed."""
        lay, pf, mem = self.lay, self.pf, self.mem
        hbm = self.cluster.kind.device_spec.hbm_bandwidth_gbs.value * 1e9 * pf["hbm_efficiency"]
        worst = 0.0
        for s in range(mem.n_stages):
            dense, expert = float(mem.stages.dense_numel[s]), float(mem.stages.expert_numel[s])
            if lay.engine == "fsdp":
                sync = collective_time(self.cluster, pf, list(range(self.devices)), "reduce_scatter",
                                       (dense + expert) * self.devices * FP32)
                state_numel = dense + expert
            else:
                dp_group = self._groups["dp"]
                sync = (collective_time(self.cluster, pf, dp_group, "reduce_scatter", dense * FP32)
                        + collective_time(self.cluster, pf, dp_group, "all_gather", dense * BF16))
                state_numel = dense / (mem.dp * lay.cp) + expert / mem.edp
            # Adam reads and writes the fp32 state, reads the fp32 gradient and writes the bf16 weight
            step = state_numel * (2 * ADAM_BYTES + FP32 + BF16) / hbm
            if lay.offload.optimizer == "swap":
                step += 2 * host_copy_time(self.cluster, pf, state_numel * ADAM_BYTES) * (1 - pf["swap_overlap"])
            worst = max(worst, sync + step)
        return (worst + pf["optimizer_overhead_ms"] * 1e-3) * self.sc.workload.optimizer_steps

    def update_time(self) -> float:
        t, _ = self.pipeline_time(self.lay.micro_batch, backward=True)
        return t * self.sc.workload.ppo_epochs + self.optimizer_time()

    def log_prob_time(self) -> float:
        t, _ = self.pipeline_time(self.lay.log_prob_micro_batch, backward=False)
        return t
