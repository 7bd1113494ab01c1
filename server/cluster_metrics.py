"""A cluster node's metrics: each partition's role here, how far this node is behind its leader,
leader changes and takeovers, the session with etcd, and the time etcd takes to answer.

Read at scrape time from the node's `Cluster` (`cluster_families`), except etcd's latency, which
is counted as it happens (`EtcdLatency`: the client tells it each answered attempt, by route:
`txn` for the journal's batches and campaigns, `range`, `keepalive`...). A single node exports
none of these.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator

from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from . import cluster_view

if TYPE_CHECKING:
    from .cluster import Cluster

__all__ = ["cluster_families", "EtcdLatency"]

# etcd answers in milliseconds when healthy; a write caught in its leader's election waits seconds.
ETCD_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


class EtcdLatency:
    """`runstate_etcd_request_duration_seconds{request}`, fed by `EtcdClient.on_attempt`."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._histogram = Histogram(
            "runstate_etcd_request_duration_seconds", "Time etcd took to answer one request of this node, by request "
            "(txn: the journal's batches and campaigns; range: reads of the log; keepalive: the session).",
            ["request"], buckets=ETCD_BUCKETS_S, registry=registry,
        )
        self._children: dict[str, Histogram] = {}

    def __call__(self, path: str, seconds: float) -> None:
        child = self._children.get(path)
        if child is None:
            name = path.rsplit("/", 1)[-1]  # /v3/kv/txn -> txn, /v3/lease/keepalive -> keepalive
            child = self._children[path] = self._histogram.labels(name)
        child.observe(seconds)


def cluster_families(cluster: "Cluster") -> Iterator[Metric]:
    leader = GaugeMetricFamily("runstate_cluster_partition_leader", "1 where this node leads the partition and serves it, else 0 "
                               "(it follows it: its requests go to the leader).", labels=["partition"])
    applied = GaugeMetricFamily("runstate_cluster_partition_applied_lsn", "The last LSN of the partition this node has applied.",
                                labels=["partition"])
    lag = GaugeMetricFamily("runstate_cluster_partition_lag_records", "Records this node is behind the partition's leader, as "
                            "the leader last published (every 2 s); 0 where it leads.", labels=["partition"])
    changes = CounterMetricFamily("runstate_cluster_leader_changes", "Times this node saw the partition get a new leader "
                                  "(a failover or a hand-over).", labels=["partition"])
    takeovers = CounterMetricFamily("runstate_cluster_takeovers", "Times this node took the partition over.", labels=["partition"])
    log_bytes = GaugeMetricFamily("runstate_cluster_log_bytes", "Bytes of the partition's log in etcd, as this node knows them "
                                  "(trimmed below the snapshots; see cluster_log_bytes_max).", labels=["partition"])
    written = CounterMetricFamily("runstate_cluster_log_written_bytes", "Bytes of the partition's log this node applied or "
                                  "committed since it started.", labels=["partition"])
    for number, follower in sorted(cluster.followers.items()):
        label = [str(number)]
        leader.add_metric(label, 1 if cluster.leads(number) else 0)
        applied.add_metric(label, follower.next_lsn - 1)
        behind = cluster_view.lag(cluster, number)
        if behind is not None:
            lag.add_metric(label, behind)
        changes.add_metric(label, follower.leader_changes)
        takeovers.add_metric(label, follower.takeovers)
        log_bytes.add_metric(label, follower.log_bytes)
        written.add_metric(label, follower.written_bytes)
    yield from (leader, applied, lag, changes, takeovers, log_bytes, written)
    compacted = GaugeMetricFamily("runstate_etcd_compacted_revision", "The revision below which this node last compacted "
                                  "etcd's history (0: it has not; the leader of partition 0 does it).")
    compacted.add_metric([], cluster.compacted_revision)
    yield compacted
    session = cluster.session
    up = GaugeMetricFamily("runstate_cluster_session_up", "1 while this node's session with etcd is alive (its deadline not passed).")
    up.add_metric([], 1 if session is not None and session.alive else 0)
    yield up
    sessions = CounterMetricFamily("runstate_cluster_sessions", "Sessions this node opened with etcd (more than one: a session was lost).")
    sessions.add_metric([], cluster.sessions)
    yield sessions
    nodes = GaugeMetricFamily("runstate_cluster_nodes", "Live nodes of the cluster, as this node sees them.")
    nodes.add_metric([], len(cluster.nodes))
    yield nodes
