"""Collectives on the hardware collective curves times the profile's per-tier scale (hand-derived numbers)."""

import pytest

from twin.cost_models.comm import collective_time, p2p_time
from twin.profile import reference_profile
from twin.topology import Cluster

A3 = Cluster("a3", 4)  # 8 dies: SIO inside a card, UB between cards
EP8 = list(range(8))


def test_ep_dispatch_follows_the_measured_ub_curve_and_its_scale():
    pf = reference_profile("a3")
    nbytes = 2.349e8  # 4096 tokens x top-8 x 7168 B, the curve's large-message point (EP8: 0.745 of 196 GB/s)
    assert collective_time(A3, pf, EP8, "ep_dispatch", nbytes) == pytest.approx(nbytes / (0.745 * 196e9), rel=1e-9)
    half = pf.with_values({"ub_efficiency_scale": 0.5}, "half")
    assert collective_time(A3, half, EP8, "ep_dispatch", nbytes) == pytest.approx(2 * nbytes / (0.745 * 196e9),
                                                                                    rel=1e-9)
    # combine at its own curve: 4.698e8 B at 0.638
    assert collective_time(A3, pf, EP8, "ep_combine", 4.698e8) == pytest.approx(4.698e8 / (0.638 * 196e9), rel=1e-9)


def test_small_ep_call_never_costs_less_than_the_fixed_all_to_all_cost():
    pf = reference_profile("a3")
    fixed = (pf["a2a_base_latency_us"] + 7 * pf["a2a_per_peer_latency_us"]) * 1e-6
    # the UB call is floored at `fixed`; the SIO peer's share (1 of 7 peers) adds its bytes to the same fixed cost
    sio = 1e3 / 7 / 204e9 + fixed
    assert collective_time(A3, pf, EP8, "ep_dispatch", 1e3) == pytest.approx(sio, rel=1e-12)


def test_all_reduce_uses_the_tier_curve_and_scale():
    pf = reference_profile("a3").with_values({"sio_efficiency_scale": 0.8}, "s")
    nbytes = 1e8  # two dies of one card: SIO, flat curve at 1.0, one mesh step each way
    lat = pf["collective_step_latency_us"] * 1e-6 + A3.kind.tier("sio").latency_s
    expected = 2 * 0.5 * nbytes / (204e9 * 0.8) + 2 * lat
    assert collective_time(A3, pf, [0, 1], "all_reduce", nbytes) == pytest.approx(expected, rel=1e-9)
    assert p2p_time(A3, pf, 0, 1, nbytes) == pytest.approx(nbytes / (204e9 * 0.8) + lat, rel=1e-9)


def test_a_broadcast_over_whole_nodes_splits_over_their_nics_and_one_alone_on_its_node_does_not():
    pf = reference_profile("h20")
    h20 = Cluster("h20", 32)  # four nodes of 8 GPUs: NVLink 450 GB/s at 0.6, IB 50 GB/s a GPU at 0.9
    nbytes = 8e9
    nvlink_lat, ib_lat = (pf["collective_step_latency_us"] * 1e-6 + h20.kind.tier(t).latency_s
                          for t in ("nvlink", "ib"))
    # every GPU receives the whole 8 GB over NVLink (log2 8 = 3 steps); between the four nodes each of a node's 8
    # GPUs carries an eighth over its own NIC (log2 4 = 2 steps)
    whole_nodes = nbytes / (450e9 * 0.6) + 3 * nvlink_lat + nbytes / 8 / (50e9 * 0.9) + 2 * ib_lat
    assert collective_time(h20, pf, list(range(32)), "broadcast", nbytes) == pytest.approx(whole_nodes, rel=1e-9)
    # the root alone of the group on its node (verl 0.8's checkpoint engine: trainer rank 0 to the rollout ranks on
    # the next two nodes) has one NIC: the whole message crosses it
    alone = nbytes / (50e9 * 0.9) + 2 * ib_lat
    assert collective_time(h20, pf, [0, *range(8, 24)], "broadcast", nbytes) == pytest.approx(alone, rel=1e-9)
