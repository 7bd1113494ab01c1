"""The cluster leg's ratios (`bench.cluster.cost_ratios`): CPU per claim cycle, the nodes' and
etcd's members' together, straight to the leader over a single node's and through another node
over straight to the leader, judged at the leg's 16 connections with etcd's share given apart;
with many callers, straight to the leader over a single node's beside it, shown and not judged;
and each row's parts of the nodes' CPU (the leader, the node forwarding, each standby)."""

from __future__ import annotations

import pytest

from bench.cluster import (
    CONCURRENCY, CONCURRENCY_MANY, DIRECT, DIRECT_CPU_TARGET, FORWARDED, FORWARDED_CPU_TARGET, SINGLE, Measured, cost_ratios,
)


def measured(label: str, nodes_ms: float, etcd_ms: float, connections: int = CONCURRENCY) -> Measured:
    return Measured(label, 1000.0, 1.0, 2.0, nodes_ms, etcd_ms, 0.0, connections)


def test_direct_over_single_counts_etcd_and_gives_its_share_apart():
    rows = [measured(SINGLE, 0.175, 0.0), measured(DIRECT, 0.387, 0.380), measured(FORWARDED, 0.863, 0.487)]
    to_leader, through_another = cost_ratios(rows)
    assert to_leader.ratio == pytest.approx(0.767 / 0.175)
    assert to_leader.target == DIRECT_CPU_TARGET
    assert "the nodes 2.21x, etcd's members 2.17x" in to_leader.figure
    assert through_another.ratio == pytest.approx(1.350 / 0.767)
    assert through_another.target == FORWARDED_CPU_TARGET
    assert through_another.figure.startswith("0.863 + 0.487 = 1.350 ms against 0.767 ms")


def test_with_many_callers_each_ratio_takes_the_rows_of_its_own_connections():
    rows = [
        measured(SINGLE, 0.188, 0.0), measured(SINGLE, 0.197, 0.0, CONCURRENCY_MANY),
        measured(DIRECT, 0.507, 0.479), measured(FORWARDED, 0.815, 0.474), measured(DIRECT, 0.282, 0.114, CONCURRENCY_MANY),
    ]
    judged, _, many = cost_ratios(rows)
    assert judged.ratio == pytest.approx(0.986 / 0.188)
    assert many.ratio == pytest.approx(0.396 / 0.197)
    assert many.target is None
    assert many.leg.endswith(f"{CONCURRENCY_MANY} conn")


def test_a_row_names_the_parts_of_the_nodes_cpu_it_measured_apart():
    forwarded = Measured(FORWARDED, 1000.0, 1.0, 2.0, 0.861, 0.479, 0.075, CONCURRENCY, 0.382, 0.404)
    assert forwarded.figure().endswith(
        "server CPU 0.861 ms/cycle (of which 0.382 ms the leader, 0.404 ms the node forwarding, 0.075 ms each standby) + etcd 0.479 ms")
    direct = Measured(DIRECT, 1000.0, 1.0, 2.0, 0.427, 0.408, 0.063, CONCURRENCY, 0.301)
    assert "(of which 0.301 ms the leader, 0.063 ms each standby)" in direct.figure()
    assert "of which" not in measured(SINGLE, 0.175, 0.0).figure()
