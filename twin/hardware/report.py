"""What `twin clusters` shows: every figure and every efficiency-curve point of a cluster kind, with its source."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

from rich.console import Console
from rich.table import Table

from twin.hardware.figures import Figure
from twin.hardware.specs import ClusterKind

Row = tuple[str, str, str, str]  # figure, value, confidence, source


def kind_json(kind: ClusterKind) -> dict:
    """The kind as its file format (so an entry can be edited and saved as a cluster file), plus derived counts."""
    out = kind.model_dump(mode="json", by_alias=True, exclude_none=True)
    out["devices_per_node"] = kind.devices_per_node
    return out


def _fig(label: str, fig: Figure, unit: str) -> Row:
    return label, f"{fig.value:g} {unit}", fig.confidence, fig.source


def figure_rows(kind: ClusterKind) -> Iterator[Row]:
    """Packaging, device, link tiers and hosts, one row per figure."""
    dev = kind.device
    pod = f", {kind.cards_per_pod} cards per pod" if kind.cards_per_pod else ""
    yield ("packaging", f"{kind.devices_per_card} devices per card, {kind.cards_per_node} cards per node{pod}", "",
           kind.packaging_source)
    for dtype, fig in dev.peak_tflops.items():
        yield _fig(f"{dev.name} peak {dtype}", fig, "TFLOPS")
    yield _fig(f"{dev.name} HBM", dev.hbm_gb, "GB")
    if dev.allocator_gb is not None:
        yield _fig(f"{dev.name} allocator capacity", dev.allocator_gb, "GB, what a run can fill")
    yield _fig(f"{dev.name} HBM bandwidth", dev.hbm_bandwidth_gbs, "GB/s")
    if dev.kv_block_tokens is not None:
        yield _fig(f"{dev.name} KV-cache block", dev.kv_block_tokens, "tokens, the engine's allocation unit")
    if dev.gemm_load_serial is not None:
        yield _fig(f"{dev.name} decode GEMM serial share", dev.gemm_load_serial,
                   "of its weight read and compute that do not overlap")
    roles = {kind.chip_tier: "chip", kind.node_tier: "node", kind.pod_tier: "pod", kind.scaleout_tier: "scale-out",
             "host": "host"}
    for t in kind.tiers:
        what = f"{t.name} ({roles.get(t.name, 'unused')}, {'switched' if t.switched else 'direct links'})"
        yield _fig(f"{what} bandwidth", t.bandwidth_gbs, "GB/s per direction")
        yield _fig(f"{t.name} latency", t.latency_us, "us")
    yield _fig("host memory per node", kind.host_memory_gb_per_node, "GB")
    if kind.host_memory_bandwidth_gbs_per_node is not None:
        yield _fig("host memory bandwidth per node", kind.host_memory_bandwidth_gbs_per_node, "GB/s, sustained")


def curve_rows(kind: ClusterKind) -> Iterator[tuple[str, str, str, str, str]]:
    """Every efficiency-curve point: curve, x, efficiency, confidence, source."""
    units = {"gemm": "FLOPs", "grouped_gemm": "tokens/expert", "attention": "tokens", "memory": "bytes"}
    for name, curve in kind.device.curves.items():
        for p in curve.points:
            yield f"{kind.device.name} {name}", f"{p.x:g} {units[name]}", f"{p.value:g}", p.confidence, p.source
    for t in kind.tiers:
        ops = Counter(c.collective for c in t.collective_efficiency)
        for c in t.collective_efficiency:
            peers = f"{c.peers} peer{'s' if c.peers > 1 else ''}" if ops[c.collective] > 1 else "any peers"
            for p in c.points:
                yield f"{t.name} {c.collective}, {peers}", f"{p.x:g} bytes", f"{p.value:g}", p.confidence, p.source


def print_kinds(console: Console, kinds: list[ClusterKind]) -> None:
    """A summary of the kinds, then every figure and curve point of each with its source."""
    summary = Table(title="Cluster kinds (1 device = 1 rank; A3: 1 card = 2 dies)")
    for col in ("kind", "device", "dev/card", "dev/node", "BF16 TFLOPS", "HBM GB", "usable GB", "HBM GB/s",
                "tiers GB/s"):
        summary.add_column(col)
    for k in kinds:
        dev = k.device
        summary.add_row(k.name, dev.name, str(k.devices_per_card), str(k.devices_per_node),
                        f"{dev.peak_bf16_tflops.value:g}", f"{dev.hbm_gb.value:g}", f"{dev.capacity_gb:g}",
                        f"{dev.hbm_bandwidth_gbs.value:g}",
                        ", ".join(f"{t.name} {t.bandwidth_gbs.value:g}" for t in k.tiers))
    console.print(summary)
    for k in kinds:
        figures = Table(title=f"{k.name}: {k.description}", title_justify="left")
        for col in ("figure", "value", "conf", "source"):
            figures.add_column(col, overflow="fold")
        for row in figure_rows(k):
            figures.add_row(*row)
        console.print(figures)
        curves = Table(title=f"{k.name}: efficiency curves (log-x linear between points, flat beyond them)",
                       title_justify="left")
        for col in ("curve", "x", "efficiency", "conf", "source"):
            curves.add_column(col, overflow="fold")
        previous = None
        for *cells, source in curve_rows(k):
            curves.add_row(*cells, "(as above)" if source == previous else source)
            previous = source
        console.print(curves)
    console.print("Confidence: H first-party or exact, M ambiguous first-party or third party, L folk or derived. "
                  "ascend-hardware.md = the project's shared/reference/ascend-hardware.md.")
