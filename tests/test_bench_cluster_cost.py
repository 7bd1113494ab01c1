"""The cluster leg's judged ratios (`bench.cluster.cost_ratios`): CPU per claim cycle, the nodes'
and etcd's members' together, straight to the leader over a single node's and through another node
over straight to the leader, with etcd's share given apart."""

from __future__ import annotations

import pytest

from bench.cluster import DIRECT_CPU_TARGET, FORWARDED_CPU_TARGET, Measured, cost_ratios


def measured(label: str, nodes_ms: float, etcd_ms: float) -> Measured:
    return Measured(label, 1000.0, 1.0, 2.0, nodes_ms, etcd_ms)


def test_direct_over_single_counts_etcd_and_gives_its_share_apart():
    single = measured("single", 0.175, 0.0)
    direct = measured("direct", 0.387, 0.380)
    forwarded = measured("forwarded", 0.863, 0.487)
    to_leader, through_another = cost_ratios(single, direct, forwarded)
    assert to_leader.ratio == pytest.approx(0.767 / 0.175)
    assert to_leader.target == DIRECT_CPU_TARGET
    assert "the nodes 2.21x, etcd's members 2.17x" in to_leader.figure
    assert through_another.ratio == pytest.approx(1.350 / 0.767)
    assert through_another.target == FORWARDED_CPU_TARGET
    assert through_another.figure.startswith("0.863 + 0.487 = 1.350 ms against 0.767 ms")
