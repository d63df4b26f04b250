"""Compute floors of the training-side passes: no run is faster than its FLOPs at the devices' peak.

A pass over the step's batch (global_batch x n sequences of the workload's mean prompt + response length) costs
at least its GEMM FLOPs (2 per weight used per token: twin.cost_models.static `forward_flops`, the head included
unless tied) plus its causal attention over sequences of the mean length (mean^2 / 2 pairs each: the square of the
mean is at most the mean of the squares, so this too only lowers the bound), on every device at its dense BF16
peak. A log-prob pass (old_log_prob, ref) is one forward; the update is forward and backward (the backward's two
GEMMs per forward one) for each PPO epoch, recompute left out. A published stage below its floor cannot have run
the scenario's workload: the lengths or the batch the scenario assumes are wrong, not the twin's costs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from twin.cost_models.efficiency import peak_flops
from twin.cost_models.operators import attention_flops_per_ctx_layer
from twin.cost_models.static import tensor_table

if TYPE_CHECKING:
    from twin.evaluate import Evaluation

BACKWARD_PER_FORWARD = 2  # a backward computes the gradients of the inputs and of the weights: two GEMMs per one


def batch_forward_flops(ev: Evaluation) -> float:
    """FLOPs of one forward pass over the step's training batch at the workload's mean lengths."""
    wl = ev.sc.workload
    sequences = wl.global_batch * wl.n
    mean = wl.prompt_len.mean + wl.response_len.mean
    dense, expert = tensor_table(ev.inv).forward_flops()
    cfg = ev.inv.config
    gemm = sequences * mean * float(dense.sum() + expert.sum())
    attention = cfg.num_layers * attention_flops_per_ctx_layer(cfg) * sequences * mean * mean / 2
    return gemm + attention


def training_floors_s(ev: Evaluation) -> dict[str, float]:
    """Seconds below which old_log_prob, ref and update cannot run the scenario's batch on its devices."""
    forward_s = batch_forward_flops(ev) / (peak_flops(ev.kind) * ev.devices)
    update_passes = (1 + BACKWARD_PER_FORWARD) * ev.sc.workload.ppo_epochs
    return {"old_log_prob": forward_s, "ref": forward_s, "update": update_passes * forward_s}
