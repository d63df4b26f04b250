"""Time of vLLM generation: one decode step of one DP replica, prefill chunks, and the analytical rollout.

A decode step runs its GEMMs, then its attention: the GEMMs read the device's weights (every local expert that
receives a token) and compute, as long as the slower of the two or their sum where the device does not overlap
them (its `gemm_load_serial`); the attention reads the KV cache of its running sequences, as long as that read or
its compute, the slower. It runs the TP collectives and the EP
dispatch/combine of every MoE layer on the topology, and pays the host-side costs the recipes measured:
pre/post-processing, vLLM scheduling, and the DP end-of-sequence synchronisation (two per step, on gloo
or HCCL) when several DP ranks share one engine instance. The host's pre/post-processing and the scheduler
each have a part per step and a part per running sequence (input preparation, the state updates and the
output processing loop over the running requests; the scheduler's pass over them), so a step of a long
tail's few sequences pays less host time than a full one (benchmarks/vllm_step_host_cpu.py measures both
parts of both in vLLM).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property

import numpy as np
from numpy.typing import ArrayLike

from twin.catalog.config import ModelConfig
from twin.catalog.inventory import Inventory
from twin.cost_models.comm import collective_time
from twin.cost_models.efficiency import efficiency, memory_seconds, peak_flops
from twin.cost_models.graph_shapes import capture_sizes, graph_rows
from twin.cost_models.host_sharing import shared_host_rollout
from twin.cost_models.imbalance import expert_imbalance
from twin.cost_models.memory import BF16, RolloutMemory
from twin.cost_models.operators import attention_flops_per_ctx_layer, decode_attention_flops_per_ctx_layer
from twin.cost_models.scheduling import framework_seconds
from twin.cost_models.static import tensor_table
from twin.layout.ranks import rollout_group
from twin.profile import Profile
from twin.scenario import Scenario
from twin.topology.routing import Cluster
from twin.workload import expected_longest, length_std

EOS_SYNCS_PER_STEP = 2  # cann-recipes-train: two DP end-of-sequence syncs per decode step (C2)


@dataclass(frozen=True)
class AgentLoopRound:
    """One round with verl's agent-loop path handing the requests to the engine (RolloutCost.agent_loop_round)."""

    busy_s: float  # until the last request leaves the engine, before the trainer's poll
    components_s: dict[str, float]  # agent_loop, host_sharing, engine_tail
    steps: int  # engine steps
    note: str


