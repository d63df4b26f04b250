"""De-duplication of torch.distributed backend strings.

verl builds `f"cpu:gloo,{device}:{backend}"` (utils/distributed.py), which on the CPU platform reads
"cpu:gloo,cpu:gloo"; torch rejects a device type named twice. `install()` wraps
`torch.distributed.init_process_group` so that a repeated identical entry is dropped before torch
parses the string; conflicting entries for one device type are still an error.
"""

from __future__ import annotations

import functools
from typing import Any


def dedupe_backend(backend: Any) -> Any:
    """'cpu:gloo,cpu:gloo' -> 'cpu:gloo'; other values unchanged; ValueError on conflicting entries."""
    if not isinstance(backend, str) or "," not in backend:
        return backend
    chosen: dict[str, str] = {}
    for entry in (part.strip() for part in backend.split(",")):
        device, sep, name = entry.partition(":")
        if not sep:
            return backend
        if chosen.setdefault(device, name) != name:
            raise ValueError(f"backend {backend!r} names two backends for device {device!r}")
    return ",".join(f"{device}:{name}" for device, name in chosen.items())


def install() -> None:
    """Wrap torch.distributed.init_process_group with `dedupe_backend` (idempotent)."""
    import torch.distributed as dist

    original = dist.init_process_group
    if getattr(original, "_dedupes_backend", False):
        return

    @functools.wraps(original)
    def init_process_group(*args: Any, **kwargs: Any) -> Any:
        if args:
            args = (dedupe_backend(args[0]), *args[1:])
        if "backend" in kwargs:
            kwargs["backend"] = dedupe_backend(kwargs["backend"])
        return original(*args, **kwargs)

    init_process_group._dedupes_backend = True  # type: ignore[attr-defined]
    dist.init_process_group = init_process_group
