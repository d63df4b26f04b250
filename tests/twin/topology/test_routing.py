"""Cluster graphs, link tiers and the tiers a collective crosses."""

import pytest

from twin.errors import TwinError
from twin.topology import CLUSTER_KINDS, DEVICES, Cluster, build_graph


def test_every_figure_names_a_source():
    for dev in DEVICES.values():
        for fig in (dev.peak_bf16_tflops, dev.hbm_gb, dev.hbm_bandwidth_gbs):
            assert fig.source and fig.value > 0
    for kind in CLUSTER_KINDS.values():
        for tier in kind.tiers:
            assert tier.bandwidth_gbs.source and tier.latency_us.source


def test_a3_cards_are_two_dies():
    cl = Cluster("a3", 128)
    assert cl.devices == 256 and cl.nodes == 16
    g = cl.graph
    assert sum(1 for _, d in g.nodes(data=True) if d["role"] == "device") == 256
    assert g.edges[("device", 0), ("device", 1)]["tier"] == "sio"  # the two dies of card 0
    assert cl.locality(0)[0] == cl.locality(1)[0] != cl.locality(2)[0]


def test_a2_node_is_a_full_hccs_mesh():
    g = build_graph("a2", 16)
    hccs = [(a, b) for a, b, d in g.edges(data=True) if d["tier"] == "hccs"]
    assert len(hccs) == 2 * 28  # 8 choose 2 per node
    assert g.nodes[("device", 9)]["node"] == 1


@pytest.mark.parametrize(("kind", "cards", "group", "tiers", "slowest_gbs"), [
    ("a3", 128, [0, 1], ["sio"], 204.0),
    ("a3", 128, [0, 2], ["ub"], 196.0),
    ("a3", 128, list(range(16)), ["sio", "ub"], 196.0),
    ("a3", 128, list(range(256)), ["sio", "ub"], 196.0),  # 128 cards stay inside one SuperPoD
    ("a3", 512, list(range(1024)), ["sio", "ub", "roce"], 20.0),  # 512 cards span two SuperPoDs
    ("a2", 16, list(range(8)), ["hccs"], 7 * 18.3),
    ("a2", 16, [0, 8], ["roce"], 20.0),
    ("a2", 16, list(range(16)), ["hccs", "roce"], 20.0),
    ("h100", 16, list(range(16)), ["nvlink", "ib"], 50.0),
])
def test_tiers_a_collective_crosses(kind, cards, group, tiers, slowest_gbs):
    cl = Cluster(kind, cards)
    uses = cl.tiers(group)
    assert [u.tier for u in uses] == tiers
    assert cl.bottleneck(group).bandwidth_gbs == pytest.approx(slowest_gbs)
    assert sum(u.peers for u in uses) == len(group) - 1


def test_pair_tier_matches_two_member_groups():
    cl = Cluster("a3", 512)
    for a, b in [(0, 1), (0, 5), (0, 40), (0, 900)]:
        assert cl.pair_tier(a, b) == cl.tiers([a, b])[-1].tier


def test_bad_inputs():
    with pytest.raises(TwinError, match="unknown cluster kind"):
        Cluster("tpu", 8)
    with pytest.raises(TwinError, match="outside the cluster"):
        Cluster("a2", 8).tiers([0, 8])


def test_sized_cluster_is_built_once_per_kind_and_size():
    from twin.topology.clusters import cluster_kind
    from twin.topology.routing import sized_cluster

    a3 = cluster_kind("a3")
    assert sized_cluster(a3, 8) is sized_cluster(a3, 8)
    assert sized_cluster(a3, 16) is not sized_cluster(a3, 8)
    assert sized_cluster(a3, 8).devices == 16
    assert sized_cluster(a3, 8).locality_array.tolist() == [list(sized_cluster(a3, 8).locality(r)) for r in range(16)]
