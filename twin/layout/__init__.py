"""Parallel layouts: pydantic models, validity rules, rank coordinates and the enumerator."""

from twin.layout.enumerate import enumerate_rollout, enumerate_train
from twin.layout.models import Layout, Offload, Recompute, RolloutLayout, TrainLayout
from twin.layout.rules import check_layout, check_rollout, check_train, validate_layout

__all__ = [
    "Layout",
    "Offload",
    "Recompute",
    "RolloutLayout",
    "TrainLayout",
    "check_layout",
    "check_rollout",
    "check_train",
    "enumerate_rollout",
    "enumerate_train",
    "validate_layout",
]
