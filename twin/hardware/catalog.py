"""The shipped device and cluster files, and users' cluster files (by name or by path)."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from twin.errors import TwinError
from twin.fileio import read_mapping, validated
from twin.hardware.specs import ClusterKind, DeviceSpec


def _shipped(folder: str) -> list[tuple[str, dict]]:
    """(label, mapping) of each shipped file in `folder` (read with libyaml's loader where it is built)."""
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    root = resources.files("twin.hardware").joinpath("data", folder)
    out = []
    for f in sorted((f for f in root.iterdir() if f.name.endswith(".yaml")), key=lambda f: f.name):
        label = f"shipped {folder[:-1]} file {f.name}"
        raw = yaml.load(f.read_text(), Loader=loader)
        if not isinstance(raw, dict):
            raise TwinError(f"{label}: expected a mapping at the top level")
        out.append((label, raw))
    return out


def _load_devices() -> dict[str, DeviceSpec]:
    out: dict[str, DeviceSpec] = {}
    for label, raw in _shipped("devices"):
        dev = validated(DeviceSpec, raw, label)
        out[dev.name] = dev
    return out


_VENDOR_ORDER = ("huawei", "host", "nvidia")  # Ascend kinds first, then the CPU runs, then the GPU kinds


def _load_clusters() -> dict[str, ClusterKind]:
    kinds = [validated(ClusterKind, raw, label) for label, raw in _shipped("clusters")]
    rank = {v: i for i, v in enumerate(_VENDOR_ORDER)}
    kinds.sort(key=lambda k: (rank.get(k.device.vendor, len(rank)), k.name))
    return {k.name: k for k in kinds}


DEVICES: dict[str, DeviceSpec] = _load_devices()
CLUSTER_KINDS: dict[str, ClusterKind] = _load_clusters()
_USER: dict[tuple[str, float], ClusterKind] = {}


def is_cluster_file(ref: str) -> bool:
    """Whether `ref` names a cluster file rather than a shipped kind."""
    return ref.endswith((".yaml", ".yml")) or "/" in ref


def resolve_cluster_ref(ref: str, base_dir: Path | str | None = None) -> str:
    """A kind name as given; a file path made absolute (relative to `base_dir` when it exists there)."""
    if not is_cluster_file(ref):
        return ref
    path = Path(ref).expanduser()
    if not path.is_absolute() and base_dir is not None and (Path(base_dir) / path).exists():
        path = Path(base_dir) / path
    return str(path.resolve())


def load_cluster_file(path: Path | str) -> ClusterKind:
    """A user's cluster kind from a YAML file; `device` may be a shipped device's name, a mapping, or a
    device file relative to the cluster file. A malformed file is a one-line TwinError naming the field."""
    path = Path(path)
    label = f"cluster file {path}"
    if not path.exists():
        raise TwinError(f"{label}: no such file")  # a directory, device or FIFO: read_mapping says which
    key = (str(path.resolve()), path.stat().st_mtime)
    if key in _USER:
        return _USER[key]
    raw = read_mapping(path, label, "yaml")
    dev = raw.get("device")
    if isinstance(dev, str) and is_cluster_file(dev):
        dev_path = (path.parent / dev).resolve()
        dev_label = f"device file {dev_path} (from {label})"
        raw = {**raw, "device": validated(DeviceSpec, read_mapping(dev_path, dev_label, "yaml"), dev_label)}
    kind = validated(ClusterKind, raw, label)
    _USER[key] = kind
    return kind


def cluster_kind(ref: str | ClusterKind, base_dir: Path | str | None = None) -> ClusterKind:
    """A shipped cluster kind by name, or a cluster file (path relative to `base_dir`, else the cwd)."""
    if isinstance(ref, ClusterKind):
        return ref
    if ref in CLUSTER_KINDS:
        return CLUSTER_KINDS[ref]
    if is_cluster_file(ref):
        return load_cluster_file(resolve_cluster_ref(ref, base_dir))
    raise TwinError(f"unknown cluster kind {ref!r}; known: {', '.join(CLUSTER_KINDS)} (or a cluster YAML file)")


def device_spec(name: str) -> DeviceSpec:
    try:
        return DEVICES[name]
    except KeyError:
        raise TwinError(f"unknown device {name!r}; known: {', '.join(DEVICES)}") from None
