"""What a cluster node says about the cluster: the map and the nodes (`GET /v1/cluster`), whether it
can serve (`/healthz`), why a request's partition is not served through it (a 503), and how far
each node is behind each partition's leader.

Each is read from the node's `Cluster` at one moment, with no await, so an answer is one view:
the map and what each node leads come from the same leader keys (the node's watch on them).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal, NamedTuple

import trio

if TYPE_CHECKING:
    from .cluster import Cluster

__all__ = [
    "applied", "etcd_trouble", "lag", "readiness", "status", "unserved",
    "ClusterMapView", "PartitionView", "LeaderView", "StandbyView", "NodeView",
]

# What etcd's members said in their failed attempts this recently counts in `etcd_trouble`.
TROUBLE_S = 5.0


def applied(cluster: "Cluster", number: int, node: str) -> int | None:
    """How far `node` has applied partition `number`: this node's own point, or what `node` last
    published (every PUBLISH_EVERY_S; None when it has said nothing)."""
    if node == cluster.node_id:
        return _own(cluster, number)
    value = cluster.nodes.get(node, {}).get("applied", {}).get(str(number))
    return None if value is None else int(value)


def lag(cluster: "Cluster", number: int) -> int | None:
    """How many records this node is behind the leader of `number` (0 when it leads it; None
    while the partition has no leader or the leader has said nothing yet)."""
    leader = cluster.followers[number].leader
    if leader is None:
        return None
    if leader.node == cluster.node_id:
        return 0
    newest = applied(cluster, number, leader.node)
    return None if newest is None else max(0, newest - _own(cluster, number))


def _own(cluster: "Cluster", number: int) -> int:
    """How far this node has applied partition `number`."""
    return cluster.followers[number].next_lsn - 1


class LeaderView(NamedTuple):
    """A partition's leader: its node, the URL it serves at (None: not known, or a single node), its epoch."""

    node: str
    url: str | None
    epoch: int


class StandbyView(NamedTuple):
    """A node that does not lead a partition: how far it has applied it, and how many records it
    is behind the leader (None when either has said nothing yet)."""

    node: str
    applied_lsn: int | None
    lag_records: int | None


class PartitionView(NamedTuple):
    """One partition of the map: its leader (None while it has none), the leader's last LSN and
    this node's, the newest snapshot here, how often its leadership moved, and its standbys."""

    partition: int
    leader: LeaderView | None
    leader_lsn: int | None
    applied_lsn: int
    snapshot_lsn: int
    failovers: int
    handoffs: int
    takeovers: int
    log_bytes: int
    standbys: tuple[StandbyView, ...]


class NodeView(NamedTuple):
    """A node: its URL, the partitions it leads, whether it is live, and how far it last said it
    has applied and snapshotted each partition (by number)."""

    node: str
    url: str | None
    leads: tuple[int, ...]
    live: bool
    applied: dict[str, int]
    snapshots: dict[str, int]


class ClusterMapView(NamedTuple):
    """`GET /v1/cluster`: the cluster's name (None on a single node), this node, the partitions'
    count and hash (`layout`), the map and the nodes."""

    cluster: str | None
    node: str
    partitions: int
    layout: Literal["crc32"]
    map: tuple[PartitionView, ...]
    nodes: tuple[NodeView, ...]


def status(cluster: "Cluster") -> ClusterMapView:
    """The partition map and the nodes, as `GET /v1/cluster` answers it: each partition's
    leader, its last LSN, and how far behind it each standby is (from what the nodes last
    published: at most PUBLISH_EVERY_S old).

    One view, made at once (no await): what each node leads is read from the same leader keys
    as the map (this node's watch on them), never from what the nodes last published, which
    may be a moment old and name a partition another node leads now. So the nodes' LEADS and
    the map agree, and no partition is listed under two nodes."""
    partitions = []
    leads: dict[str, list[int]] = {}
    for number, follower in sorted(cluster.followers.items()):
        leader = follower.leader
        if leader is not None:
            leads.setdefault(leader.node, []).append(number)
        newest = None if leader is None else applied(cluster, number, leader.node)
        standbys = []
        for node in sorted(set(cluster.nodes) | {cluster.node_id}):
            if leader is not None and node == leader.node:
                continue
            point = applied(cluster, number, node)
            standbys.append(StandbyView(node, point, None if newest is None or point is None else max(0, newest - point)))
        partitions.append(PartitionView(
            number, None if leader is None else LeaderView(leader.node, leader.url, leader.epoch), newest, follower.next_lsn - 1,
            follower.store.snapshot_lsn, follower.failovers, follower.handoffs, follower.takeovers, follower.log_bytes, tuple(standbys),
        ))
    nodes = []
    urls = {leader.node: leader.url for f in cluster.followers.values() if (leader := f.leader) is not None}
    for node in sorted(set(cluster.nodes) | set(leads) | {cluster.node_id}):
        value = cluster.nodes.get(node, {})
        url = cluster.advertise if node == cluster.node_id else value.get("url", urls.get(node))
        nodes.append(NodeView(
            node, url, tuple(leads.get(node, [])), node in cluster.nodes or node == cluster.node_id,
            value.get("applied", {}), value.get("snapshots", {}),
        ))
    return ClusterMapView(cluster.name, cluster.node_id, cluster.partitions, "crc32", tuple(partitions), tuple(nodes))


def readiness(cluster: "Cluster") -> str | None:
    """Why this node cannot serve now, or None: its session is alive, every partition has a
    leader, and it serves every partition that names it as leader."""
    session = cluster.session
    if session is None:
        return "this node has no session with etcd yet"
    if not session.alive:
        return f"this node has no session with etcd now: {etcd_trouble(cluster)}"
    leaderless = [n for n, f in cluster.followers.items() if f.leader is None]
    if leaderless:
        return f"partition(s) {', '.join(map(str, leaderless))} have no leader yet"
    not_served = [n for n, f in cluster.followers.items() if f.leader is not None and f.leader.node == cluster.node_id
                  and not cluster.leads(n)]
    if not_served:
        return f"partition(s) {', '.join(map(str, not_served))} are led by this node, which does not serve them yet"
    return None


def unserved(cluster: "Cluster", number: int) -> str:
    """Why no node serves partition `number` for this one now, as a request's 503 says it."""
    session, leader = cluster.session, cluster.followers[number].leader
    if session is None or not session.alive:
        return (f"partition {number} cannot be served through this node now: {etcd_trouble(cluster)}; "
                "its requests wait for that to pass. Try again")
    if leader is None:
        return f"partition {number} has no leader now (a failover is under way); try again"
    if leader.node == cluster.node_id:
        return f"partition {number}: this node is taking it over and does not serve it yet; try again"
    return f"partition {number}: its leader {leader.node} cannot be reached from this node now; try again"


def etcd_trouble(cluster: "Cluster") -> str:
    """What this node's session with etcd lacks now (for answers and /healthz)."""
    session = cluster.session
    if session is None:
        return "this node has not opened its session with etcd yet"
    if session.lost.is_set():
        return f"this node's session with etcd ended ({session.lost_reason}); a new one is being opened"
    lapsed_s = max(0.0, trio.current_time() - session.deadline)
    said = cluster.etcd.trouble(within_s=TROUBLE_S) + [str(session.last_error or "")]
    if any("no leader" in reason for reason in said):
        why = "etcd has no leader (the members that answer have lost their quorum)"
    else:
        why = "etcd's members do not answer this node"
    return f"{why}: no keepalive of this node's session answered for {lapsed_s:.1f} s past its deadline"
