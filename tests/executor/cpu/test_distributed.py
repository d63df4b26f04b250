"""De-duplication of the backend string verl builds on the CPU platform."""

from __future__ import annotations

import pytest

from executor.cpu.distributed import dedupe_backend


@pytest.mark.parametrize(
    "backend, expected",
    [
        ("cpu:gloo,cpu:gloo", "cpu:gloo"),
        ("cpu:gloo, cuda:nccl", "cpu:gloo,cuda:nccl"),
        ("cpu:gloo,cuda:nccl,cpu:gloo", "cpu:gloo,cuda:nccl"),
        ("gloo", "gloo"),
        ("cpu:gloo", "cpu:gloo"),
        (None, None),
    ],
)
def test_dedupe_backend(backend: str | None, expected: str | None) -> None:
    assert dedupe_backend(backend) == expected


def test_conflicting_backends_for_one_device_are_an_error() -> None:
    with pytest.raises(ValueError, match="two backends for device 'cpu'"):
        dedupe_backend("cpu:gloo,cpu:mpi")
