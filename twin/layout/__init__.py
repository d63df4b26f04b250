"""Parallel layouts: pydantic models, validity rules, rank coordinates and the enumerator.

The names below are loaded on first use (PEP 562), so that importing the models alone (the executor reading a
plan) does not import the rules and the enumerator, which import the topology and hardware tables.
"""

from importlib import import_module

_WHERE = {
    "Layout": "models",
    "Offload": "models",
    "Recompute": "models",
    "RolloutLayout": "models",
    "TrainLayout": "models",
    "check_layout": "rules",
    "check_rollout": "rules",
    "check_train": "rules",
    "enumerate_rollout": "enumerate",
    "enumerate_train": "enumerate",
    "validate_layout": "rules",
}
__all__ = sorted(_WHERE)


def __getattr__(name: str) -> object:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f"{__name__}.{_WHERE[name]}"), name)
