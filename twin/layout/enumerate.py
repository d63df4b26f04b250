"""Every valid training and rollout layout of a model on N devices.

The enumerator walks the structural dimensions (TP, PP, CP, EP and the expert-TP mode for training;
TP and EP for rollout) and keeps what the rules accept. Memory knobs (recompute, offload, micro-batch,
max_num_seqs) are chosen later by the planner for each structural layout.
"""

from __future__ import annotations

from collections.abc import Iterator

from twin.catalog.config import ModelConfig
from twin.layout.engine import rollout_as_engine_builds
from twin.layout.models import RolloutLayout, TrainLayout
from twin.layout.rules import check_rollout, check_train, check_verl_replica
from twin.topology.clusters import ClusterKind


def divisors(n: int) -> list[int]:
    small = [d for d in range(1, int(n**0.5) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def _expert_modes(cfg: ModelConfig, tp: int, mindspeed: bool) -> list[dict]:
    """Ways the experts can be cut inside a TP group: expert TP = TP, expert TP = 1, or (MindSpeed only)
    tp-extend-ep."""
    if cfg.moe is None:
        return [{}]
    modes: list[dict] = [{"etp": None}]
    if tp > 1:
        modes.append({"etp": 1})
        if mindspeed:
            modes.append({"moe_tp_extend_ep": True})
    return modes


def enumerate_train(cfg: ModelConfig, devices: int, kind: ClusterKind | None = None,
                    include_fsdp: bool | None = None) -> Iterator[TrainLayout]:
    """Valid structural training layouts; FSDP ones too for dense models unless told otherwise. The search keeps
    every TP group inside one node (a layout given by hand may span nodes: its collectives then cross the
    scale-out tier) and MindSpeed's tp-extend-ep to kinds verl trains with MindSpeed."""
    max_tp = kind.devices_per_node if kind is not None else devices
    mindspeed = kind is None or kind.megatron_flavour == "mindspeed"
    cps = [c for c in (1, 2, 4, 8) if devices % c == 0]
    for tp in (d for d in divisors(devices) if d <= max_tp):
        for pp in (d for d in divisors(devices // tp) if d <= cfg.num_layers):
            for cp in (c for c in cps if (devices // (tp * pp)) % c == 0):
                eps = divisors(cfg.moe.num_experts) if cfg.moe else [1]
                for ep in eps:
                    for mode in _expert_modes(cfg, tp, mindspeed):
                        if ep == 1 and mode.get("moe_tp_extend_ep"):
                            continue
                        lay = TrainLayout(tp=tp, pp=pp, cp=cp, ep=ep, **mode)
                        if not check_train(lay, cfg, devices, kind):
                            yield lay
    if include_fsdp if include_fsdp is not None else cfg.moe is None:
        for sp in (d for d in divisors(devices) if d <= max_tp):
            lay = TrainLayout(engine="fsdp", cp=sp)
            if not check_train(lay, cfg, devices, kind):
                yield lay


def enumerate_rollout(cfg: ModelConfig, devices: int, kind: ClusterKind | None = None, verl_server: bool = False,
                      **knobs: object) -> Iterator[RolloutLayout]:
    """Valid structural rollout layouts (TP, EP); `knobs` set the engine arguments of each. TP stays inside one
    node, as in `enumerate_train`; with `verl_server`, only replicas verl's vLLM server can launch."""
    max_tp = kind.devices_per_node if kind is not None else devices
    for tp in (d for d in divisors(devices) if d <= max_tp):
        eps = [1]
        if cfg.moe is not None:
            eps += [e for e in divisors(devices) if e > 1 and e % tp == 0 and cfg.moe.num_experts % e == 0]
        for ep in eps:
            lay = RolloutLayout(tp=tp, dp=devices // tp, ep=ep, **knobs)
            if kind is not None:
                lay = rollout_as_engine_builds(lay, cfg, kind.rollout_engine)
            errs = check_rollout(lay, cfg, devices, kind)
            if kind is not None and verl_server:
                errs += check_verl_replica(lay, kind)
            if not errs:
                yield lay
