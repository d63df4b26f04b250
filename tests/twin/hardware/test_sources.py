"""Every figure and every curve point of every shipped hardware file names its source and confidence."""

from importlib import resources

import yaml

from twin.hardware import CLUSTER_KINDS, DEVICES


def _numbers(node, path=""):
    """(path, mapping) of every mapping that holds a numeric `value` (a figure or a curve point)."""
    if isinstance(node, dict):
        if isinstance(node.get("value"), (int, float)) and not isinstance(node.get("value"), bool):
            yield path, node
        for k, v in node.items():
            yield from _numbers(v, f"{path}.{k}")
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _numbers(v, f"{path}.{i}")


def test_every_figure_and_point_has_a_source():
    root = resources.files("twin.hardware").joinpath("data")
    files = [f for d in ("devices", "clusters") for f in root.joinpath(d).iterdir() if f.name.endswith(".yaml")]
    assert len(files) == len(DEVICES) + len(CLUSTER_KINDS) >= 14
    seen = 0
    for f in files:
        raw = yaml.safe_load(f.read_text())
        for path, fig in _numbers(raw):
            assert str(fig.get("source", "")).strip(), f"{f.name}{path} has no source"
            assert fig.get("confidence") in ("H", "M", "L"), f"{f.name}{path} has no confidence"
            seen += 1
        if f.parent.name == "clusters":
            assert raw["packaging_source"].strip()
    assert seen > 200  # the walk reached the curves too


def test_every_device_has_every_curve_and_every_tier_a_curve():
    for dev in DEVICES.values():
        assert set(dev.curves) == {"gemm", "grouped_gemm", "attention", "memory"}
    for kind in CLUSTER_KINDS.values():
        assert all(t.collective_efficiency for t in kind.tiers)