@dataclass(frozen=True)
class DecodeStep:
    """Seconds of one decode step of one DP replica, by component."""

    forward_s: ArrayLike  # device time: the GEMMs (weight reads, compute), then the attention (KV reads, compute)
    comm_s: ArrayLike  # TP collectives and EP dispatch/combine
    launch_s: float  # eager operator launches on the host (0 in graph mode)
    host_s: ArrayLike  # pre/post-processing: a part per step and a part per running sequence
    schedule_s: ArrayLike  # vLLM scheduler: a part per step and a part per running sequence
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
        self.kind = cluster.kind
        self.peak = peak_flops(cluster.kind)

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

    def _expert_load(self, batch: ArrayLike) -> tuple[ArrayLike, ArrayLike]:
        """(share of a device's local experts that receive a token, busiest-rank load over the mean) for a
        decode step of `batch` sequences per DP replica."""
        moe, ro = self.cfg.moe, self.ro
        if moe is None:
            return 1.0, 1.0
        dp_sharing = self.dp_per_instance if ro.ep > 1 else 1
        per_expert = batch * dp_sharing * moe.experts_per_token / moe.num_experts
        touched = 1 - np.exp(-per_expert)
        ranks = ro.ep if ro.ep > 1 else 1
        tokens = batch * dp_sharing
        imbalance = expert_imbalance(ranks, moe.num_experts, moe.experts_per_token, tokens,
                                     self.pf["expert_load_cv"], self.sc.workload.expert_routing)
        return touched, imbalance

    def decode_step(self, batch: ArrayLike, context: ArrayLike, engine_batch: ArrayLike | None = None) -> DecodeStep:
        """One decode step of a DP replica running `batch` sequences with mean context `context` (scalars
        or numpy arrays), beside DP ranks of its engine running at most `engine_batch` (default: `batch`). In
        graph mode the step runs the smallest captured graph that holds the engine's largest batch
        (twin.cost_models.graph_shapes): its padded slots go through the GEMMs, the routing and the expert
        dispatch, and hold no KV cache."""
        ro, cfg, pf = self.ro, self.cfg, self.pf
        batch = np.asarray(batch, dtype=float)
        context = np.asarray(context, dtype=float)
        # the tokens the device runs, its padded slots routed and dispatched like its sequences (an eager step runs
        # its own)
        busiest = batch if engine_batch is None or not ro.graph_mode else engine_batch
        rows = graph_rows(self.graph_sizes, busiest)
        dense_b, expert_b, dense_f, expert_f = self._weights
        touched, imbalance = self._expert_load(rows)
        kv_read = batch * context * self.mem.kv_bytes_per_token
        weights = dense_b + expert_b * np.minimum(1.0, touched * imbalance)
        weights_s = memory_seconds(self.kind, pf, weights, self._weight_kernels)
        kv_s = memory_seconds(self.kind, pf, kv_read, self.cfg.num_layers)
        attn = decode_attention_flops_per_ctx_layer(cfg) * cfg.num_layers / ro.tp * batch * context
        gemm = dense_f * rows + expert_f * rows / ro.tp * imbalance
        gemm_eff = efficiency(self.kind, pf, "gemm", np.maximum(2.0 * rows * self._mean_gemm_numel, 1.0))
        attn_eff = efficiency(self.kind, pf, "attention", np.maximum(context, 1.0))
        gemm_s = gemm / (self.peak * gemm_eff)
        # the GEMMs and the attention run one after the other; a GEMM's compute runs under its weight read but for
        # the device's serial share (`gemm_load_serial`), the attention's under its KV read
        serial = self.kind.device_spec.gemm_serial * np.minimum(weights_s, gemm_s)
        device_s = np.maximum(weights_s, gemm_s) + serial + np.maximum(kv_s, attn / (self.peak * attn_eff))
        intercept, slope = self._comm_coefficients
        # idle ranks still join the collectives
        comm = intercept + slope * np.maximum(rows, 1.0) * imbalance + self.engine_all_reduce_extra_s
        launch = 0.0 if ro.graph_mode else self.eager_dispatch_s
        host = self.host_per_step_s + batch * pf["vllm_host_us_per_seq"] * 1e-6
        schedule = pf["vllm_schedule_ms"] * 1e-3 + batch * pf["vllm_schedule_us_per_seq"] * 1e-6
        sync = 0.0
        if self.dp_per_instance > 1:
            sync = EOS_SYNCS_PER_STEP * pf[f"eos_sync_ms_{self.eos_backend}"] * 1e-3
        return DecodeStep(device_s, comm, launch, host, schedule, sync)

    @cached_property
    def graph_sizes(self) -> np.ndarray:
        """The batch sizes this engine captured decode graphs for (none in eager mode)."""
        return capture_sizes(self.ro, self.kind.rollout_engine)

    @cached_property
    def eager_dispatch_s(self) -> float:
        """Host seconds an eager step takes to dispatch its kernels (`eager_op_launch_us` each, and each layer's
        `eager_layer_host_us` beside them)."""
        return (self.ops_per_step * self.pf["eager_op_launch_us"]
                + self.cfg.num_layers * self.pf["eager_layer_host_us"]) * 1e-6

    @cached_property
    def eager_fallback_s(self) -> float:
        """What a step costs more in graph mode when it runs the eager model: vLLM-Ascend replays its captured
        graph only on steps without prefill, and reduces the prefill flag over the engine's DP ranks first, so a
        step in which any of them prefills runs eagerly on all of them (vllm_ascend/worker/model_runner_v1.py:
        `_get_forward_metadata_across_dp`, then `torchair_graph_enabled and not with_prefill`): the kernels'
        dispatch and eager mode's pre/post-processing beyond graph mode's. 0 in eager mode, where every step pays
        them, and on vLLM's CUDA kinds, whose piecewise graphs run mixed prefill and decode steps (vLLM's default
        cudagraph_mode FULL_AND_PIECEWISE): their eager remainder, attention, is not counted. vLLM-Ascend's
        piecewise ACL graphs would do the same; the full eager step charged is TorchAir's and FULL_DECODE_ONLY's,
        the graphs of the published A3 runs."""
        if not self.ro.graph_mode or self.kind.rollout_engine != "vllm-ascend":
            return 0.0
        pf = self.pf
        return self.eager_dispatch_s + (pf["decode_host_ms_eager"] - pf["decode_host_ms_graph"]) * 1e-3

    @property
    def host_per_step_s(self) -> float:
        """Host pre/post-processing of a step whatever its batch (graph or eager mode)."""
        return self.pf["decode_host_ms_graph" if self.ro.graph_mode else "decode_host_ms_eager"] * 1e-3

    @cached_property
    def tp_all_reduces_per_step(self) -> int:
        """TP all-reduces of one engine step: two a dense layer, two a MoE layer (one with EP, whose MLP's becomes
        dispatch and combine); none at TP1."""
        if self.ro.tp == 1:
            return 0
        return 2 * (self.cfg.num_layers - self._moe_layers) + (1 if self.ro.ep > 1 else 2) * self._moe_layers

    @cached_property
    def _moe_layers(self) -> int:
        return sum(1 for i in range(self.cfg.num_layers) if self.cfg.is_moe_layer(i))

    @property
    def engine_all_reduce_extra_s(self) -> float:
        """What one step's TP all-reduces cost as the engine runs them beyond the collective curves' price
        (`vllm_tp_collective_ms` each: vLLM's all-reduce between its CPU worker processes)."""
        return self.tp_all_reduces_per_step * self.pf["vllm_tp_collective_ms"] * 1e-3

    @cached_property
    def _weight_kernels(self) -> int:
        """Kernels a decode step's weight reads split into: one per weight matrix."""
        table = tensor_table(self.inv)
        return int((table.matrix & ~table.embedding).sum())

    @cached_property
    def _mean_gemm_numel(self) -> float:
        """Mean elements of one non-expert weight matrix of a rollout rank (the GEMM size of a decode step)."""
        table = tensor_table(self.inv)
        used = table.matrix & ~table.embedding & ~table.expert
        return float(self._weights[0]) / BF16 / max(1, int(used.sum()))

    @cached_property
    def ops_per_step(self) -> int:
        """Kernels an eager decode step launches from the host: `eager_layer_kernels` of every layer (each costs
        `eager_op_launch_us` of host time, and each layer `eager_layer_host_us` beside its kernels)."""
        cfg, ro = self.cfg, self.ro
        return sum(eager_layer_kernels(cfg, cfg.is_moe_layer(i), ro.tp, ro.ep) for i in range(cfg.num_layers))

    @property
    def eos_backend(self) -> str:
        return "hccl" if self.sc.has("hccl_eos_sync") else "gloo"

    @cached_property
    def _comm_coefficients(self) -> tuple[float, float]:
        """Seconds of a step's TP collectives and EP dispatch/combine as intercept + slope x batch: the
        secant between 128 and 256 sequences per instance, the decode batches these runs hold and where the
        EP curves were measured (128 tokens per rank); the curves make the time only piecewise linear."""
        lo, hi = self._decode_comm(128.0), self._decode_comm(256.0)
        slope = (hi - lo) / 128.0
        return lo - slope * 128.0, slope

    def _decode_comm(self, batch: float) -> float:
        ro, cfg, pf = self.ro, self.cfg, self.pf
        h = cfg.hidden_size
        t = 0.0
        if ro.tp > 1:
            ar = collective_time(self.cluster, pf, self._tp_group, "all_reduce", batch * h * BF16)
            t += ar * self.tp_all_reduces_per_step
        if ro.ep > 1 and cfg.moe is not None:
            send = batch / ro.tp * cfg.moe.experts_per_token * h * BF16  # zero-redundancy TP -> EP
            a2a = (collective_time(self.cluster, pf, self._ep_group, "ep_dispatch", send)
                   + collective_time(self.cluster, pf, self._ep_group, "ep_combine", send))
            t += a2a * self._moe_layers
        return t

    def prefill_compute_s(self, tokens: ArrayLike, context: ArrayLike) -> ArrayLike:
        """Compute of `tokens` prompt tokens attending over `context` tokens on average."""
        _, _, dense_f, expert_f = self._weights
        cfg, pf = self.cfg, self.pf
        tokens = np.asarray(tokens, dtype=float)
        chunk = float(min(self.ro.max_num_batched_tokens, max(1.0, float(np.max(tokens)))))
        gemm_eff = efficiency(self.kind, pf, "gemm", 2.0 * chunk * self._mean_gemm_numel)
        attn = attention_flops_per_ctx_layer(cfg) * cfg.num_layers / self.ro.tp * context
        attn_eff = efficiency(self.kind, pf, "attention", np.maximum(np.asarray(context, dtype=float) * 2, 1.0))
        return tokens * ((dense_f + expert_f / self.ro.tp) / (self.peak * gemm_eff) + attn / (self.peak * attn_eff))

    def prefill_time(self, tokens: float) -> float:
        """Prefill of `tokens` prompt tokens on one DP replica, in chunks of the token budget."""
        ro, pf = self.ro, self.pf
        chunks = max(1.0, tokens / ro.max_num_batched_tokens)
        per_chunk = (pf["vllm_schedule_ms"] * 1e-3 + self.host_per_step_s + self.engine_all_reduce_extra_s
                     + self.eager_fallback_s)
        return float(self.prefill_compute_s(tokens, self.sc.workload.prompt_len.mean / 2)) + chunks * per_chunk

    def concurrency(self, per_replica: float, kv_tokens: int) -> float:
        """Sequences a DP replica runs at once: max_num_seqs, bounded by its KV cache and by its work. The cache
        holds what each running sequence has so far (vLLM allocates as a sequence grows): over a response's life
        half its length on average, and a sequence of length L runs for L steps, so the running sequences hold a
        response half of E[L^2] / E[L] = mean + variance / mean, beside their prompts, and half a block each
        more on average (whole blocks)."""
        wl = self.sc.workload
        response = wl.response_len.mean + length_std(wl.response_len) ** 2 / wl.response_len.mean
        seq_tokens = wl.prompt_len.mean + response / 2 + (self.kv_block - 1) / 2
        by_kv = kv_tokens / seq_tokens
        return max(1.0, min(self.ro.max_num_seqs, per_replica, by_kv))

    @property
    def kv_block(self) -> int:
        """Tokens of one block of the engine's KV cache on this device kind."""
        return self.kind.device_spec.kv_block

    @property
    def sequences_per_replica(self) -> float:
        """Responses one DP replica generates in one generation round."""
        wl = self.sc.workload
        return wl.generation_prompts * wl.n / self.ro.dp

    @property
    def responses_per_round(self) -> int:
        wl = self.sc.workload
        return wl.generation_prompts * wl.n

    @property
    def request_host_s(self) -> float:
        """vLLM's host time outside the engine's steps for the requests one engine instance serves in a round (its
        front end's input and output processing, the engine core taking each request in and out)."""
        return self.responses_per_round / self.ro.instances * self.pf["vllm_request_host_ms"] * 1e-3

    def analytical_seconds(self, kv_tokens: int) -> float:
        """Closed-form rollout: per generation round, waves of continuous batching on one DP replica, then
        the longest response of the whole round decoded at a small batch (the replicas finish unevenly:
        the round ends with the slowest), and prefill, or the agent-loop path's round where the profile carries
        one (agent_loop_round); DAPO's rounds one after another."""
        wl = self.sc.workload
        per_replica = self.sequences_per_replica
        conc = self.concurrency(per_replica, kv_tokens)
        mean = wl.response_len.mean
        tail = max(0.0, response_tail(self.sc, self.responses_per_round) - mean)
        waves = -(-per_replica // conc)
        full = float(self.decode_step(per_replica * mean / (waves * mean), wl.prompt_len.mean + mean / 2).total)
        lone = float(self.decode_step(1.0, wl.prompt_len.mean + mean + tail / 2).total)
        decode = waves * mean * full + tail * lone
        prefill = self.prefill_time(per_replica * wl.prompt_len.mean)
        busy = decode + prefill + self.request_host_s
        with_agent = self.agent_loop_round(busy, 0)
        busy = with_agent.busy_s if with_agent else busy
        return (self.polled(busy) + self.pf["rollout_fixed_s"]) * wl.gen_rounds

    def agent_loop_round(self, engine_busy_s: float, engine_steps: int) -> AgentLoopRound | None:
        """One round with verl's agent-loop path handing every request to the engine, where the profile carries
        the path's time (the overhead job's): the engine steps beside the path as the requests arrive, sharing the
        host's cores where it computes on them (twin.cost_models.host_sharing) until the path has handed its last
        request over, and the round ends when that request has left the engine and the path has done what it does
        after its hand-overs, or when the engine would have ended with every request at once (`engine_busy_s`, in
        `engine_steps`), if later. None where the profile carries no path."""
        arrival = self._arrival_round
        if arrival is None:
            return None
        busy = max(engine_busy_s, arrival.busy_s)
        tail = arrival.components_s["engine_tail"] + busy - arrival.busy_s
        return replace(arrival, busy_s=busy, components_s={**arrival.components_s, "engine_tail": tail},
                       steps=max(engine_steps, arrival.steps))

    @cached_property
    def _arrival_round(self) -> AgentLoopRound | None:
        """The agent-loop round as the requests' arrivals alone shape it (whatever the KV cache: the planner asks at
        every gpu_memory_utilization step), once per layout."""
        pf, wl = self.pf, self.sc.workload
        agent = framework_seconds(pf, "rollout", self.responses_per_round)
        if agent == 0.0:
            return None
        prompt, mean = wl.prompt_len.mean, wl.response_len.mean
        prefill = float(self.prefill_compute_s(prompt, prompt / 2))

        def step(batch: float, context: float) -> float:
            return float(self.decode_step(batch, context).total)

        def residence(batch: float) -> float:
            return prefill + (mean + 1) * step(batch, prompt + mean / 2)

        # the engine steps beside the path while the path hands the requests over; what the path does after its last
        # hand-over (the responses' rewards and TransferQueue writes, which verl's event loop runs once the requests
        # are out) overlaps the last request's stay in the engine on cores the engine mostly leaves free
        handing = agent * pf["agent_loop_arrival_share"]
        shared = shared_host_rollout(handing, self.responses_per_round, pf["agent_loop_busy_cores"], pf["host_cores"],
                                     self.ro.devices, self.request_host_s, residence)
        after = agent - handing
        longest = response_tail(self.sc, self.responses_per_round)
        last = max(after, prefill + (longest + 1) * step(1.0, prompt + longest / 2))
        stepping = shared.duty * shared.seconds / (step(max(1.0, shared.in_flight), prompt + mean / 2)
                                                   * shared.slowdown)
        note = (f"rollout on the host's {pf['host_cores']:g} cores beside the agent-loop path: the engine busy "
                f"{shared.duty * 100:.0f} % of the {shared.seconds:.2f} s the path takes to hand its requests over, "
                f"with {shared.in_flight:.1f} requests in flight, the path {shared.slowdown:.2f}x its time alone; "
                f"{after:.2f} s of the path after its last hand-over")
        return AgentLoopRound(shared.seconds + last, {"agent_loop": agent, "host_sharing": shared.seconds - handing,
                                                      "engine_tail": last - after}, round(stepping + longest + 1), note)

    @property
    def poll_s(self) -> float:
        """The trainer's poll interval for finished generation: the profile's (the software it was fitted
        on), unless the scenario's software says whether it polls."""
        polls = self.sc.software.rollout_poll
        if polls is None:
            return self.pf["rollout_poll_s"]
        return self.pf["verl_rollout_poll_s"] if polls else 0.0

    def polled(self, seconds: float) -> float:
        """The mean rollout a polling trainer sees: it sees generation's end at the next poll, and where the end
        falls between two polls moves from step to step by more than an interval (response lengths and the host's
        pace vary: one CPU loop's rollouts, polled every 2 s, ended at 12, 12, 14, 14 and 12 s, 2026-12-05; a
        published run's vary by tens of seconds), so the wait averages half an interval. Rounding the mean busy time
        up to a poll instead made the prediction a step function of it, whose jumps of a whole interval (a sixth of
        the CPU case's rollout) decided that case's error from one run to the next."""
        return seconds + self.poll_s / 2


# Kernels of one layer of an eager decode step, counted on vLLM / vLLM-Ascend's eager decode path (vllm-ascend
# attention/mla_v1.py AscendMLAImpl.forward and _forward_decode, ops/fused_moe.py select_experts and
# fused_experts_with_mc2; vLLM fuses q/k/v and gate/up into one GEMM each, and vLLM-Ascend's RMSNorm with a residual
# is one npu_add_rms_norm kernel).
ADD_NORM_KERNELS = 2  # input and post-attention RMSNorm, each fused with its residual add
# MLA absorbed decode, besides its projections and norms: kv_c.contiguous, q_nope transposed for the W_UK bmm,
# q_pe.contiguous, rotary, q_pe and k_pe written back, cat of the cache entry, reshape_and_cache, cat of q, paged MLA
# attention, the attention output transposed for the W_UV bmm, its reshape, and the copy into the output buffer
MLA_DECODE_KERNELS = 13
GQA_DECODE_KERNELS = 3  # rotary, reshape_and_cache, paged attention
# MoE with MC2 (expert parallel): dispatch, token-count cast, grouped GEMM, cat, swiglu, grouped GEMM, cat, weight
# cast, combine; then the routed output scaled and added to the shared experts'
MC2_MOE_KERNELS = 9 + 2
# MoE without EP (all-gather state): row index (arange + permute), init_routing, expert token counts and cast,
# grouped GEMM, cat, swiglu, grouped GEMM, cat, finalize_routing
LOCAL_MOE_KERNELS = 11
# top-k routing: one fused npu_moe_gating_top_k for 256 experts (DeepSeek-V3's grouping), else softmax, top-k, two
# casts and the renormalisation (sum, divide); then the weights cast to the activation dtype
FUSED_GATING_KERNELS = 1 + 1
GATING_KERNELS = 6 + 1
FUSED_GATING_EXPERTS = 256  # vLLM-Ascend takes the fused gating kernel at this expert count (select_experts)


def eager_layer_kernels(cfg: ModelConfig, moe: bool, tp: int, ep: int) -> int:
    """Kernels one decoder layer launches in an eager decode step (see the counts above), its TP all-reduces
    (after attention and after the MLP) included."""
    if cfg.mla is not None:
        gemms = (2 if cfg.mla.q_lora_rank else 1) + 1 + 1 + 2  # q (a, b), kv_a, o, the W_UK and W_UV bmm
        attention = gemms + (1 if cfg.mla.q_lora_rank else 0) + 1 + MLA_DECODE_KERNELS  # q_a and kv_a norms
    else:
        attention = 2 + (2 if cfg.qk_norm else 0) + GQA_DECODE_KERNELS  # qkv and o GEMMs, q and k norms
    if moe and cfg.moe is not None:
        gating = FUSED_GATING_KERNELS if cfg.moe.num_experts == FUSED_GATING_EXPERTS else GATING_KERNELS
        experts = MC2_MOE_KERNELS if ep > 1 else LOCAL_MOE_KERNELS
        shared = 3 if cfg.moe.shared_experts else 0  # gate_up GEMM, activation, down GEMM
        mlp = 1 + gating + experts + shared  # the router GEMM first
    else:
        mlp = 3  # gate_up GEMM, activation, down GEMM
    return ADD_NORM_KERNELS + attention + mlp + (2 if tp > 1 else 0)


def response_tail(scenario: Scenario, draws: float) -> float:
    """Expected longest response among `draws` responses (the phase ends when it ends): the mean for one or fewer."""
    return expected_longest(scenario.workload.response_len, draws)
