"""Time of vLLM generation: one decode step of one DP replica, prefill chunks, and the analytical rollout.

A decode step reads the device's weights (every local expert that receives a token) and the KV cache of
its running sequences once, computes at the roofline's pace, runs the TP collectives and the EP
dispatch/combine of every MoE layer on the topology, and pays the host-side costs the recipes measured:
pre/post-processing, vLLM scheduling, and the DP end-of-sequence synchronisation (two per step, on gloo
or HCCL) when several DP ranks share one engine instance.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

import numpy as np
from numpy.typing import ArrayLike

from twin.catalog.inventory import Inventory
from twin.cost_models.comm import collective_time
from twin.cost_models.compute import attention_flops_per_ctx
from twin.cost_models.memory import BF16, RolloutMemory
from twin.cost_models.static import tensor_table
from twin.layout.ranks import rollout_group
from twin.profile import Profile
from twin.scenario import Scenario
from twin.topology.routing import Cluster
from twin.workload import length_quantile

EOS_SYNCS_PER_STEP = 2  # cann-recipes-train: two DP end-of-sequence syncs per decode step (C2)


@dataclass(frozen=True)
class DecodeStep:
    """Seconds of one decode step of one DP replica, by component."""

    forward_s: ArrayLike  # device time: roofline of weights + KV reads and compute
    comm_s: ArrayLike  # TP collectives and EP dispatch/combine
    launch_s: float  # eager kernel launches (0 in graph mode)
    host_s: float  # pre/post-processing
    schedule_s: float  # vLLM scheduler
    sync_s: float  # DP end-of-sequence synchronisation

    @property
    def total(self) -> ArrayLike:
        return self.forward_s + self.comm_s + self.launch_s + self.host_s + self.schedule_s + self.sync_s


class RolloutCost:
    """Decode and prefill costs of one scenario's rollout layout."""

    def __init__(self, inv: Inventory, scenario: Scenario, cluster: Cluster, profile: Profile,
                 memory: RolloutMemory) -> None:
        self.inv, self.sc, self.cluster, self.pf, self.mem = inv, scenario, cluster, profile, memory
        self.cfg = inv.config
        self.ro = memory.lay
        spec = cluster.kind.device_spec
        self.peak = spec.peak_bf16_tflops.value * 1e12
        self.hbm = spec.hbm_bandwidth_gbs.value * 1e9

    @cached_property
    def _weights(self) -> tuple[int, int, float, float]:
        """(non-expert, routed-expert) bytes a decode step may read on one device, and the matmul FLOPs
        per token (non-expert share of one TP rank; routed experts of the whole model)."""
        table = tensor_table(self.inv)
        dense_b, expert_b = table.rollout_read_bytes(self.ro)
        dense_f, expert_f = table.forward_flops()
        return dense_b, expert_b, float(dense_f.sum()) / self.ro.tp, float(expert_f.sum())

    @cached_property
    def _tp_group(self) -> list[int]:
        return rollout_group(self.ro, "tp")

    @cached_property
    def _ep_group(self) -> list[int]:
        return rollout_group(self.ro, "ep")

    @property
    def dp_per_instance(self) -> int:
        return self.ro.instance_size // self.ro.tp

    def decode_step(self, batch: ArrayLike, context: ArrayLike) -> DecodeStep:
        """One decode step of a DP replica running `batch` sequences with mean context `context` (scalars
        or numpy arrays)."""
        ro, cfg, pf = self.ro, self.cfg, self.pf
        batch = np.asarray(batch, dtype=float)
        context = np.asarray(context, dtype=float)
        dense_b, expert_b, dense_f, expert_f = self._weights
        local_experts = 1.0
        if cfg.moe is not None:
            dp_sharing = self.dp_per_instance if ro.ep > 1 else 1
            per_expert = batch * dp_sharing * cfg.moe.experts_per_token / cfg.moe.num_experts
            local_experts = 1 - np.exp(-per_expert)  # share of local experts that receive a token
        kv_read = batch * context * self.mem.kv_bytes_per_token
        mem_s = (dense_b + expert_b * local_experts + kv_read) / (self.hbm * pf["hbm_efficiency"])
        attn = attention_flops_per_ctx(cfg) / ro.tp * batch * context
        flops = dense_f * batch + expert_f * batch / ro.tp + attn
        compute_s = flops / (self.peak * pf["decode_compute_efficiency"])
        intercept, slope = self._comm_coefficients
        comm = intercept + slope * np.maximum(batch, 1.0)  # idle ranks still join the collectives
        launch = 0.0 if ro.graph_mode else pf["eager_launch_us_per_layer"] * 1e-6 * cfg.num_layers
        host = pf["decode_host_ms_graph" if ro.graph_mode else "decode_host_ms_eager"] * 1e-3
        schedule = pf["vllm_schedule_ms"] * 1e-3
        sync = 0.0
        if self.dp_per_instance > 1:
            sync = EOS_SYNCS_PER_STEP * pf[f"eos_sync_ms_{self.eos_backend}"] * 1e-3
        return DecodeStep(np.maximum(mem_s, compute_s), comm, launch, host, schedule, sync)

    @property
    def eos_backend(self) -> str:
        return "hccl" if self.sc.has("hccl_eos_sync") else "gloo"

    @cached_property
    def _comm_coefficients(self) -> tuple[float, float]:
        """Seconds of a step's TP collectives and EP dispatch/combine as intercept + slope x batch (both are
        linear in the bytes moved)."""
        one, two = self._decode_comm(1.0), self._decode_comm(2.0)
        return one - (two - one), two - one

    def _decode_comm(self, batch: float) -> float:
        ro, cfg, pf = self.ro, self.cfg, self.pf
        h = cfg.hidden_size
        t = 0.0
        moe_layers = sum(1 for i in range(cfg.num_layers) if cfg.is_moe_layer(i))
        dense_layers = cfg.num_layers - moe_layers
        if ro.tp > 1:
            ar = collective_time(self.cluster, pf, self._tp_group, "all_reduce", batch * h * BF16)
            per_moe = 1 if ro.ep > 1 else 2  # with EP the MLP's all-reduce becomes dispatch/combine
            t += ar * (2 * dense_layers + per_moe * moe_layers)
        if ro.ep > 1 and cfg.moe is not None:
            send = batch / ro.tp * cfg.moe.experts_per_token * h * BF16  # zero-redundancy TP -> EP
            a2a = collective_time(self.cluster, pf, self._ep_group, "all_to_all", send)
            t += 2 * a2a * moe_layers
        return t

    def prefill_compute_s(self, tokens: ArrayLike, context: ArrayLike) -> ArrayLike:
        """Compute of `tokens` prompt tokens attending over `context` tokens on average."""
        _, _, dense_f, expert_f = self._weights
        per_token = dense_f + expert_f / self.ro.tp + attention_flops_per_ctx(self.cfg) / self.ro.tp * context
        return tokens * per_token / (self.peak * self.pf["prefill_compute_efficiency"])

    def prefill_time(self, tokens: float) -> float:
        """Prefill of `tokens` prompt tokens on one DP replica, in chunks of the token budget."""
        ro, pf = self.ro, self.pf
        chunks = max(1.0, tokens / ro.max_num_batched_tokens)
        per_chunk = pf["vllm_schedule_ms"] + pf["decode_host_ms_graph" if ro.graph_mode else "decode_host_ms_eager"]
        return float(self.prefill_compute_s(tokens, self.sc.workload.prompt_len.mean / 2)) + chunks * per_chunk * 1e-3

    def concurrency(self, per_replica: float, kv_tokens: int) -> float:
        """Sequences a DP replica runs at once: max_num_seqs, bounded by its KV cache and by its work."""
        wl = self.sc.workload
        seq_tokens = wl.prompt_len.mean + wl.response_len.mean
        by_kv = kv_tokens / seq_tokens
        return max(1.0, min(self.ro.max_num_seqs, per_replica, by_kv))

    @property
    def sequences_per_replica(self) -> float:
        return self.sc.workload.responses / self.ro.dp

    def analytical_seconds(self, kv_tokens: int) -> float:
        """Closed-form rollout: waves of continuous batching on one DP replica, the tail, and prefill."""
        wl = self.sc.workload
        per_replica = self.sequences_per_replica
        conc = self.concurrency(per_replica, kv_tokens)
        mean = wl.response_len.mean
        steps = -(-per_replica // conc) * mean + max(0.0, response_tail(self.sc, per_replica) - mean)
        decode = steps * float(self.decode_step(per_replica * mean / steps, wl.prompt_len.mean + mean / 2).total)
        prefill = self.prefill_time(per_replica * wl.prompt_len.mean)
        return self.polled(decode + prefill) + self.pf["rollout_fixed_s"]

    def polled(self, seconds: float) -> float:
        """When the trainer polls for finished generation every `rollout_poll_s`, it sees the end at the next
        poll."""
        poll = self.pf["rollout_poll_s"]
        return math.ceil(seconds / poll - 1e-9) * poll if poll > 0 else seconds


def response_tail(scenario: Scenario, draws: float) -> float:
    """Expected longest response among `draws` responses (the phase ends when it ends)."""
    dist = scenario.workload.response_len
    if dist.dist == "fixed" or draws <= 1:
        return dist.mean
    return min(dist.max, length_quantile(dist, 1 - 1 / (draws + 1)))
