"""Cluster kinds and the networkx graphs built from them.

Each kind names its device, how devices group into cards (chips), nodes and pods, and its link tiers.
`build_graph` returns a networkx graph whose nodes are devices, hosts and switches and whose edges carry
`tier`, `bandwidth_gbs` (per direction) and `latency_us`. Link figures name their source; the
calibration profile scales them, it never replaces the topology.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Literal

import networkx as nx
from pydantic import BaseModel, ConfigDict, Field

from twin.errors import TwinError
from twin.topology.devices import DEVICES, DeviceSpec, Figure

_HW = "../shared/reference/ascend-hardware.md"

TierName = Literal["sio", "hccs", "ub", "nvlink", "roce", "ib", "shm", "host"]


class LinkTier(BaseModel):
    """One class of link: its per-direction bandwidth per link and its latency."""

    model_config = ConfigDict(frozen=True)

    name: TierName
    bandwidth_gbs: Figure
    latency_us: Figure
    switched: bool  # True: each device has one port into a switch; False: direct device-to-device links


class ClusterKind(BaseModel):
    """A kind of cluster: device, packaging and link tiers."""

    model_config = ConfigDict(frozen=True)

    name: str
    description: str
    device: str
    devices_per_card: int = Field(ge=1)
    cards_per_node: int = Field(ge=1)
    cards_per_pod: int | None = None  # A3 SuperPoD: 384 chips on one UB fabric
    chip_tier: TierName | None = None  # between the dies of one card
    node_tier: TierName  # between devices of one node
    pod_tier: TierName | None = None  # between nodes of one pod
    scaleout_tier: TierName  # between nodes (or pods)
    tiers: tuple[LinkTier, ...]
    host_memory_gb_per_node: Figure
    # cann-recipes-train: on multi-node NPU, vLLM sleep mode does not release device memory
    vllm_sleep_frees_memory: bool = True

    @property
    def devices_per_node(self) -> int:
        return self.devices_per_card * self.cards_per_node

    @property
    def device_spec(self) -> DeviceSpec:
        return DEVICES[self.device]

    def tier(self, name: str) -> LinkTier:
        for t in self.tiers:
            if t.name == name:
                return t
        raise KeyError(name)


def _tier(name: TierName, bw: float, bw_src: str, lat: float, lat_src: str, switched: bool) -> LinkTier:
    return LinkTier(
        name=name,
        bandwidth_gbs=Figure(value=bw, source=bw_src),
        latency_us=Figure(value=lat, source=lat_src),
        switched=switched,
    )


_HCCL_LAT = f"HCCL RDMA fixed latency about 7 us, task_profiling.h ({_HW})"
_ROCE_A = _tier("roce", 20.0, f"HCCL device_capacity.cc: 20 GB/s effective per NPU, 200 GbE NIC ({_HW})", 7.0,
                _HCCL_LAT, True)
_HOST_MEM = Figure(value=1500, source=f"not published; recipes report 1.5-2 TB needed for 671B offload ({_HW})")
_GPU_HOST_MEM = Figure(value=2000, source="DGX H100/H200 system memory, 2 TB")
_NVLINK_LAT = "NVLink/NVSwitch hop latency, order of 1 us (NCCL tests)"
_IB_LAT = "InfiniBand RDMA latency, order of 2-5 us (NCCL tests)"

CLUSTER_KINDS: dict[str, ClusterKind] = {
    k.name: k
    for k in (
        ClusterKind(
            name="a2",
            description="Atlas 800T A2: 8 x 910B per node, HCCS full mesh, one 200 GbE RoCE port per NPU",
            device="910b",
            devices_per_card=1,
            cards_per_node=8,
            node_tier="hccs",
            scaleout_tier="roce",
            tiers=(
                _tier("hccs", 18.3, f"HCCL device_capacity.cc per-link figure; 8-NPU all_gather bus bw "
                      f"130 GB/s = 7 x 18.6 ({_HW})", 7.0, _HCCL_LAT, False),
                _ROCE_A,
                _tier("host", 54.4, f"HCCL device_capacity.cc PCIe Gen5 x16 effective ({_HW})", 10.0,
                      "PCIe DMA setup, order of 10 us", True),
            ),
            host_memory_gb_per_node=_HOST_MEM,
            vllm_sleep_frees_memory=False,
        ),
        ClusterKind(
            name="a3",
            description="Atlas 900 A3 SuperPoD: 910C cards of 2 dies (SIO), 8 cards per node, UB Clos over "
            "384 cards, RoCE between SuperPoDs",
            device="a3-die",
            devices_per_card=2,
            cards_per_node=8,
            cards_per_pod=384,
            chip_tier="sio",
            node_tier="ub",
            pod_tier="ub",
            scaleout_tier="roce",
            tiers=(
                _tier("sio", 204.0, f"HCCL source: 240 x 0.85 GB/s between the dies of a 910C ({_HW})", 1.0,
                      "on-package link, sub-microsecond", False),
                _tier("ub", 196.0, f"UB 392 GB/s per chip unidirectional = 196 per die, CloudMatrix384 "
                      f"({_HW})", 1.0, f"< 1 us between nodes, CloudMatrix384 ({_HW})", True),
                _tier("roce", 20.0, f"HCCL: 20 GB/s effective per die, 400 Gb/s per chip ({_HW})", 7.0,
                      _HCCL_LAT, True),
                _tier("host", 54.4, f"not published for A3 (copies go over UB, {_HW}); PCIe Gen5 x16 "
                      "effective assumed until calibrated", 10.0, "PCIe DMA setup, order of 10 us", True),
            ),
            host_memory_gb_per_node=_HOST_MEM,
            vllm_sleep_frees_memory=False,
        ),
        ClusterKind(
            name="cpu",
            description="one host whose trainer ranks are the devices (gloo over loopback); for the CPU runs "
            "of the executor, calibrated only by the calibration jobs",
            device="cpu-rank",
            devices_per_card=1,
            cards_per_node=64,
            node_tier="shm",
            scaleout_tier="shm",
            tiers=(
                _tier("shm", 1.0, "nominal unit: gloo over loopback, scaled by the profile from the "
                      "calibration collectives job", 50.0, "gloo call latency, order of 50 us", True),
                _tier("host", 10.0, "nominal unit: host memcpy, scaled by the profile from the calibration "
                      "copy job", 1.0, "memcpy call overhead", True),
            ),
            host_memory_gb_per_node=Figure(value=24, source="this project's CI machines: 24 GiB"),
        ),
        *(
            ClusterKind(
                name=gpu,
                description=f"8 x {gpu.upper()} per node on NVSwitch, one InfiniBand port per GPU",
                device=gpu,
                devices_per_card=1,
                cards_per_node=8,
                node_tier="nvlink",
                scaleout_tier="ib",
                tiers=(
                    _tier("nvlink", nvl, f"{gpu.upper()} NVLink per direction ({_HW})", 1.0, _NVLINK_LAT, True),
                    _tier("ib", ib, f"{ib * 8:.0f} Gb/s InfiniBand per GPU ({_HW})", 3.0, _IB_LAT, True),
                    _tier("host", 55.0, "PCIe Gen5 x16 effective (Gen4 on A100: 25 GB/s)", 10.0,
                          "PCIe DMA setup, order of 10 us", True),
                ),
                host_memory_gb_per_node=_GPU_HOST_MEM,
            )
            for gpu, nvl, ib in (("a100", 300.0, 25.0), ("h100", 450.0, 50.0), ("h200", 450.0, 50.0),
                                 ("h20", 450.0, 50.0))
        ),
    )
}


def cluster_kind(name: str) -> ClusterKind:
    try:
        return CLUSTER_KINDS[name]
    except KeyError:
        raise TwinError(f"unknown cluster kind {name!r}; known: {', '.join(CLUSTER_KINDS)}") from None


def device_node(rank: int) -> tuple[str, int]:
    return ("device", rank)


@lru_cache(maxsize=16)
def build_graph(kind_name: str, cards: int) -> nx.Graph:
    """The cluster graph for `cards` cards of `kind_name` (cached; treat as read-only)."""
    kind = cluster_kind(kind_name)
    if cards < 1:
        raise TwinError(f"--cards must be at least 1, got {cards}")
    g = nx.Graph(kind=kind.name, cards=cards)
    per_card, per_node = kind.devices_per_card, kind.devices_per_node
    devices = cards * per_card
    nodes = -(-devices // per_node)
    pod_cards = kind.cards_per_pod or cards
    t = {tier.name: tier for tier in kind.tiers}

    def link(a: object, b: object, tier: str, count: int = 1) -> None:
        g.add_edge(a, b, tier=tier, bandwidth_gbs=t[tier].bandwidth_gbs.value * count,
                   latency_us=t[tier].latency_us.value)

    spine = ("switch", kind.scaleout_tier, "spine")
    g.add_node(spine, role="switch", tier=kind.scaleout_tier)
    for n in range(nodes):
        host = ("host", n)
        g.add_node(host, role="host", node=n)
        leaf = ("switch", kind.scaleout_tier, "leaf", n)
        g.add_node(leaf, role="switch", tier=kind.scaleout_tier)
        local = range(n * per_node, min(devices, (n + 1) * per_node))
        link(leaf, spine, kind.scaleout_tier, count=len(local))
        if t[kind.node_tier].switched:
            node_switch = ("switch", kind.node_tier, n)
            g.add_node(node_switch, role="switch", tier=kind.node_tier)
        for r in local:
            card = r // per_card
            pod = card // pod_cards
            g.add_node(device_node(r), role="device", rank=r, card=card, node=n, pod=pod)
            link(device_node(r), host, "host")
            link(device_node(r), leaf, kind.scaleout_tier)
            if t[kind.node_tier].switched:
                link(device_node(r), node_switch, kind.node_tier)
            else:
                for peer in range(local.start, r):
                    link(device_node(peer), device_node(r), kind.node_tier)
            if kind.chip_tier and r % per_card:
                link(device_node(r - 1), device_node(r), kind.chip_tier)
        if kind.pod_tier and t[kind.pod_tier].switched:
            pod = (n * per_node // per_card) // pod_cards
            pod_switch = ("switch", kind.pod_tier, "pod", pod)
            g.add_node(pod_switch, role="switch", tier=kind.pod_tier)
            link(node_switch, pod_switch, kind.pod_tier, count=len(local))
    return g
