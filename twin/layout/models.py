"""Pydantic models of the training layout (Megatron/MindSpeed or FSDP) and the rollout layout (vLLM).

Only the fields a user chooses live here; derived sizes (DP, the expert partition) are properties that
need the device count. Validity against a model and a cluster is checked in `twin.layout.rules`.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

# verl 0.9.1's critic token budgets a device (trainer/config/critic/critic.yaml ppo_max_token_len_per_gpu, and the
# CriticConfig field ppo_infer_max_token_len_per_gpu): twice the actor's default
VERL_CRITIC_TOKENS = 32768


class Recompute(BaseModel):
    """Activation recomputation: none, selective (attention core only) or full (whole layers)."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    granularity: Literal["none", "selective", "full"] = "none"
    method: Literal["uniform", "block"] = "uniform"
    layers: int | None = Field(default=None, ge=1)  # full: layers per recompute unit (uniform) or count (block)


class Offload(BaseModel):
    """What lives in host memory outside the phase that needs it."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    param: bool = False
    grad: bool = False
    # offload: optimizer state moved to host between updates; swap: MindSpeed's swap optimizer, which
    # streams state to the device one bucket at a time during the step; cpu: Megatron's CPU optimizer
    # (HybridDeviceOptimizer at offload fraction 1): the state lives on the host and the host runs the Adam step
    optimizer: Literal["none", "offload", "swap", "cpu"] = "none"


class TrainLayout(BaseModel):
    """How the actor (and reference) model is sharded for training."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    engine: Literal["megatron", "fsdp"] = "megatron"
    tp: int = Field(default=1, ge=1)
    pp: int = Field(default=1, ge=1)
    ep: int = Field(default=1, ge=1)
    cp: int = Field(default=1, ge=1)  # context parallel (FSDP: Ulysses sequence parallel)
    etp: int | None = Field(default=None, ge=1)  # expert tensor parallel; Megatron's default is TP
    moe_tp_extend_ep: bool = False  # MindSpeed: experts split over TP x EP ranks, no expert TP
    # MindSpeed's grouped matmul (moe_grouped_gemm): Megatron's GroupedMLP holds a layer's local routed experts in two
    # tensors, weight1 and weight2, where megatron-core's TEGroupedMLP and SequentialMLP hold two per expert; what a
    # weight export walks (cann-recipes-train's Qwen3 recipes convert `mlp.experts.weight1/2`). moe_tp_extend_ep
    # implies it
    moe_grouped_gemm: bool = False
    vpp: int | None = Field(default=None, ge=1)  # virtual pipeline chunks per stage
    pp_layers: tuple[int, ...] | None = None  # decoder layers per pipeline stage
    sequence_parallel: bool = True  # Megatron SP (only meaningful with TP > 1)
    micro_batch: int = Field(default=1, ge=1)  # sequences per micro-batch in update_actor
    log_prob_micro_batch: int = Field(default=1, ge=1)  # sequences per micro-batch in log-prob passes
    recompute: Recompute = Recompute()
    offload: Offload = Offload()
    # verl use_dynamic_bsz: micro-batches packed up to this many tokens per device (ppo_max_token_len_per_gpu), in
    # the update and, without a budget of their own, the log-prob passes; None: fixed micro_batch /
    # log_prob_micro_batch sequences
    dynamic_batch_tokens: int | None = Field(default=None, ge=1)
    # verl log_prob_max_token_len_per_gpu of the rollout and reference log-prob passes; None: the update's budget
    # (verl's default reads it through oc.select)
    log_prob_dynamic_batch_tokens: int | None = Field(default=None, ge=1)
    moe_zero_memory: Literal["none", "level0", "level1"] = "none"  # MindSpeed activation release in MoE layers
    # verl trainer.balance_batch: the driver deals each step's sequences into DP shares of equal workload and, from
    # verl 0.6.1, orders each share short-long-short ("smaller micro-batches at both ends", 62221fa13); None: verl's
    # default, on (MindSpeed-RL's data path has no such option). The Ascend recipes turn it off (D2D_DATA_TRANSFER).
    balance_batch: bool | None = None
    # How a micro-batch's sequences enter the model (Megatron): "none" packs them without padding (THD: verl's
    # use_remove_padding, its default); "micro_batch" pads every sequence to the micro-batch's longest (BSHD: the
    # DeepSeek recipe's verl patch runs use_packed_seq False, whose remove_left_padding pads to the longest real
    # length); "mini_batch" to the longest of the rank's mini-batch (verl 0.9.1's Megatron engine with
    # use_remove_padding False and its default pad_bshd_to_minibatch_max). Padded positions run every operator.
    padding: Literal["none", "micro_batch", "mini_batch"] = "none"

    @model_validator(mode="after")
    def _shape(self) -> TrainLayout:
        if self.pp_layers is not None and len(self.pp_layers) != self.pp:
            raise ValueError(f"pp_layers has {len(self.pp_layers)} entries for PP={self.pp}")
        if self.pp_layers is not None and min(self.pp_layers) < 1:
            raise ValueError(f"pp_layers {list(self.pp_layers)} has a stage without layers")
        if self.log_prob_dynamic_batch_tokens is not None and self.dynamic_batch_tokens is None:
            raise ValueError("log_prob_dynamic_batch_tokens needs dynamic_batch_tokens (verl's use_dynamic_bsz)")
        if self.moe_tp_extend_ep and self.etp not in (None, 1):
            raise ValueError("moe_tp_extend_ep replaces expert TP: etp must be unset or 1")
        if self.padding != "none" and self.engine == "fsdp":
            raise ValueError(f"padding {self.padding!r} is Megatron's: verl's FSDP actor without use_remove_padding "
                             "pads every sequence to the prompt and response limits, which the twin does not model")
        return self

    @property
    def model_parallel(self) -> int:
        return self.tp * self.pp * self.cp

    @property
    def expert_tp(self) -> int:
        """TP degree inside each expert."""
        if self.moe_tp_extend_ep:
            return 1
        return self.etp if self.etp is not None else self.tp

    @property
    def grouped_experts(self) -> bool:
        """Whether Megatron holds a layer's local routed experts as GroupedMLP's two tensors."""
        return self.moe_grouped_gemm or self.moe_tp_extend_ep

    @property
    def expert_partition(self) -> int:
        """Ranks the routed experts of one layer are spread over (EP, or TP x EP with tp-extend-ep)."""
        return self.ep * self.tp if self.moe_tp_extend_ep else self.ep

    def token_budget(self, forward_only: bool) -> int | None:
        """Tokens per device a dynamic micro-batch packs: the update's, or the log-prob passes' (forward only);
        None without dynamic batching."""
        if forward_only and self.log_prob_dynamic_batch_tokens is not None:
            return self.log_prob_dynamic_batch_tokens
        return self.dynamic_batch_tokens

    def for_critic(self) -> TrainLayout:
        """PPO's critic in this layout as verl 0.9.1 trains it: its engine always packs micro-batches by tokens
        (trainer/ppo/ray_trainer.py builds the critic's engine config with use_dynamic_bsz left at its default, True),
        at this layout's budgets where it has them, else at verl's critic defaults (`VERL_CRITIC_TOKENS` a device for
        its update, ppo_max_token_len_per_gpu, and for its values, ppo_infer_max_token_len_per_gpu)."""
        return self.model_copy(update={
            "padding": "none",  # the critic's use_remove_padding is its own (verl's default, on)
            "dynamic_batch_tokens": self.dynamic_batch_tokens or VERL_CRITIC_TOKENS,
            "log_prob_dynamic_batch_tokens": self.token_budget(forward_only=True) or VERL_CRITIC_TOKENS})

    def dp(self, devices: int) -> int:
        return devices // self.model_parallel

    def stage_layers(self, num_layers: int) -> tuple[int, ...]:
        """Decoder layers per pipeline stage: the explicit split, else as even as possible (extra first)."""
        if self.pp_layers is not None:
            return self.pp_layers
        base, extra = divmod(num_layers, self.pp)
        return tuple(base + (1 if s < extra else 0) for s in range(self.pp))

    def short(self) -> str:
        parts = [f"TP{self.tp}", f"PP{self.pp}"]
        if self.ep > 1 or self.moe_tp_extend_ep:
            parts.append(f"EP{self.ep}" + ("x" if self.moe_tp_extend_ep else ""))
        if self.cp > 1:
            parts.append(f"CP{self.cp}")
        if self.engine == "fsdp":
            parts = ["FSDP"] + ([f"SP{self.cp}"] if self.cp > 1 else [])
        rc = {"none": "", "selective": " rc-sel", "full": " rc-full"}[self.recompute.granularity]
        if self.recompute.granularity == "full" and self.recompute.method == "block":
            rc = f" rc-block{self.recompute.layers or 1}"
        off = self.offload
        tags = [n for n, on in (("p", off.param), ("g", off.grad)) if on]
        if off.optimizer != "none":
            tags.append({"offload": "o", "swap": "swap", "cpu": "cpu"}[off.optimizer])
        return " ".join(parts) + rc + (f" off:{'+'.join(tags)}" if tags else "")


