"""Time of the training-side passes: one micro-batch on one pipeline stage, forward or forward+backward,
walked layer by layer through its operators (twin.cost_models.operators) with its TP/SP, EP and CP
communication; micro-batches fixed or packed by tokens (dynamic batching); the pipeline schedule; gradient
sync and the optimizer step.

Efficiencies and latencies come from the device curves and the profile; shapes from the inventory and layout.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import Literal, TypeVar

import numpy as np
from numpy.typing import ArrayLike

from twin.catalog.config import ModelConfig
from twin.catalog.inventory import Inventory
from twin.cost_models.comm import collective_time, host_copy_time, p2p_time
from twin.cost_models.efficiency import memory_seconds
from twin.cost_models.imbalance import expert_imbalance
from twin.cost_models.memory import ADAM_BYTES, BF16, FP32, TrainMemory, dynamic_micro_batches
from twin.cost_models.operators import LayerOperators, LayerShapes, causal_attention_flops
from twin.cost_models.static import tensor_table
from twin.errors import TwinError
from twin.layout.models import TrainLayout
from twin.layout.ranks import train_group
from twin.profile import Profile
from twin.scenario import Scenario
from twin.topology.routing import Cluster
from twin.workload import longest_sequence

PassKind = Literal["forward", "backward", "log_prob"]
T = TypeVar("T")
# Memory traffic of torch's AdamW per fp32 parameter on a CPU (torch/optim/adam.py _single_tensor_adam, the path
# CPU tensors take): decoupled decay param.mul_ (read 4, write 4), exp_avg.lerp_ (8, 4), exp_avg_sq.mul_ (4, 4)
# and .addcmul_ (8, 4), denom = sqrt (4, 4), / (4, 4), add_ (4, 4), param.addcdiv_ (12, 4): 48 read + 32 written
CPU_ADAMW_BYTES = 80


@dataclass(frozen=True)
class StageLayers:
    """The decoder layers of one pipeline stage: how many dense and MoE layers, whether it holds the head, and how
    many of its dense and MoE layers a backward runs forward again (full recompute)."""

    dense_layers: int
    moe_layers: int
    head: bool
    recomputed_dense: int = 0
    recomputed_moe: int = 0

    @property
    def layers(self) -> int:
        return self.dense_layers + self.moe_layers


def _memo(cache: dict, key: tuple, make: Callable[[], T]) -> T:
    """`cache[key]`, made by `make` the first time."""
    if key not in cache:
        cache[key] = make()
    return cache[key]


def _tokens_key(tokens: ArrayLike, tokens_sq: ArrayLike) -> tuple:
    """A micro-batch's tokens and squared lengths as a cache key: the pair, or a simulated replica's arrays."""
    if np.ndim(tokens) == 0 and np.ndim(tokens_sq) == 0:
        return float(tokens), float(tokens_sq)
    tokens, tokens_sq = np.asarray(tokens, dtype=float), np.asarray(tokens_sq, dtype=float)
    return tokens.shape, tokens.tobytes(), tokens_sq.tobytes()


def _experts_key(expert_tokens: ArrayLike | None) -> tuple:
    """The tokens a micro-batch's experts compute for (None: its own) as a cache key."""
    return () if expert_tokens is None else (np.asarray(expert_tokens, dtype=float).tobytes(),)


def _of_layers(per_layer: dict[bool, ArrayLike], dense: int, moe: int) -> ArrayLike:
    """Seconds of `dense` dense and `moe` MoE layers at `per_layer` seconds a layer of each kind (keyed MoE or not)."""
    return dense * per_layer.get(False, 0.0) + moe * per_layer.get(True, 0.0)


