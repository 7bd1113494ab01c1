"""Keeping each partition's log in etcd short, and etcd's database with it (docs/cluster.md, "etcd's size").

- What a node knows the log holds: every batch it applied or committed, (first LSN, bytes), until
  it sees the batch deleted (`grew`, `trimmed`); published as `runstate_cluster_log_bytes`.
- Snapshots by bytes are the local copies' (`Store`, `snapshot_every_bytes`: the partition's share
  of the node's `log_bytes_max`), published with the node's key.
- Trimming (`keep_trimming`): every `trim_every_s` each leader deletes the batches of its
  partitions below the oldest snapshot a live node has published, fenced on its epoch; past
  `LOG_SHARE_OVER` times the partition's share, below its own snapshot (`trim_floor`).
- Compaction (`compact`): the leader of partition 0 then compacts etcd's history below the
  revision it saw one round before, so that the batches trimmed leave etcd's database.
- A node whose copy ends before the oldest batch the log still holds takes a peer's snapshot
  (`bootstrap`, `keep_snapshot`), then reads the log from there.
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING

import httpx
import trio

from ..snapshots.datadir import partition_dir
from ..snapshots.etcd import Compare, EtcdCompacted, EtcdError, Op
from ..snapshots.recovery import RecoveryError, snapshot_dir

if TYPE_CHECKING:
    from .cluster import Cluster, _Follower

__all__ = ["LOG_SHARE_OVER", "SECRET_HEADER", "bootstrap", "compact", "grew", "keep_snapshot", "keep_trimming",
           "trim_below", "trim_floor", "trimmed"]

log = logging.getLogger("runstate.cluster")

# What a node shows a peer it asks for a snapshot: the cluster's secret (`GET /v1/cluster/partitions/{n}/snapshot`).
SECRET_HEADER = "x-runstate-cluster-secret"
# A partition's log past this many times its share of `log_bytes_max` is trimmed below the leader's
# own snapshot, leaving out the nodes whose snapshots are older (a node that cannot snapshot, say):
# one slow node does not make etcd grow without end. Such a node, restarted, may need a peer's
# snapshot (`bootstrap`); one that keeps applying the log needs nothing.
LOG_SHARE_OVER = 2


def grew(follower: "_Follower", first_lsn: int, size: int) -> None:
    """The log in etcd holds one more batch, of `size` bytes, at `first_lsn`."""
    sizes = follower.log_sizes
    while sizes and sizes[-1][0] >= first_lsn:  # read again (this node's copy was read anew)
        follower.log_bytes -= sizes.pop()[1]
    sizes.append((first_lsn, size))
    follower.log_bytes += size
    follower.written_bytes += size


def trimmed(follower: "_Follower", lsn: int) -> None:
    """The batch at `lsn`, and every one before it, are gone from the log in etcd."""
    sizes = follower.log_sizes
    while sizes and sizes[0][0] <= lsn:
        follower.log_bytes -= sizes.popleft()[1]
    assert follower.log_bytes >= 0


async def keep_trimming(cluster: "Cluster") -> None:
    """Every `trim_every_s`: each partition this node leads loses the batches every live node
    has in a snapshot (or, past `LOG_SHARE_OVER` times its share of the budget, the batches
    under the leader's own snapshot), and the leader of partition 0 compacts etcd's history
    below the revision it saw one round before (`compact`)."""
    while True:
        await trio.sleep(cluster.trim_every_s)
        for follower in list(cluster.followers.values()):
            journal = follower.journal
            if journal is None or journal.failure is not None:
                continue
            floor = trim_floor(cluster, follower)
            if floor <= 0:
                continue
            try:
                await trim_below(cluster, follower, journal.epoch, floor)
            except EtcdError as error:
                log.warning("partition %d: trimming the log failed: %s", follower.number, error)
        if cluster.leads(0):
            try:
                await compact(cluster)
            except EtcdError as error:
                log.warning("compacting etcd's history failed: %s", error)


def trim_floor(cluster: "Cluster", follower: "_Follower") -> int:
    """The LSN at or below which the partition's log may go: the oldest snapshot a live node
    has of it, unless the log holds more than its share allows (then this node's own)."""
    number = str(follower.number)
    held = {node: int(value.get("snapshots", {}).get(number, 0)) for node, value in cluster.nodes.items()}
    own = follower.store.snapshot_lsn
    held[cluster.node_id] = own
    floor = min(held.values())
    if follower.log_bytes > LOG_SHARE_OVER * cluster.log_share_bytes and own > floor:
        behind = sorted(node for node, lsn in held.items() if lsn < own)
        log.warning("partition %d: its log holds %d bytes in etcd, over %d times its share (%d): trimmed below this "
                    "node's snapshot at LSN %d; node(s) %s have older snapshots", follower.number, follower.log_bytes,
                    LOG_SHARE_OVER, cluster.log_share_bytes, own, ", ".join(behind),
                    extra={"event": "trim_past_nodes", "fields": {"partition": follower.number, "nodes": behind}})
        floor = own
    return floor


async def trim_below(cluster: "Cluster", follower: "_Follower", epoch: int, floor: int) -> None:
    """Delete every batch wholly at or below `floor` (every live node has a snapshot there)."""
    keys = follower.keys
    found = await cluster.etcd.range(keys.log_prefix, keys.log(floor + 1), keys_only=True)
    if len(found.kvs) < 2:
        return
    last = found.kvs[-1].key  # may hold records past the floor: kept
    done = await cluster.etcd.txn([Compare.create_revision(keys.leader, "==", epoch)], [Op.delete(keys.log_prefix, last)])
    if done.succeeded:
        trimmed(follower, keys.lsn_of(found.kvs[-2].key))


async def compact(cluster: "Cluster") -> None:
    """Compact etcd's history below the revision seen a round ago: what was trimmed (and every
    older value of the nodes' keys) leaves etcd's database, whose freed pages etcd then reuses,
    so it stops growing. A round's margin lets every watch that is a moment behind go on (one
    further behind is canceled and reads again, as after any compaction). A compaction already
    made past it (etcd's own auto-compaction, another node) is left as it is."""
    now = (await cluster.etcd.range(cluster.prefix + "meta", keys_only=True)).header.revision
    target, cluster.compact_next = cluster.compact_next, now
    if target <= cluster.compacted_revision:
        return
    try:
        await cluster.etcd.compact(target)
    except EtcdCompacted:
        pass
    cluster.compacted_revision = target
    cluster.compactions += 1


async def bootstrap(cluster: "Cluster", follower: "_Follower", first_lsn_held: int) -> None:
    """This node's copy ends before the oldest batch the log still holds (the log was trimmed
    past it while the node was away): take the newest snapshot a peer has of the partition,
    then read the log from there. Raises `RecoveryError` when no peer has one that reaches."""
    number, tried = follower.number, []
    leader = follower.leader
    peers = [leader.url] if leader is not None and leader.node != cluster.node_id else []
    peers += [str(value.get("url")) for node, value in cluster.nodes.items() if node != cluster.node_id]
    for url in dict.fromkeys(peers):
        try:
            with trio.fail_after(30):
                answer = await cluster.http.get(f"{url}/v1/cluster/partitions/{number}/snapshot",
                                             headers={SECRET_HEADER: cluster.secret})
        except (httpx.HTTPError, trio.TooSlowError) as error:
            tried.append(f"{url}: {error!r}")
            continue
        lsn = int(answer.headers.get("x-runstate-snapshot-lsn", "0"))
        if answer.status_code != 200 or lsn + 1 < first_lsn_held:
            tried.append(f"{url}: {answer.status_code}, snapshot at LSN {lsn}")
            continue
        blocking = cluster.run_blocking or trio.to_thread.run_sync
        await blocking(keep_snapshot, cluster, number, lsn, answer.content)
        log.warning("partition %d: took a snapshot at LSN %d from %s (the log holds from %d on)",
                    number, lsn, url, first_lsn_held,
                    extra={"event": "bootstrap", "fields": {"partition": number, "lsn": lsn, "from": url}})
        await cluster.reopen_store(follower)
        return
    raise RecoveryError(
        follower.keys.log(follower.next_lsn), 0,
        f"the log holds batches from LSN {first_lsn_held} on, this node's copy ends at {follower.next_lsn - 1}, "
        f"and no peer gave a snapshot that reaches it ({'; '.join(tried) or 'no peer'})",
    )


def keep_snapshot(cluster: "Cluster", number: int, lsn: int, data: bytes) -> None:
    """Write a peer's snapshot into this node's copy (atomically); older files of the copy
    that it covers are left for the next snapshot's pruning."""
    folder = snapshot_dir(partition_dir(cluster.data_dir, number))
    path = os.path.join(folder, f"{lsn:020d}.snap")
    temporary = path + ".tmp"
    fd = cluster.disk.create(temporary)
    try:
        cluster.disk.write(fd, data)
        cluster.disk.fsync(fd, temporary)
    finally:
        cluster.disk.close(fd)
    cluster.disk.replace(temporary, path)
    cluster.disk.fsync_dir(folder)