class RolloutLayout(BaseModel):
    """How the same devices are sharded for generation with vLLM(-Ascend).

    `dp` counts attention data-parallel ranks over all devices (devices = TP x DP). With expert
    parallelism, one vLLM instance spans `ep` devices (ep / tp DP ranks share the experts); without,
    each TP group is its own instance.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    tp: int = Field(default=1, ge=1)
    dp: int = Field(default=1, ge=1)
    ep: int = Field(default=1, ge=1)
    max_num_seqs: int = Field(default=256, ge=1)
    max_num_batched_tokens: int = Field(default=8192, ge=1)
    gpu_memory_utilization: float = Field(default=0.8, gt=0, le=1)
    graph_mode: bool = True
    # the batch sizes the captured decode graphs were built for: "multi", several (vLLM's capture sizes; TorchAir
    # GE's multi-shape compilation): a step runs the smallest that holds its sequences; "single", one at
    # max_num_seqs (TorchAir GE compiled once): every step runs at max_num_seqs, its empty slots padded
    # (twin.cost_models.graph_shapes)
    graph_shapes: Literal["multi", "single"] = "multi"
    enable_chunked_prefill: bool = True
    # the MoE's shared experts whole on every rank instead of split over TP; the engine decides it
    # (twin/layout/engine.py), not the planner
    shared_experts_whole: bool = False

    @model_validator(mode="after")
    def _graph_shapes_need_graphs(self) -> RolloutLayout:
        if self.graph_shapes == "single" and not self.graph_mode:
            raise ValueError("graph_shapes 'single' describes captured decode graphs: it needs graph_mode")
        return self

    @property
    def devices(self) -> int:
        return self.tp * self.dp

    @property
    def instance_size(self) -> int:
        """Devices in one vLLM engine instance."""
        return self.ep if self.ep > 1 else self.tp

    @property
    def instances(self) -> int:
        return self.devices // self.instance_size

    def short(self) -> str:
        s = f"TP{self.tp} DP{self.dp}"
        if self.ep > 1:
            s += f" EP{self.ep}"
        return s + f" seqs{self.max_num_seqs}"


class Layout(BaseModel):
    """A training layout and a rollout layout: on the same devices (`colocated`, verl's hybrid engine), or, with
    `separate`, the rollout on devices of its own, the last `rollout.devices` of the cluster, and the trainer on the
    others (verl's fully async and one-step-off policies; the twin models their weight sync, not their step)."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    train: TrainLayout
    rollout: RolloutLayout
    placement: Literal["colocated", "separate"] = "colocated"

    def trainer_devices(self, devices: int) -> int:
        """Devices the trainer runs on out of the cluster's `devices`."""
        return devices - self.rollout.devices if self.placement == "separate" else devices