def cp_exchange_bytes(cfg: ModelConfig, lay: TrainLayout, tokens: float) -> float:
    """Bytes one CP rank sends in one layer's forward ring attention: its key/value block (after TP) to
    the next rank, cp - 1 times. MLA is exchanged with keys and values expanded to full heads."""
    if lay.cp <= 1:
        return 0.0
    if cfg.mla is not None:
        width = cfg.num_attention_heads * (cfg.mla.qk_head_dim + cfg.mla.v_head_dim)
    else:
        width = 2 * cfg.num_kv_heads * cfg.head_dim
    tp = lay.tp if lay.engine == "megatron" else 1
    return (lay.cp - 1) * tokens / lay.cp * width / tp * BF16


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
                 memory: TrainMemory, pass_caches: tuple[dict, dict] | None = None) -> None:
        """`pass_caches`: the micro-batch and communication caches of another TrainCost whose layout differs from
        this one's only in its memory knobs and micro-batch sizes, shared: the offload is read by the optimizer step
        alone, the recompute by the backward (part of its cache key), a micro-batch's size is its tokens."""
        self.inv, self.sc, self.cluster, self.pf, self.mem = inv, scenario, cluster, profile, memory
        self.pass_caches: tuple[dict, dict] = pass_caches if pass_caches is not None else ({}, {})
        self.cfg = inv.config
        self.lay = memory.lay
        self.devices = memory.devices
        megatron = self.lay.engine == "megatron"
        self.tp = self.lay.tp if megatron else 1
        self.sp = self.tp if megatron and self.lay.sequence_parallel else 1
        self.ops = LayerOperators(inv, cluster.kind, profile, self.tp, self.lay.expert_tp if megatron else 1)

    @cached_property
    def value_model(self) -> TrainCost | None:
        """The critic's costs where the workload trains one (PPO): its passes in the same layout; None otherwise."""
        critic = self.mem.value_model
        return None if critic is None else TrainCost(critic.inv, self.sc, self.cluster, self.pf, critic)

    @cached_property
    def stage_layers(self) -> list[StageLayers]:
        cfg = self.cfg
        out = []
        first = 0
        n = len(self.mem.stages.layers)
        for s, layers in enumerate(int(x) for x in self.mem.stages.layers):
            moe = sum(1 for i in range(first, first + layers) if cfg.is_moe_layer(i))
            again = self._recomputed(range(first, first + layers))
            rec_moe = sum(1 for i in again if cfg.is_moe_layer(i))
            first += layers
            out.append(StageLayers(layers - moe, moe, bool(self.mem.stages.has_head[s]) or s == n - 1,
                                   len(again) - rec_moe, rec_moe))
        return out

    def _recomputed(self, stage: range) -> list[int]:
        """The layers of a stage (its global indices) that full recompute runs forward again in the backward. Megatron
        checkpoints per model chunk (TransformerBlock._checkpointed_forward): `uniform` every layer (in units of
        `layers`), `block` the first `layers` of each chunk and none of the rest; the head is never recomputed. With
        virtual pipeline stages a stage holds `vpp` chunks of equal size (twin.layout.rules)."""
        rc = self.lay.recompute
        if rc.granularity != "full":
            return []
        if rc.method == "uniform":
            return list(stage)
        chunks = (self.lay.vpp or 1) if self.lay.engine == "megatron" else 1
        size = len(stage) // chunks
        return [i for c in range(chunks) for i in stage[c * size:c * size + min(rc.layers or 1, size)]]

    @cached_property
    def _shapes(self) -> dict[bool, LayerShapes]:
        """One representative layer of each kind (dense, MoE)."""
        cfg = self.cfg
        out: dict[bool, LayerShapes] = {}
        for i in range(cfg.num_layers):
            moe = cfg.is_moe_layer(i)
            if moe not in out:
                out[moe] = self.ops.layer(i)
        return out

    @property
    def mean_seq(self) -> float:
        wl = self.sc.workload
        return wl.prompt_len.mean + wl.response_len.mean

    @cached_property
    def _groups(self) -> dict[str, list[int]]:
        """One representative rank group per dimension (stage 0)."""
        return {dim: train_group(self.lay, self.devices, dim) for dim in ("tp", "cp", "dp", "ep", "pp")}

    @property
    def expert_ranks(self) -> int:
        return self.lay.expert_partition if self.lay.engine == "megatron" else 1

    def sent_pairs(self, rows: ArrayLike) -> ArrayLike:
        """Token-expert pairs of a device's own tokens, what it dispatches: its sequence-parallel share of a MoE
        layer's `rows`, each token routed to its top-k experts."""
        return rows / self.sp * self.cfg.moe.experts_per_token

    def imbalance(self, pairs_per_rank: ArrayLike) -> ArrayLike:
        """Busiest EP rank over the mean, for `pairs_per_rank` token-expert pairs per rank."""
        moe = self.cfg.moe
        if moe is None:
            return 1.0
        ranks = self.expert_ranks
        return expert_imbalance(ranks, moe.num_experts, moe.experts_per_token,
                                np.asarray(pairs_per_rank, dtype=float) * ranks / moe.experts_per_token,
                                self.pf["expert_load_cv"], self.sc.workload.expert_routing)

    def layer_comm_s(self, tokens: float, moe: bool, kind: PassKind) -> float:
        """TP/SP and EP communication of one layer for `tokens` tokens of a micro-batch in one pass (CP's ring
        exchange overlaps attention: see `cp_exposed_s`). A backward runs each forward collective's conjugate
        (an all-gather's gradient is a reduce-scatter, a dispatch's a combine: the same bytes) and, with sequence
        parallelism, gathers the input of each column-parallel linear once more for its weight gradient (Megatron
        keeps the input sharded: LinearWithGradAccumulationAndAsyncCommunication.backward); a full recompute
        runs the forward's collectives again (`_comm_total` adds them for the layers it recomputes; selective
        recompute reruns the core attention alone, which communicates nothing)."""
        backward = kind == "backward"
        return _memo(self.pass_caches[1], ("layer", float(tokens), moe, backward),
                     lambda: self._layer_comm(tokens, moe, backward=backward))

    def _layer_comm(self, tokens: float, moe: bool, backward: bool) -> float:
        lay, h = self.lay, self.cfg.hidden_size
        if lay.engine == "fsdp":
            return self.ulysses_per_layer_s(tokens)
        act = tokens / lay.cp * h * BF16
        t = 0.0
        if lay.tp > 1:
            tp_group = self._groups["tp"]
            if lay.sequence_parallel:  # per half (attention, MLP): all-gather in, reduce-scatter out
                gather = collective_time(self.cluster, self.pf, tp_group, "all_gather", act)
                t += 2 * ((2 if backward else 1) * gather
                          + collective_time(self.cluster, self.pf, tp_group, "reduce_scatter", act))
            else:
                t += 2 * collective_time(self.cluster, self.pf, tp_group, "all_reduce", act)
            if moe and lay.moe_tp_extend_ep:
                t /= 2  # the MLP half of the TP traffic is replaced by the expert all-to-all
        if moe and self.cfg.moe is not None and lay.expert_partition > 1:
            pairs = self.sent_pairs(tokens / lay.cp)
            send = pairs * h * BF16 * float(self.imbalance(pairs))  # the busiest rank receives the most
            ep = self._groups["ep"]
            t += (collective_time(self.cluster, self.pf, ep, "ep_dispatch", send)
                  + collective_time(self.cluster, self.pf, ep, "ep_combine", send))
        return t

    def ulysses_per_layer_s(self, tokens: float) -> float:
        """verl's Ulysses sequence parallelism (an FSDP layout's `cp`) in one layer's forward: all-to-alls of the
        queries, keys and values before attention (gather the sequence, scatter the heads; keys and values
        repeated up to the SP size where fewer heads) and one of the output after it, four calls each sending
        (sp - 1)/sp of its tensor's local rows (verl/models/transformers/monkey_patch.py
        _ulysses_flash_attention_forward). They sit on the layer's critical path."""
        sp = self.lay.cp
        if sp <= 1:
            return 0.0
        cfg = self.cfg
        if cfg.mla is not None:
            widths = [cfg.num_attention_heads * d for d in (cfg.mla.qk_head_dim, cfg.mla.qk_head_dim,
                                                            cfg.mla.v_head_dim, cfg.mla.v_head_dim)]
        else:
            kv = max(cfg.num_kv_heads, sp) * cfg.head_dim
            widths = [cfg.num_attention_heads * cfg.head_dim, kv, kv, cfg.num_attention_heads * cfg.head_dim]
        rows = tokens / sp
        return sum(collective_time(self.cluster, self.pf, self._groups["cp"], "all_to_all",
                                   rows * w * BF16 * (sp - 1) / sp) for w in widths)

    @cached_property
    def fsdp_unit_numel(self) -> dict[bool, float]:
        """Parameters of one FSDP unit, a decoder layer (verl wraps each one), of each kind: dense and MoE."""
        per_layer = tensor_table(self.inv).layer_numel
        out: dict[bool, float] = {}
        for i in range(self.cfg.num_layers):
            out.setdefault(self.cfg.is_moe_layer(i), float(per_layer[i]))
        return out

    def fsdp_unit_s(self, moe: bool, kind: PassKind) -> float:
        """FSDP2's parameter traffic of one unit in one pass over the FSDP group (every device: verl's fsdp_size
        -1): a forward or log-prob pass all-gathers its bf16 parameters; a backward gathers them again
        (reshard_after_forward, verl's default) and reduce-scatters its gradients in fp32 (verl's
        MixedPrecisionPolicy reduce_dtype), on every micro-batch (use_no_sync_for_gradient_accumulation false,
        verl's default; verl before its engine workers made no exception for accumulation either)."""
        cache = self.__dict__.setdefault("_fsdp_unit_cache", {})
        key = (moe, kind == "backward")
        if key not in cache:
            numel = self.fsdp_unit_numel[moe]
            group = list(range(self.devices))
            t = collective_time(self.cluster, self.pf, group, "all_gather", numel * BF16)
            if kind == "backward":
                t += collective_time(self.cluster, self.pf, group, "reduce_scatter", numel * FP32)
            cache[key] = t
        return cache[key]

    def fsdp_exposed_s(self, stage: int, compute_s: ArrayLike, kind: PassKind) -> ArrayLike:
        """FSDP2's parameter traffic of one pass beyond what the units' compute hides: it prefetches the next
        unit's gather (and reduces the last unit's gradients) while a unit computes, so each unit shows what its
        traffic takes beyond its compute, and the first unit's gather waits for nothing to hide it."""
        if self.lay.engine != "fsdp" or self.devices <= 1:
            return 0.0
        sl = self.stage_layers[stage]
        per_unit = np.asarray(compute_s, dtype=float) / max(sl.layers, 1)
        exposed = 0.0
        for moe, count in ((False, sl.dense_layers), (True, sl.moe_layers)):
            if count:
                exposed = exposed + count * np.maximum(0.0, self.fsdp_unit_s(moe, kind) - per_unit)
        first = self.fsdp_unit_s(sl.moe_layers > 0 and sl.dense_layers == 0, "forward")
        return exposed + first

    def cp_exposed_s(self, tokens: ArrayLike, attention_s: ArrayLike, rings: float) -> ArrayLike:
        """CP's ring exchange, `rings` times round, beyond what the pass's attention (`attention_s`) hides (a ring
        step's transfer overlaps the previous block's attention). FSDP's `cp` is Ulysses: no ring (see
        `ulysses_per_layer_s`)."""
        lay = self.lay
        if lay.cp <= 1 or lay.engine == "fsdp":
            return 0.0
        tokens = np.asarray(tokens, dtype=float)
        per_byte = collective_time(self.cluster, self.pf, self._groups["cp"], "all_gather", 1e9) / 1e9
        comm = cp_exchange_bytes(self.cfg, lay, 1.0) * tokens * lay.cp / (lay.cp - 1) * per_byte
        layers = self.stage_layers[0].layers
        hidden = np.asarray(attention_s, dtype=float) * (lay.cp - 1) / lay.cp
        return np.maximum(0.0, rings * comm * layers - hidden)

    def _cached_forward_parts(self, stage: int, tokens: ArrayLike, tokens_sq: ArrayLike,
                              expert_tokens: ArrayLike | None = None
                              ) -> tuple[dict[bool, ArrayLike], ArrayLike, ArrayLike]:
        """`_forward_parts`, shared by the passes of every stage with the same kinds of layer and head (a part is
        one layer's, so neither the stage's layer counts nor its recompute change it)."""
        sl = self.stage_layers[stage]
        key = ("parts", sl.dense_layers > 0, sl.moe_layers > 0, sl.head, *_tokens_key(tokens, tokens_sq),
               _experts_key(expert_tokens))
        return _memo(self.pass_caches[0], key, lambda: self._forward_parts(stage, tokens, tokens_sq, expert_tokens))

    def _forward_parts(self, stage: int, tokens: ArrayLike, tokens_sq: ArrayLike,
                       expert_tokens: ArrayLike | None = None) -> tuple[dict[bool, ArrayLike], ArrayLike, ArrayLike]:
        """Seconds of one forward of a micro-batch through one stage, by part: one layer of each kind the stage holds
        (dense: False, MoE: True), the head (0 where the stage has none), and one layer's attention alone. The
        experts compute the pairs of `expert_tokens` tokens a rank (default: its own `tokens`; in lockstep, the mean
        of the replicas whose tokens its expert group exchanges: `lockstep_times`)."""
        lay, cfg, ops = self.lay, self.cfg, self.ops
        sl = self.stage_layers[stage]
        tokens = np.asarray(tokens, dtype=float)
        tokens_sq = np.asarray(tokens_sq, dtype=float)
        rows = tokens / lay.cp  # GEMM rows of this device (TP splits the weights, CP the sequence)
        expert_rows = rows if expert_tokens is None else np.asarray(expert_tokens, dtype=float) / lay.cp
        seq_len = tokens_sq / np.maximum(tokens, 1.0)
        attn = ops.attention_seconds(causal_attention_flops(cfg, tokens_sq) / (self.tp * lay.cp), seq_len)
        layers: dict[bool, ArrayLike] = {}
        for moe, count in ((False, sl.dense_layers), (True, sl.moe_layers)):
            if count == 0:
                continue
            shapes = self._shapes[moe]
            layer = ops.gemm_seconds(rows, shapes.dense_gemms) + attn + ops.elementwise_seconds(rows, moe, self.sp)
            if moe and cfg.moe is not None:
                etp = self.ops.etp
                pairs = expert_rows * cfg.moe.experts_per_token * etp / self.tp
                local = cfg.moe.num_experts / self.expert_ranks
                received = pairs * self.imbalance(pairs)
                layer = layer + ops.grouped_gemm_seconds(received, shapes.expert_numel, local)
                layer = layer + ops.token_permutation_seconds(self.sent_pairs(rows), received,
                                                              self.expert_ranks > 1 and local > 1)
            layers[moe] = layer
        head = 0.0
        if sl.head:
            head = ops.gemm_seconds(rows, ops.head_gemm)
            # fp32 logits: written, then read by the log-softmax and the gather
            # (a critic's one value per token, its head not split)
            outputs = self.inv.head_outputs / (1 if self.mem.is_critic else self.tp)
            head = head + memory_seconds(self.cluster.kind, self.pf, rows * outputs * FP32 * 3)
        return layers, head, attn

    def _signature(self, stage: int) -> tuple[StageLayers, bool]:
        """Stages with the same layers cost the same (the last sends no activations on)."""
        return self.stage_layers[stage], stage == self.mem.n_stages - 1

    def microbatch_time(self, stage: int, tokens: ArrayLike, tokens_sq: ArrayLike, kind: PassKind,
                        expert_tokens: ArrayLike | None = None) -> PassTime:
        """A micro-batch of `tokens` tokens whose sequence lengths square-sum to `tokens_sq` through one stage
        (scalars or numpy arrays). `kind`: the forward or the backward half of a training pass (backward
        includes the recompute), or a forward-only log-prob pass. `expert_tokens`: see `_forward_parts`."""
        # the granularity; which layers are recomputed is part of the stage's signature. A simulated replica's
        # micro-batches come as arrays: the stages with the same layers share one evaluation
        recompute = self.lay.recompute.granularity if kind == "backward" else None
        key = (self._signature(stage), *_tokens_key(tokens, tokens_sq), _experts_key(expert_tokens), kind, recompute)
        return _memo(self.pass_caches[0], key,
                     lambda: self._microbatch_time(stage, tokens, tokens_sq, kind, expert_tokens))

    def _microbatch_time(self, stage: int, tokens: ArrayLike, tokens_sq: ArrayLike, kind: PassKind,
                         expert_tokens: ArrayLike | None) -> PassTime:
        lay, pf = self.lay, self.pf
        layers, head, layer_attn = self._cached_forward_parts(stage, tokens, tokens_sq, expert_tokens)
        sl = self.stage_layers[stage]
        fwd = _of_layers(layers, sl.dense_layers, sl.moe_layers) + head
        attn = layer_attn * sl.layers
        rings = 1.0  # CP ring exchanges: a forward passes the keys and values round
        if kind == "backward":  # twice the forward, plus what the recompute runs again
            if lay.recompute.granularity == "selective":  # the attention core's share of the forward
                again, again_attn = fwd * pf["selective_recompute_flops"], attn * pf["selective_recompute_flops"]
            else:  # full: the recomputed layers' forward, not the head's; none without recompute
                again = _of_layers(layers, sl.recomputed_dense, sl.recomputed_moe)
                again_attn = layer_attn * (sl.recomputed_dense + sl.recomputed_moe)
            fwd = 2.0 * fwd + again
            # the backward passes keys and values and their gradients round, the recomputed layers' forward once more
            rings = 2.0 + (sl.recomputed_dense + sl.recomputed_moe) / max(sl.layers, 1)
            attn = 2.0 * attn + again_attn
        (intercept, slope), (hidden_intercept, hidden_slope) = self._comm_coefficients(stage, kind)
        tokens_f = np.asarray(tokens, dtype=float)
        comm = (intercept + slope * tokens_f + self.cp_exposed_s(tokens, attn, rings)
                + self.fsdp_exposed_s(stage, fwd, kind))
        if kind == "backward":
            fwd = fwd + self.zero_memory_exposed_s(stage, tokens, fwd, comm, hidden_intercept + hidden_slope * tokens_f)
        return PassTime(compute_s=fwd + pf["microbatch_overhead_ms"] * 1e-3, comm_s=comm)

    def zero_memory_recompute_s(self, stage: int, tokens: ArrayLike) -> tuple[ArrayLike, ArrayLike]:
        """(compute, communication) seconds that MindSpeed moe_zero_memory adds to a backward to recompute what
        its forward released: level0 the MoE layers' memory-bound kernels (the experts' activation function among
        them), level1 also the dispatch of the routed tokens (one more all-to-all per MoE layer)."""
        lay, sl = self.lay, self.stage_layers[stage]
        if lay.moe_zero_memory == "none" or sl.moe_layers == 0:
            return 0.0, 0.0
        rows = np.asarray(tokens, dtype=float) / lay.cp
        compute = sl.moe_layers * self.ops.elementwise_seconds(rows, True, self.sp)
        comm = 0.0
        if lay.moe_zero_memory == "level1" and self.cfg.moe is not None and self.expert_ranks > 1:
            pairs = self.sent_pairs(rows)
            per_byte = collective_time(self.cluster, self.pf, self._groups["ep"], "ep_dispatch", 1e9) / 1e9
            comm = sl.moe_layers * pairs * self.cfg.hidden_size * BF16 * self.imbalance(pairs) * per_byte
        return compute, comm

    def zero_memory_exposed_s(self, stage: int, tokens: ArrayLike, compute_s: ArrayLike, exposed_comm_s: ArrayLike,
                              hidden_comm_s: ArrayLike) -> ArrayLike:
        """What moe_zero_memory's recompute adds to a backward of `compute_s` seconds of compute beside
        `exposed_comm_s` of communication it waits for and `hidden_comm_s` it hides. MindSpeed runs the recompute
        under the backward's communication and the re-dispatch under its computation (megatron-moe-zero-memory.md:
        "采用计算掩盖重通信和swap，将重计算与未掩盖通信进行隐藏"; it needs moe_alltoall_overlap_comm, whose
        communication runs on its own stream): on two streams, the compute stream waits `exposed_comm_s`, which
        the recomputed kernels fill first, and the communication stream idles for the compute that hides nothing,
        which the re-dispatch fills first; only what overflows either lengthens the backward."""
        recompute, redispatch = self.zero_memory_recompute_s(stage, tokens)
        comm_idle = np.maximum(0.0, np.asarray(compute_s, dtype=float) - hidden_comm_s)
        return np.maximum(0.0, recompute - exposed_comm_s) + np.maximum(0.0, redispatch - comm_idle)

    def _comm_coefficients(self, stage: int, kind: PassKind) -> tuple[tuple[float, float], tuple[float, float]]:
        """A micro-batch's exposed and hidden communication seconds in a pass of `kind`, each as intercept + slope
        x tokens (linear in bytes moved)."""
        backward = kind == "backward"
        key = (self._signature(stage), backward)
        cache = self.pass_caches[1]
        if key not in cache:
            one, two = self._comm_total(stage, 1024.0, kind), self._comm_total(stage, 2048.0, kind)
            lines = []
            for a, b in zip(one, two, strict=True):
                slope = (b - a) / 1024.0
                lines.append((a - slope * 1024.0, slope))
            cache[key] = tuple(lines)
        return cache[key]

    def _comm_total(self, stage: int, tokens: float, kind: PassKind) -> tuple[float, float]:
        """(exposed, hidden) seconds of the TP/SP and EP traffic of all the stage's layers in a pass of `kind`
        and its one send to the next stage (activations forward, their gradients backward); the layers' traffic
        is hidden behind compute in the profile's `train_comm_overlap` share."""
        lay, pf = self.lay, self.pf
        sl = self.stage_layers[stage]
        comm = sl.dense_layers * self.layer_comm_s(tokens, False, kind)
        comm += sl.moe_layers * self.layer_comm_s(tokens, True, kind)
        if kind == "backward":  # the recomputed layers' forward collectives
            comm += sl.recomputed_dense * self.layer_comm_s(tokens, False, "forward")
            comm += sl.recomputed_moe * self.layer_comm_s(tokens, True, "forward")
        hidden = comm * pf["train_comm_overlap"]
        comm -= hidden
        if lay.engine == "megatron" and lay.pp > 1:
            comm += self.p2p_s(tokens)
        return comm, hidden

    def p2p_s(self, tokens: float) -> float:
        """Sending one micro-batch's activations to the next pipeline stage."""
        lay = self.lay
        if lay.engine != "megatron" or lay.pp == 1:
            return 0.0
        act = tokens / lay.cp / self.sp * self.cfg.hidden_size * BF16
        return p2p_time(self.cluster, self.pf, 0, self.devices // lay.pp, act)

    @property
    def lockstep_replicas(self) -> int:
        """DP replicas that run each micro-batch together, every rank of them waiting for the slowest at each layer:
        under Megatron, those whose ranks one MoE layer's expert all-to-all spans (an expert group of
        expert_partition x expert-TP ranks over a replica's TP x CP ranks: MoEAlltoAllTokenDispatcher's
        all_to_all_single over the expert-model-parallel group, megatron/core/transformer/moe/token_dispatcher.py);
        under FSDP every replica (each unit all-gathers its parameters over the shard group in the forward and
        reduce-scatters its gradients in every micro-batch's backward: verl's FSDP actor accumulates without
        no_sync). 1 where nothing couples them (Megatron dense: the gradients reduce once per optimizer step)."""
        lay, dp = self.lay, self.mem.dp
        if lay.engine == "fsdp":
            return dp
        if self.cfg.moe is None or lay.expert_partition == 1:
            return 1
        return max(1, min(dp, lay.expert_partition * lay.expert_tp // (lay.tp * lay.cp)))

    def lockstep_times(self, tokens: np.ndarray, tokens_sq: np.ndarray, kind: PassKind) -> np.ndarray:
        """Seconds of each micro-batch on each stage ([stage, micro-batch]) for replicas in lockstep: `tokens` and
        `tokens_sq` are [replica, micro-batch]. Each rank reaches a layer's collectives with its own micro-batch,
        so the group takes the slowest; under Megatron the expert ranks compute the pairs all the group's replicas
        sent them, the group's mean (a rank's experts receive from every replica's ranks)."""
        shared = self.lay.engine == "megatron" and self.cfg.moe is not None and tokens.shape[0] > 1
        experts = tokens.mean(axis=0) if shared else None
        return np.stack([
            np.max([np.asarray(self.microbatch_time(s, t, q, kind, experts).total, dtype=float)
                    for t, q in zip(tokens, tokens_sq, strict=True)], axis=0)
            for s in range(self.mem.n_stages)])

    def microbatch(self, stage: int, sequences: float, backward: bool, length: float | None = None) -> PassTime:
        """One micro-batch of `sequences` sequences of `length` tokens (default: the mean) through one stage: forward
        and backward of a training pass, or a forward-only log-prob pass."""
        length = self.mean_seq if length is None else length
        tokens, sq = sequences * length, sequences * length * length
        if not backward:
            return self.microbatch_time(stage, tokens, sq, "log_prob")
        f, b = self.microbatch_time(stage, tokens, sq, "forward"), self.microbatch_time(stage, tokens, sq, "backward")
        return PassTime(compute_s=f.compute_s + b.compute_s, comm_s=f.comm_s + b.comm_s)

    def computed_length(self, sequences: float, pass_sequences: float) -> float:
        """The tokens each sequence of a micro-batch of `sequences` runs at, of a rank's pass of `pass_sequences`
        (`TrainLayout.padding`): its mean length packed, else the longest of the micro-batch or of the pass, each
        length at the quantile where the longest of n draws falls (n / (n + 1)): n responses, and the prompts they
        answer in batch order (a prompt's n responses side by side, as verl repeats them)."""
        padding = self.lay.padding
        if padding == "none":
            return self.mean_seq
        wl = self.sc.workload
        draws = max(1, round(sequences if padding == "micro_batch" else pass_sequences))
        return longest_sequence(wl, min(wl.global_batch, -(-draws // wl.n)), draws)

    def micro_batches(self, sequences: float, micro: int, forward_only: bool = False) -> int:
        """Micro-batches of `sequences` mean-length sequences on one DP rank: fixed `micro` sequences each,
        or packed by tokens (dynamic batching, at the update's or the log-prob passes' budget)."""
        lay = self.lay
        budget = lay.token_budget(forward_only)
        if budget is None:
            return max(1, round(sequences / micro))
        return dynamic_micro_batches(sequences * self.mean_seq, max(1, int(sequences)), budget * lay.cp,
                                     lay.vpp if lay.engine == "megatron" else None)

    def micro_batches_of(self, lengths: np.ndarray, forward_only: bool = False) -> int:
        """Dynamic micro-batches of one DP rank's sequences of these lengths."""
        lay = self.lay
        return dynamic_micro_batches(float(lengths.sum()), len(lengths), (lay.token_budget(forward_only) or 0) * lay.cp,
                                     lay.vpp if lay.engine == "megatron" else None)

    def pipeline_time(self, micro: int, backward: bool) -> tuple[float, int]:
        """(seconds, micro-batches) of one pass over the whole step's sequences with the 1F1B schedule."""
        lay = self.lay
        steps = self.mem.passes(forward_only=not backward)
        per_step = self.mem.sequences_per_pass(forward_only=not backward)
        per_batch = self.micro_batches(per_step, micro, forward_only=not backward)
        m = per_batch * steps
        size = per_step / per_batch
        length = self.computed_length(size, per_step)
        slowest = max(float(self.microbatch(s, size, backward, length).total) for s in range(self.mem.n_stages))
        if lay.engine == "fsdp" or lay.pp == 1:
            return m * slowest, m
        bubble = (lay.pp - 1) / (lay.vpp or 1)
        return steps * (per_batch + bubble) * slowest, m

    def optimizer_time(self) -> float:
        """Gradient sync (reduce-scatter + all-gather; FSDP's is in every backward) and the Adam step, per
        optimizer step, summed."""
        lay, pf, mem = self.lay, self.pf, self.mem
        worst = 0.0
        for s in range(mem.n_stages):
            dense, expert = float(mem.stages.dense_numel[s]), float(mem.stages.expert_numel[s])
            if lay.engine == "fsdp":
                sync = 0.0  # every backward reduce-scatters its gradients (fsdp_unit_s)
                state_numel = dense + expert
            else:
                dp_group = self._groups["dp"]
                sync = (collective_time(self.cluster, pf, dp_group, "reduce_scatter", dense * FP32)
                        + collective_time(self.cluster, pf, dp_group, "all_gather", dense * BF16))
                state_numel = dense / (mem.dp * lay.cp) + expert / mem.edp
            if lay.offload.optimizer == "cpu":
                step = self._host_optimizer_step(state_numel)
            else:
                # Adam reads and writes the fp32 state, reads the fp32 gradient and writes the bf16 weight
                step = float(memory_seconds(self.cluster.kind, pf, state_numel * (2 * ADAM_BYTES + FP32 + BF16)))
            if lay.offload.optimizer == "swap":
                step += 2 * host_copy_time(self.cluster, pf, state_numel * ADAM_BYTES) * (1 - pf["swap_overlap"])
            worst = max(worst, sync + step)
        return (worst + pf["optimizer_overhead_ms"] * 1e-3) * self.sc.workload.optimizer_steps

    def _host_optimizer_step(self, state_numel: float) -> float:
        """Megatron's CPU optimizer step of one device's `state_numel` parameters: the fp32 gradients copied to the
        host, torch's AdamW on the host, the fp32 parameters copied back. The copies of one parameter group overlap
        the host's work on another (overlap_cpu_optimizer_d2h_h2d), so the step lasts as long as the slower of the
        two. Every device of a node steps on the same host at once and they share its memory bandwidth."""
        kind = self.cluster.kind
        host_bw = kind.host_memory_bandwidth_gbs_per_node
        if host_bw is None:
            raise TwinError(f"cluster kind {kind.name} has no host_memory_bandwidth_gbs_per_node: the CPU "
                            "optimizer's host-side step cannot be costed (add the figure to its hardware file)")
        copies = 2 * host_copy_time(self.cluster, self.pf, state_numel * FP32)
        host = kind.devices_per_node * state_numel * CPU_ADAMW_BYTES / (host_bw.value * 1e9)
        return max(copies, host)

    def update_time(self) -> float:
        t, _ = self.pipeline_time(self.lay.micro_batch, backward=True)
        return t * self.sc.workload.ppo_epochs + self.optimizer_time()

    def log_prob_time(self) -> float:
        t, _ = self.pipeline_time(self.lay.log_prob_micro_batch, backward=False)
        return t

