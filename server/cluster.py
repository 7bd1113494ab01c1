"""This node in a cluster on etcd: leading some partitions, following the others, answering for all.

The journal of every partition lives in etcd (`snapshots/etcd_journal.py`); etcd's Raft gives it
to a quorum and Jepsen found its transactions strict-serializable, so nothing here is consensus:
it is who writes each partition's log, and everyone else reading it.

Keys, under `/rs/<cluster>/`:

    meta                 {"layout": 2, "partitions": P}: made by the first node, read by every later one
    secret               random bytes: what nodes show each other (a snapshot asked of a peer)
    nodes/<id>           {"url", "applied", "snapshots", "leads"}: a live node, on its session's lease
    p/<NNN>/handed       {"epoch", "from", "to"}: put as a leader hands the partition over (not a failover)
    p/<NNN>/leader       {"node", "url"}: the partition's leader, on its session's lease
    p/<NNN>/log/<LSN>    a committed batch of the partition, by the LSN of its first record

A node's **session** is one etcd lease (TTL `cluster_lease_s`, kept alive every third of it by
`LeaseKeeper`, whose deadline counts from when each keepalive was sent). The node's key and
every leader key it holds live on it, so a node that dies loses all its partitions at once, about
TTL + 0.5 s later. A node whose session deadline passes stops serving every partition it leads
before anyone else can win one (the deadline is earlier than etcd's expiry): it answers nothing
for them, not even a read. It keeps asking etcd meanwhile; a keepalive answered proves the lease
was never ended (nobody else can have won its partitions), and it serves them again from there,
which is how it rides through an election of etcd's own leader (etcd's new leader extends every
lease). "Lease not found" ends the session: every partition it led is dropped and followed, and
a new session begins.

Each **partition** has one task here (`_partition`), always in one of three phases:

- *follow*: read the log from the next LSN this node lacks (a linearizable range read), apply
  every batch through the same replay code recovery uses (`recovery.replay_batch`) into the
  partition's state and write it into the local copy (`Store.follow`: snapshots bound what a
  restart reads again), then watch the partition's keys for new batches and for its leader
  leaving. The kernel refuses the partition's commands meanwhile (`refusal`): requests go to the
  leader (`forward.py`); the console reads the followed state, which holds committed changes only.
- *campaign*: the leader key is gone. The live node that the partition prefers (the highest
  CRC-32 of node and partition: rendezvous hashing, which spreads partitions evenly and moves few
  when a node comes or goes) tries at once, the others a little later. Winning is a transaction
  that creates the leader key if it is absent; the epoch is the revision that created it.
- *lead*: read the log to its end again (a batch committed by the old leader just before it lost
  its key is there now, none can come after: its fence names its own epoch), then decide the
  restart rules (`actors/state.py restart`: leases whose end has passed expire, live ones keep
  their end and a grace once; generations come from the log, so they keep growing) and commit
  them as the epoch's first batch, then serve the partition: the kernel gets the state and an
  `EtcdJournal` fenced on the epoch. It serves until the journal is fenced (another node won: this
  one was paused past its session), the session is lost, or the node steps down; then the state,
  which may hold changes never committed, is rebuilt from the local copy and the log, and the
  partition is followed again.

Partitions are given back to the node that prefers them: a leader steps down from a partition
whose preferred live node has caught up with its log, when it leads more than its share.

The leader trims each partition's log below the newest snapshot every live node has of it (they
say so in their node keys); a node whose copy is older than what the log still holds asks a peer
for its snapshot (`GET /v1/cluster/partitions/{n}/snapshot`, shown the cluster's secret). Each
node snapshots a partition once its copy holds the partition's share of `log_bytes_max` past its
last snapshot, and the leader of partition 0 compacts etcd's history below what was trimmed
(`cluster_log.py`), so etcd's database stays within a bound of the budget (docs/cluster.md, "etcd's size").

A campaign whose answer is lost or late, although the key was made, is resolved by reading the
key back (`_resolve_own`): a partition is never left following a leader key of its own node.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import secrets
import zlib
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable

import httpx
import trio

from ..actors.clock import Clock
from ..actors.kernel import Kernel
from ..actors.partition import Partition
from ..actors.layout import Layout
from ..actors.errors import UNAVAILABLE, KernelError
from ..snapshots.datadir import Manifest, make_data_dir, partition_dir, read_manifest
from ..snapshots.etcd import (
    Compare, EtcdClient, EtcdError, EtcdUnavailable, KeyValue, LeaseKeeper, Op, RangeResult, WatchCanceled, prefix_end,
)
from ..snapshots.etcd_journal import EtcdJournal, Fenced, PartitionKeys
from ..snapshots.frame import FRAME_HEADER_BYTES
from ..snapshots.model import StateModel
from ..snapshots.recovery import RecoveryError, load, replay_batch, snapshot_dir
from ..snapshots.snapshot import list_snapshots
from ..snapshots.store import Store, StoreConfig, lock_dir
from ..snapshots.wal import RunBlocking
from . import cluster_log, cluster_view
from .cluster_log import SECRET_HEADER
from .peers import Peers

__all__ = ["Cluster", "ClusterError", "Leader", "STANDBY", "DEFAULT_PARTITIONS", "campaign_order", "hand_offs", "preference_order"]

log = logging.getLogger("runstate.cluster")

# Data partitions of a new cluster when `--partitions` is not given (several nodes share them).
DEFAULT_PARTITIONS = 8
# The refusal of a partition this node follows: its requests go to the leader.
STANDBY = "this node follows the partition; its leader answers"
# A follower that the partition does not prefer waits this long (times its rank) before it campaigns.
CAMPAIGN_DELAY_S = 0.3
# Joining: how many times a node asks etcd for the cluster's meta before it gives up (each time
# every member has its attempt), and the pause between; the whole open is bounded by the runtime.
JOIN_TRIES = 10
JOIN_RETRY_S = 0.5
# How often a node says what it has (applied and snapshotted LSNs) in its key; how often a leader
# trims by default (`trim_every_s`), and what the partitions' logs may hold in etcd by default.
PUBLISH_EVERY_S = 2.0
TRIM_EVERY_S = 10.0
LOG_BYTES_MAX = 256 << 20
# Batches read from the log per request while catching up.
CATCH_UP_BATCHES = 64
# A node steps down from a partition whose preferred node was at most this many records behind
# when it last said (every PUBLISH_EVERY_S): under a steady load it is never exactly caught up,
# and the new leader reads the rest before it serves (a few milliseconds for this many).
HANDOFF_LAG_MAX = 5000
# A request with a key this node does not know waits at most this long for the keys' log.
KEYS_SYNC_S = 2.0
# When a node stops leading a partition: how long the batch it was writing may take to be answered
# (and, on a hand-off, what is queued to be written) before its callers are told it is unresolved.
CLOSE_GRACE_S = 2.0


class ClusterError(Exception):
    """The cluster cannot be joined as asked (another partition count, an unreadable meta key)."""


@dataclass(frozen=True, slots=True)
class Leader:
    node: str
    url: str
    epoch: int


@dataclass(slots=True)
class _Follower:
    """What this node has of one partition: its local copy, and the point its state has reached."""

    number: int
    keys: PartitionKeys
    store: Store
    next_lsn: int = 1
    leader: Leader | None = None
    leader_seen: trio.Event = field(default_factory=trio.Event)  # set whenever `leader` changes
    # The requests on their way to `leader` (`forward.py`): cancelled when it changes.
    sending: set[trio.CancelScope] = field(default_factory=set)
    # Set (then made anew) whenever `leader` changes or this node starts to serve the partition:
    # what requests waiting for a leader they can be sent to wait on (`wait_for_leader`).
    changed: trio.Event = field(default_factory=trio.Event)
    journal: EtcdJournal | None = None
    step_down: trio.Event = field(default_factory=trio.Event)
    store_scope: trio.CancelScope | None = None  # the local copy's tasks (its writer, its snapshots)
    store_done: trio.Event = field(default_factory=trio.Event)
    # The batches this node knows the log in etcd holds, (first LSN, bytes) oldest first, and their
    # bytes together: what is trimmed as it is deleted. (Batches older than this node's copy are
    # not known to it: a node started on an old copy counts a little less than etcd holds.)
    log_sizes: deque[tuple[int, int]] = field(default_factory=deque)
    log_bytes: int = 0
    written_bytes: int = 0  # bytes of batches applied or committed here since the start
    takeovers: int = 0  # times this node took the partition over
    leader_changes: int = 0  # times this node saw a new leader (another epoch) after the first it knew
    # Of those, the changes after a leader handed the partition over (a rebalance, a node's planned
    # stop: the marker key names the epoch given up) and the others (failovers: a leader gone).
    handoffs: int = 0
    failovers: int = 0
    handed_epoch: int = 0  # the epoch the marker key last named
    handed_target: str | None = None  # the node the marker key last named as the one it went to
    epoch_seen: int = 0
    last_leader: str | None = None  # the node that led before the leader key went away
    handed_to: str | None = None  # set when this node steps down to give the partition to that node


async def _first(events: dict[str, trio.Event]) -> str:
    """The name of the first of `events` to be set (at once if one is already)."""
    for name, event in events.items():
        if event.is_set():
            return name
    found: list[str] = []
    async with trio.open_nursery() as nursery:

        async def wait(name: str, event: trio.Event) -> None:
            await event.wait()
            found.append(name)
            nursery.cancel_scope.cancel()

        for name, event in events.items():
            nursery.start_soon(wait, name, event)
    return next((name for name, event in events.items() if event.is_set()), found[0])  # the first named, of those set


def preference(node: str, partition: int) -> int:
    """The rendezvous score of `node` for `partition`: the live node with the highest leads it."""
    return zlib.crc32(f"{node}/{partition}".encode())


def preference_order(live: set[str], partition: int) -> list[str]:
    """The nodes of `live`, the one `partition` prefers first."""
    return sorted(live, key=lambda node: (-preference(node, partition), node))


def hand_offs(node_id: str, led: dict[int, int], nodes: dict[str, Any], leaders: dict[int, str | None],
              now_ms: int) -> list[tuple[int, str]]:
    """The partitions node `node_id` gives up this round, and to whom: `led` maps those it leads to
    their last LSN, `nodes` the live nodes to what each last said (`_node_value`), `leaders` every
    partition to the node leading it as this node sees it (the leader keys, watched).

    While it leads more than its share, it gives each partition to the live node next in the
    partition's preference, once that node has been up for two rounds (`PUBLISH_EVERY_S`) and is
    caught up with the partition's log: every one that goes to a node the partition prefers to
    this one, at once (where the partitions settle in the end: a cluster started together, whose
    first node took them all, spreads in one round, not one partition a round), up to what is past
    its share. Preference alone can leave a node preferred by more partitions than its share: it
    gives the extra ones to nodes under their share, filling their room at once while it is the
    only node past its share, else one a round (two nodes filling the same room would overfill
    it). Each hand-off costs its partition a few milliseconds without a leader."""
    live = set(nodes) | {node_id}
    share = math.ceil(len(leaders) / max(1, len(nodes)))
    excess = len(led) - share
    if excess <= 0:
        return []
    leads = {node: 0 for node in live}
    for leader in leaders.values():
        if leader in leads:
            leads[leader] += 1
    leads[node_id] = len(led)
    room = {node: share - count for node, count in leads.items()}
    preferred: list[tuple[int, str]] = []
    others: list[tuple[int, str]] = []
    for number in sorted(led):
        order = preference_order(live, number)
        prefers_it = order[0] != node_id
        # The node it prefers, or else the first in its preference with room under its share.
        to = order[0] if prefers_it else next((node for node in order[1:] if room[node] > 0), None)
        if to is None:
            continue
        node = nodes.get(to, {})
        applied = int(node.get("applied", {}).get(str(number), -1))
        seen_ms = now_ms - int(node.get("since_ms", node.get("at_ms", 0)))
        if applied >= led[number] - HANDOFF_LAG_MAX and seen_ms >= 2 * PUBLISH_EVERY_S * 1000:
            (preferred if prefers_it else others).append((number, to))
    if preferred:
        return preferred[:excess]
    if sum(1 for count in leads.values() if count > share) > 1:
        return others[:1]
    given: list[tuple[int, str]] = []
    for number, to in others:
        if len(given) < excess and room[to] > 0:
            room[to] -= 1
            given.append((number, to))
    return given


def campaign_order(node_id: str, preferred: list[str], last_leader: str | None, handed_by_me: bool,
                   target: str | None) -> list[str]:
    """The order in which the live nodes (`preferred`, the partition's preference) campaign for a
    partition that has no leader, as node `node_id` sees it; each waits `CAMPAIGN_DELAY_S` a rank.

    The node that led it is gone (or handed it over): the others need not wait for it, even before
    the watch on the nodes has told that its session ended. A node that just handed the partition
    over lets every other node go first. A partition handed to a node (`target`, as the marker key
    names it) goes to that node first: `hand_offs` may pick one under its share that the
    partition prefers less, and the next in preference would win it, lead past its own share and
    hand it on, round after round."""
    gone = last_leader if last_leader != node_id else None
    order = [node for node in preferred if node != gone]
    if handed_by_me:
        order.remove(node_id)
        order.append(node_id)
    if target is not None and target in order:
        order.remove(target)
        order.insert(0, target)
    return order


class Cluster:
    """This node's part in the cluster. `open` before the kernel is made, then `run` beside it."""

    def __init__(
        self,
        *,
        endpoints: list[str],
        name: str,
        node_id: str,
        advertise: str,
        data_dir: str,
        partitions: int | None,
        lease_s: int,
        model: StateModel,
        clock: Clock,
        config: StoreConfig,
        disk: Any,
        run_blocking: RunBlocking | None = None,
        log_bytes_max: int = LOG_BYTES_MAX,
        trim_every_s: float = TRIM_EVERY_S,
    ) -> None:
        self.endpoints = endpoints
        self.name = name
        self.node_id = node_id
        self.advertise = advertise.rstrip("/")
        self.data_dir = data_dir
        self.asked_partitions = partitions
        self.lease_s = lease_s
        self.model = model
        self.clock = clock
        self.config = config
        self.log_bytes_max = log_bytes_max
        self.trim_every_s = trim_every_s
        self.disk = disk
        self.run_blocking = run_blocking
        self.prefix = f"/rs/{name}/"
        self.etcd = EtcdClient(endpoints)
        self.partitions = 0
        self.secret = ""
        self.layout: Layout | None = None
        self.followers: dict[int, _Follower] = {}
        self.kernel: Kernel | None = None
        self.session: LeaseKeeper | None = None
        self.session_ready = trio.Event()
        self.nodes: dict[str, dict[str, Any]] = {}  # live nodes (their keys' values), by id
        self.nodes_changed = trio.Event()
        self.sessions = 0
        self.leaving = False  # shutting down: its partitions handed over, no new one taken
        self.since_ms = clock.now_ms()  # when this node joined (others hand it partitions after a while)
        self._lock_fd: int | None = None
        self._http: httpx.AsyncClient | None = None
        self._peers: Peers | None = None
        # Told each partition this node starts to lead, once it serves it (in a task of its own).
        self.on_lead: Callable[[int], Awaitable[None]] | None = None

    # -- opening ----------------------------------------------------------------------------------

    async def open(self) -> dict[int, Any]:
        """Join the cluster's meta (making it if this is the first node), open the local copy of
        every partition; returns each partition's state as the local copy has it."""
        meta_key = self.prefix + "meta"
        asked = self.asked_partitions or DEFAULT_PARTITIONS
        made = await self._join(meta_key, asked)
        if made.succeeded:
            self.partitions = asked
            log.info("cluster %s made with %d partitions", self.name, asked,
                        extra={"event": "cluster_made", "fields": {"cluster": self.name, "partitions": asked}})
        else:
            meta = json.loads(made.responses[0].kvs[0].value)
            self.partitions = int(meta["partitions"])
            if self.asked_partitions is not None and self.asked_partitions != self.partitions:
                raise ClusterError(
                    f"cluster {self.name} was made with {self.partitions} partition(s); the count is fixed when a "
                    f"cluster is made, so start without --partitions (or with --partitions {self.partitions})"
                )
        secret = await self._until_answered(lambda: self.etcd.get(self.prefix + "secret"))
        self.secret = "" if secret is None else secret.value.decode()
        self.layout = Layout(self.partitions)
        # Each copy snapshots once it holds its partition's share of the logs' budget past the last.
        self.config = dataclasses.replace(self.config, snapshot_every_bytes=self.log_share_bytes)
        blocking = self.run_blocking or trio.to_thread.run_sync
        self._lock_fd = await blocking(lock_dir, self.data_dir)
        manifest = read_manifest(self.data_dir)
        if manifest is None:
            await blocking(make_data_dir, self.data_dir, Manifest(self.partitions), self.disk)
        elif manifest.partitions != self.partitions:
            raise ClusterError(
                f"{self.data_dir} holds a copy of {manifest.partitions} partition(s); cluster {self.name} has "
                f"{self.partitions}: give this node a directory of its own"
            )
        states = {}
        for number in self.layout.numbers():
            follower = await self._open_copy(number)
            self.followers[number] = follower
            states[number] = follower.store.state
        # Snapshots from peers (`cluster_log.bootstrap`): rare, large answers.
        self._http = httpx.AsyncClient(timeout=None, limits=httpx.Limits(max_connections=16, max_keepalive_connections=4))
        # Requests passed on to partitions' leaders (`forward.py`): one whole answer each, often.
        self._peers = Peers()
        return states

    async def _join(self, meta_key: str, asked: int) -> Any:
        """Make the cluster's meta and secret if absent, else read the meta. Sending it twice is
        harmless (a second copy finds the meta made by the first and reads it), so a member that
        does not answer in time gives way to the next."""
        return await self._until_answered(lambda: self.etcd.txn(
            [Compare.absent(meta_key)],
            [Op.put(meta_key, json.dumps({"layout": 2, "partitions": asked})),
             Op.put(self.prefix + "secret", secrets.token_hex(32))],
            [Op.get(meta_key)],
            repeatable=True,
        ))

    async def _until_answered(self, call: Callable[[], Awaitable[Any]]) -> Any:
        """`call` (harmless to repeat) until etcd answers it, JOIN_TRIES times at most: a node
        started while etcd is slow (an election, a loaded machine) waits for it instead of exiting."""
        for attempt in range(1, JOIN_TRIES + 1):
            try:
                return await call()
            except EtcdUnavailable as error:
                if attempt == JOIN_TRIES:
                    raise
                log.warning("etcd did not answer this node's joining (%s); trying again", error)
                await trio.sleep(JOIN_RETRY_S)
        raise AssertionError("unreachable")

    async def _open_copy(self, number: int) -> _Follower:
        store = Store(
            partition_dir(self.data_dir, number), self.config, self.disk, self.model, self.clock, None,
            self.run_blocking, partition=number,
        )
        loaded = await store.recover()
        await store.begin(loaded, follow=True)
        keys = PartitionKeys(self.prefix, number)
        return _Follower(number, keys, store, loaded.last_lsn + 1)

    @property
    def log_share_bytes(self) -> int:
        """What one partition's log may hold in etcd: its share of `log_bytes_max` (partition 0,
        the keys, counts as one)."""
        return max(1, self.log_bytes_max // (self.partitions + 1))

    def close(self) -> None:
        for follower in self.followers.values():
            follower.store.close()
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    # -- running ----------------------------------------------------------------------------------

    async def run(self, kernel: Kernel, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """The session, every partition's task, the membership watch, publishing and trimming."""
        self.kernel = kernel
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                for follower in self.followers.values():
                    await nursery.start(self._run_store, follower)
                await nursery.start(self._session_loop)
                nursery.start_soon(self._watch_nodes)
                for number in self.followers:
                    nursery.start_soon(self._partition, number)
                nursery.start_soon(self._publish)
                nursery.start_soon(cluster_log.keep_trimming, self)
                task_status.started()
        finally:
            with trio.CancelScope(shield=True):
                await self._leave()

    async def _leave(self) -> None:
        """At shutdown: give up leadership at once (revoking the session deletes the leader keys),
        so the other nodes take over now rather than a lease later."""
        session = self.session
        if session is not None:
            with trio.move_on_after(2):
                try:
                    await session.revoke()
                except EtcdError as error:
                    log.warning("could not revoke the session on leaving: %s", error)
        await self.etcd.aclose()
        if self._http is not None:
            await self._http.aclose()
        if self._peers is not None:
            await self._peers.aclose()

    async def _session_loop(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        started = False
        while True:
            try:
                session = await LeaseKeeper.grant(self.etcd, self.lease_s, outlive_deadline=True)
                await self.etcd.put(self._node_key(), self._node_value(), lease=session.lease_id)
            except EtcdError as error:
                log.warning("cannot open a session with etcd (%s); trying again", error)
                await trio.sleep(0.5)
                continue
            self.session = session
            self.sessions += 1
            self.session_ready.set()
            log.info("session %x open (TTL %d s)", session.lease_id, session.ttl_s,
                     extra={"event": "session", "fields": {"lease": session.lease_id, "ttl_s": session.ttl_s}})
            if not started:
                task_status.started()
                started = True
            await session.run()
            # The deadline passed (or etcd ended the lease): stop leading everything at once.
            log.error("session lost: %s; every partition this node led stops now", session.lost_reason,
                      extra={"event": "session_lost", "fields": {"reason": session.lost_reason}})
            self.session_ready = trio.Event()  # (each partition it led sees `session.lost` itself)

    async def _run_store(self, follower: _Follower, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        done = follower.store_done = trio.Event()
        try:
            with trio.CancelScope() as scope:
                follower.store_scope = scope
                await follower.store.run(None, task_status=task_status)
        finally:
            done.set()

    async def reopen_store(self, follower: _Follower) -> None:
        """Stop the local copy's tasks, close it, open it again from its folder (recovered)."""
        if follower.store_scope is not None:
            follower.store_scope.cancel()
            await follower.store_done.wait()
        follower.store.close()
        fresh = await self._open_copy(follower.number)
        follower.store, follower.next_lsn = fresh.store, fresh.next_lsn
        self._hand_state(follower, follower.store.state)
        assert self._nursery is not None
        await self._nursery.start(self._run_store, follower)

    def _node_key(self) -> str:
        return f"{self.prefix}nodes/{self.node_id}"

    def _node_value(self) -> str:
        return json.dumps({
            "url": self.advertise,
            "applied": {str(n): f.next_lsn - 1 for n, f in self.followers.items()},
            "snapshots": {str(n): f.store.snapshot_lsn for n, f in self.followers.items()},
            "leads": sorted(n for n, f in self.followers.items() if f.journal is not None),
            "at_ms": self.clock.now_ms(),
            "since_ms": self.since_ms,
        })

    def hand_over(self) -> None:
        """At the start of a shutdown: hand every partition this node leads to the other nodes
        now (what its journal holds written first, then its key given back), take no new one,
        and leave the live nodes, so that nobody hands it one back. The requests in flight here
        are answered by the new leaders. A node alone keeps its partitions until it stops."""
        if self.leaving or not any(node != self.node_id for node in self.nodes):
            return
        self.leaving = True
        log.info("handing every partition over before stopping", extra={"event": "hand_over", "fields": {}})
        for follower in self.followers.values():
            follower.step_down.set()
        if self._nursery is not None:
            self._nursery.start_soon(self._withdraw)

    async def _withdraw(self) -> None:
        with trio.move_on_after(2):
            try:
                await self.etcd.delete(self._node_key())
            except EtcdError as error:
                log.warning("could not withdraw this node from the live nodes: %s", error)

    async def _publish(self) -> None:
        while True:
            await trio.sleep(PUBLISH_EVERY_S)
            session = self.session
            if session is None or not session.alive or self.leaving:
                continue
            try:
                await self.etcd.put(self._node_key(), self._node_value(), lease=session.lease_id)
            except EtcdError as error:
                log.warning("cannot publish this node's status: %s", error)
            self._rebalance()

    async def _watch_nodes(self) -> None:
        prefix = self.prefix + "nodes/"
        while True:
            try:
                found = await self.etcd.range(prefix, prefix=True)
                self.nodes = {kv.key.decode()[len(prefix):]: json.loads(kv.value) for kv in found.kvs}
                self._nodes_changed()
                async with self.etcd.watch(prefix, prefix=True, start_revision=found.header.revision + 1) as watch:
                    async for response in watch:
                        for event in response.events:
                            node = event.kv.key.decode()[len(prefix):]
                            if event.type == "DELETE":
                                self.nodes.pop(node, None)
                            else:
                                self.nodes[node] = json.loads(event.kv.value)
                        self._nodes_changed()
            except (EtcdError, WatchCanceled) as error:
                log.warning("the watch on the cluster's nodes broke (%s); taking it up again", error)
                await trio.sleep(0.2)

    def _nodes_changed(self) -> None:
        self.nodes_changed.set()
        self.nodes_changed = trio.Event()

    def preferred(self, number: int) -> list[str]:
        """Live nodes (and this one), most preferred for `number` first."""
        return preference_order(set(self.nodes) | {self.node_id}, number)

    # -- one partition ----------------------------------------------------------------------------

    async def _partition(self, number: int) -> None:
        follower = self.followers[number]
        while True:
            try:
                revision = await self._catch_up(follower)
                kv = await self._leader_key(follower, revision)
                if kv is None:
                    await self._campaign(follower)
                elif follower.leader is not None and follower.leader.node == self.node_id:
                    await self._resolve_own(follower, kv)
                else:
                    await self._follow(follower, revision)
            except (EtcdError, WatchCanceled) as error:
                log.warning("partition %d: %s; following again", number, error)
                await trio.sleep(0.2)
            except RecoveryError as error:  # (a batch may be applied in part: nothing reads it until rebuilt)
                # The answers say what is wrong; where (a key, a file and its offset) is for the log.
                self._partition_of(follower).refuse(f"its log cannot be applied ({error.reason}); the server's log says where")
                log.error("partition %d: %s", number, error)
                await trio.sleep(5)
                await self._rebuild(follower)
            except Exception:  # a bug: this partition is followed again from its copy, the others go on
                log.exception("partition %d: following it failed; following again", number)
                self._partition_of(follower).refuse(STANDBY)
                await trio.sleep(1)
                await self._rebuild(follower)

    async def _leader_key(self, follower: _Follower, revision: int) -> KeyValue | None:
        """The partition's leader key at `revision` (None: it has no leader), and its leader noted
        (with the hand-off marker beside it: whether the last change was one)."""
        keys = follower.keys
        found = await self.etcd.range(keys.handed, keys.leader + "\0", revision=revision)
        kv = None
        for entry in found.kvs:
            if entry.key == keys.handed.encode():
                self._handed(follower, entry.value)
            elif entry.key == keys.leader.encode():
                kv = entry
        self._set_leader(follower, None if kv is None else self._parse_leader(kv))
        return kv

    @staticmethod
    def _handed(follower: _Follower, value: bytes) -> None:
        try:
            marker = json.loads(value)
            follower.handed_epoch = int(marker["epoch"])
            to = marker.get("to")
            follower.handed_target = to if isinstance(to, str) else None
        except (ValueError, KeyError, TypeError, AttributeError):
            pass  # (not ours to read: counted as a failover)

    @staticmethod
    def _parse_leader(kv: Any) -> Leader:
        value = json.loads(kv.value)
        return Leader(value["node"], value["url"], kv.create_revision)

    def _set_leader(self, follower: _Follower, leader: Leader | None) -> None:
        if leader is not None and leader.epoch != follower.epoch_seen:
            if follower.epoch_seen:
                follower.leader_changes += 1
                if follower.handed_epoch == follower.epoch_seen:
                    follower.handoffs += 1
                else:
                    follower.failovers += 1
            follower.epoch_seen = leader.epoch
        if leader != follower.leader:
            if follower.leader is not None:
                follower.last_leader = follower.leader.node
            follower.leader = leader
            follower.leader_seen.set()
            follower.leader_seen = trio.Event()
            for scope in follower.sending:
                scope.cancel()
            follower.sending.clear()
            self._changed(follower)

    @staticmethod
    def _changed(follower: _Follower) -> None:
        follower.changed.set()
        follower.changed = trio.Event()

    async def _catch_up(self, follower: _Follower) -> int:
        """Apply every batch the log holds past this node's point; the revision read at the end."""
        keys = follower.keys
        while True:
            found = await self.etcd.range(keys.log(follower.next_lsn), prefix_end(keys.log_prefix), limit=CATCH_UP_BATCHES)
            for kv in found.kvs:
                lsn = keys.lsn_of(kv.key)
                if lsn != follower.next_lsn:
                    await cluster_log.bootstrap(self, follower, lsn)
                    break
                self._apply(follower, kv.value)
            else:
                if not found.more:
                    return found.header.revision

    def _apply(self, follower: _Follower, data: bytes) -> None:
        state = self._partition_of(follower).state
        where = f"{follower.keys.log(follower.next_lsn)}"
        replayed = replay_batch(data, follower.next_lsn, state.apply, self.model, where)
        # As recovery does: this node never decides with a time earlier than one the log holds
        # (another node's clock may be a little ahead of this one's).
        self.clock.advance_anchor_to(replayed.newest_ms)
        follower.store.copy(follower.next_lsn, replayed.bodies)
        cluster_log.grew(follower, follower.next_lsn, len(data))
        follower.next_lsn = replayed.last_lsn + 1

    async def _follow(self, follower: _Follower, revision: int) -> None:
        """Apply new batches as the leader commits them; return when the leader key goes away."""
        keys = follower.keys
        async with self.etcd.watch(keys.prefix, prefix=True, start_revision=revision + 1) as watch:
            async for response in watch:
                for event in response.events:
                    key = event.kv.key
                    if key == keys.handed.encode():
                        if event.type == "PUT":
                            self._handed(follower, event.kv.value)
                    elif key == keys.leader.encode():
                        if event.type == "DELETE":
                            self._set_leader(follower, None)
                            return
                        self._set_leader(follower, self._parse_leader(event.kv))
                    elif event.type == "PUT":
                        lsn = keys.lsn_of(key)
                        if lsn == follower.next_lsn:
                            self._apply(follower, event.kv.value)
                        elif lsn > follower.next_lsn:  # missed one: read the log again
                            return
                    elif key.startswith(keys.log_prefix.encode()):  # the leader trimmed the log
                        cluster_log.trimmed(follower, keys.lsn_of(key))

    async def _campaign(self, follower: _Follower) -> None:
        """Try to become the partition's leader (after the preferred nodes had their chance).

        The transaction is sent again to the next member when one does not answer (a second copy
        finds the key there and changes nothing). An answer lost or late (the put may have
        committed all the same) is resolved by reading the key back: the partition's loop finds
        it naming this node and `_resolve_own` decides."""
        number = follower.number
        handed_by_me = follower.handed_to is not None
        follower.handed_to = None
        target = follower.handed_target if follower.handed_epoch == follower.epoch_seen else None
        order = campaign_order(self.node_id, self.preferred(number), follower.last_leader, handed_by_me, target)
        rank = order.index(self.node_id)
        if rank:  # the nodes it prefers try first; if one wins, the transaction below fails
            await trio.sleep(CAMPAIGN_DELAY_S * rank)
        await self.session_ready.wait()
        session = self.session
        assert session is not None
        if self.leaving:  # (the others take it; until this node stops it forwards to them)
            with trio.move_on_after(1):
                await follower.leader_seen.wait()
            return
        if not session.alive:
            return
        keys = follower.keys
        value = json.dumps({"node": self.node_id, "url": self.advertise})
        try:
            won = await self.etcd.txn([Compare.absent(keys.leader)], [Op.put(keys.leader, value, lease=session.lease_id)],
                                      [Op.get(keys.leader)], repeatable=True)
        except EtcdError as error:
            log.warning("partition %d: no answer to this node's campaign (%s); reading the leader key back", number, error,
                        extra={"event": "campaign_unanswered", "fields": {"partition": number}})
            return
        if won.succeeded:
            epoch = won.header.revision
        else:
            leader = won.responses[0]
            assert isinstance(leader, RangeResult), "the failure branch reads the leader's key"
            kvs = leader.kvs
            if not (kvs and kvs[0].lease == session.lease_id):
                self._set_leader(follower, self._parse_leader(kvs[0]) if kvs else None)
                return
            epoch = kvs[0].create_revision  # an earlier copy of this campaign got there; its answer was lost
        await self._lead(follower, session, epoch)

    async def _resolve_own(self, follower: _Follower, kv: KeyValue) -> None:
        """The leader key names this node, which does not lead the partition: a campaign of this
        node whose answer was lost or came too late (it committed all the same), or a key left by
        an earlier process of this node whose session has not ended yet. Following it would leave
        the partition without a working leader for as long as the key lasts.

        On this node's own live session the key is this node's: it leads, with the key's create
        revision as its epoch (what the campaign's answer would have said). Any other key naming
        this node is nobody's: it is deleted, fenced on that revision (so a key another node made
        meanwhile is never touched), and the partition is campaigned for again. While this node's
        session has lapsed, it waits for the session's word first."""
        number, session = follower.number, self.session
        if session is not None and kv.lease == session.lease_id and not session.lost.is_set():
            if not session.alive:
                with trio.move_on_after(self.lease_s):
                    await session.wait_alive()
                return  # (read again)
            if not self.leaving:
                log.warning("partition %d: the leader key is this node's own (epoch %d), from a campaign whose answer "
                            "was lost or late; leading", number, kv.create_revision,
                            extra={"event": "campaign_resolved", "fields": {"partition": number, "epoch": kv.create_revision}})
                await self._lead(follower, session, kv.create_revision)
                return
        log.warning("partition %d: the leader key names this node on a session it no longer has (or it is leaving); "
                    "deleting it", number, extra={"event": "stale_leader_key", "fields": {"partition": number}})
        await self.etcd.txn([Compare.create_revision(follower.keys.leader, "==", kv.create_revision)],
                            [Op.delete(follower.keys.leader)], repeatable=True)
        self._set_leader(follower, None)

    async def _lead(self, follower: _Follower, session: LeaseKeeper, epoch: int) -> None:
        """Take the partition over, serve it until told to stop, then follow it again. Whatever
        ends it (a fence, the session, a hand-off, an error), the partition is refused, its
        journal stopped, the leader key given back while the session lasts (so that another node
        takes over now rather than when the session ends), and the state rebuilt."""
        number = follower.number
        partition = self._partition_of(follower)
        # From here until it serves (or is rebuilt) the state may hold changes not yet committed:
        # nothing reads it.
        partition.refuse(STANDBY)
        journal: EtcdJournal | None = None
        reason = "fenced"
        started = trio.current_time()
        try:
            journal = await self._take_over(follower, session, epoch)
            reason = "session lost" if journal is None else await self._serve(follower, session, epoch, journal, started)
        except Fenced as error:
            log.warning("partition %d: lost the election while taking over (%s)", number, error)
        except Exception:  # a bug: never hold a partition without serving it
            log.exception("partition %d: leading it failed; handing it over", number)
            reason = "failed"
        finally:
            follower.journal = None
            partition.refuse(STANDBY)
            if journal is not None and journal.failure is None:
                journal.fail(Fenced(f"this node no longer leads partition {number} ({reason})"))
        if reason in ("stepped down", "failed") and session.alive:
            # Hand the key back now (fenced on the epoch): the preferred node takes it at once. A
            # hand-off says so in the marker key, so that every node counts it as one, not as a failover.
            keys, handed = follower.keys, json.dumps({"epoch": epoch, "from": self.node_id, "to": follower.handed_to})
            ops = [Op.delete(keys.leader)] + ([Op.put(keys.handed, handed)] if reason == "stepped down" else [])
            try:
                await self.etcd.txn([Compare.create_revision(keys.leader, "==", epoch)], ops, repeatable=True)
            except EtcdError as error:
                log.warning("partition %d: could not hand the leader key back: %s", number, error)
        routine = reason == "stepped down"  # (a rebalance or a planned stop; the others are worth a look)
        log.log(logging.INFO if routine else logging.WARNING, "partition %d: no longer leading (%s)", number, reason,
                extra={"event": "not_leading", "fields": {"partition": number, "reason": reason}})
        await self._rebuild(follower)

    async def _take_over(self, follower: _Follower, session: LeaseKeeper, epoch: int) -> EtcdJournal | None:
        """Read the log to its end (a batch the old leader committed just before its key went is
        there now; none can come after: its fence names its own epoch), then commit the restart
        decisions as the epoch's first batch. None when the session ended first; `Fenced` when
        another node won meanwhile."""
        while True:
            try:
                await self._catch_up(follower)
                break
            except EtcdError as error:  # etcd is electing its own leader, say: this node still holds the key
                if session.lost.is_set():
                    return None
                log.warning("partition %d: reading the log to take it over failed (%s); again", follower.number, error)
                await trio.sleep(0.1)
        state = self._partition_of(follower).state
        journal = EtcdJournal(
            self.etcd, follower.keys, epoch=epoch, next_lsn=follower.next_lsn,
            check=self.model.records.check, on_committed=lambda first, bodies: self._committed(follower, first, bodies),
        )
        now_ms = self.clock.now_ms()
        await journal.write_now(state.decide_boot("always", now_ms) + state.restart(now_ms))
        return journal

    async def _serve(self, follower: _Follower, session: LeaseKeeper, epoch: int, journal: EtcdJournal, started: float) -> str:
        """Serve the partition until the journal is fenced, the session ends or it is handed over;
        returns which one it was."""
        number = follower.number
        partition = self._partition_of(follower)
        follower.journal = journal
        follower.takeovers += 1
        follower.step_down = trio.Event()
        if self.leaving:  # (won just as the shutdown began: given over at once)
            follower.step_down.set()
        self._set_leader(follower, Leader(self.node_id, self.advertise, epoch))
        partition.lead(journal)
        self._changed(follower)  # (the requests waiting here for it go on at once)
        took_ms = round((trio.current_time() - started) * 1000)
        log.info("partition %d: leading from LSN %d (epoch %d, took %d ms)", number, journal.durable_lsn, epoch, took_ms,
                    extra={"event": "leading", "fields": {"partition": number, "epoch": epoch, "lsn": journal.durable_lsn, "ms": took_ms}})
        async with trio.open_nursery() as nursery:
            nursery.start_soon(journal.run)
            if self.on_lead is not None:
                nursery.start_soon(self._told, number)
            reason = await _first({"fenced": journal.failed, "session lost": session.lost, "stepped down": follower.step_down})
            # No new turn from here on, and nothing reads the state until it is rebuilt; what the
            # journal holds is written (a hand-off) or answered (EtcdJournal.close), so that no
            # caller is left waiting or told a guess.
            partition.refuse(STANDBY)
            await journal.close(Fenced(f"this node no longer leads partition {number} ({reason})"),
                                drain=reason == "stepped down" and session.alive, grace_s=CLOSE_GRACE_S)
            nursery.cancel_scope.cancel()
        return reason

    async def _told(self, number: int) -> None:
        try:
            on_lead = self.on_lead
            assert on_lead is not None, "told only when someone listens (`_lead`)"
            await on_lead(number)
        except KernelError as error:  # (the partition stopped meanwhile)
            log.warning("partition %d: what a new leader does first did not finish: %s", number, error.message)

    def _committed(self, follower: _Follower, first_lsn: int, bodies: list[bytes]) -> None:
        assert first_lsn == follower.next_lsn, "the local copy goes on where the log's last batch ended"
        follower.store.copy(first_lsn, bodies)
        cluster_log.grew(follower, first_lsn, sum(len(body) for body in bodies) + FRAME_HEADER_BYTES * len(bodies))
        follower.next_lsn = first_lsn + len(bodies)

    def _partition_of(self, follower: _Follower) -> Partition:
        assert self.kernel is not None
        return self.kernel.partitions[follower.number]

    def _hand_state(self, follower: _Follower, state: Any) -> None:
        """Give the partition a state read anew from the local copy (committed changes only), in
        the role it has: read as a standby's while it follows, read by nobody while it is taken over."""
        partition = self._partition_of(follower)
        assert partition.refusal is not None, "the state of a partition that serves is its own"
        if partition.readable:
            partition.follow(STANDBY, state)
        else:
            partition.refuse(partition.refusal, state)

    async def _rebuild(self, follower: _Follower) -> None:
        """Drop the state (it may hold changes never committed) for one read from the local copy,
        which holds committed batches only; the caller then catches it up from the log."""
        journal = follower.store.journal
        assert journal is not None
        done = trio.Event()
        journal.after(journal.appended_lsn, lambda error: done.set())
        await done.wait()  # the copy has written everything it was given
        folder, number = partition_dir(self.data_dir, follower.number), follower.number
        blocking = self.run_blocking or trio.to_thread.run_sync
        loaded = await blocking(lambda: load(folder, self.model, repair=False, partition=number))
        if loaded.last_lsn != journal.appended_lsn:  # the copy itself failed: read it anew
            await self.reopen_store(follower)
            self._partition_of(follower).follow(STANDBY)
        else:
            follower.next_lsn = loaded.last_lsn + 1
            self._partition_of(follower).follow(STANDBY, loaded.state)

    # -- keeping the log short, and the partitions spread -------------------------------------------

    def _rebalance(self) -> None:
        """Step down from the partitions this node leads past its share (`hand_offs`)."""
        led = {f.number: f.next_lsn - 1 for f in self.followers.values() if f.journal is not None}
        leaders = {f.number: None if f.leader is None else f.leader.node for f in self.followers.values()}
        for number, to in hand_offs(self.node_id, led, self.nodes, leaders, self.clock.now_ms()):
            log.info("partition %d: handing it to %s", number, to,
                     extra={"event": "handoff", "fields": {"partition": number, "to": to}})
            follower = self.followers[number]
            follower.handed_to = to
            follower.step_down.set()

    # -- answering for the cluster -----------------------------------------------------------------

    def leader_of(self, number: int) -> Leader | None:
        return self.followers[number].leader

    def sending(self, number: int) -> set[trio.CancelScope]:
        """Where a request on its way to partition `number`'s leader puts its cancel scope: every
        scope in it is cancelled when the leader changes from the one known now."""
        return self.followers[number].sending

    def forget_leader(self, number: int, leader: Leader) -> None:
        """`leader` did not answer: forward nothing more to it until the partition names one again."""
        follower = self.followers[number]
        if follower.leader == leader:
            self._set_leader(follower, None)

    def leads(self, number: int) -> bool:
        """Whether this node serves `number` now: it won it, its journal is not fenced, and its
        session's deadline has not passed (past it another node may win, so it answers nothing,
        not even a read, whatever its own tasks have noticed yet)."""
        follower, session, kernel = self.followers[number], self.session, self.kernel
        return (
            follower.journal is not None and follower.journal.failure is None
            and session is not None and session.alive
            and kernel is not None and kernel.partitions[number].refusal is None  # (not while handing it over)
        )

    def refused_as_follower(self, number: int, error: KernelError) -> bool:
        """Whether `error` is partition `number` refusing a command, before running it, because
        this node stopped leading it (what the new leader may be asked instead)."""
        return error.code == UNAVAILABLE and error.message == STANDBY and not self.leads(number)

    async def keys_caught_up(self) -> None:
        """Return once this node has applied the system partition's log (the API keys) as far as
        etcd holds it now, or after `KEYS_SYNC_S`: a key made a moment ago through another node
        is known here before a request with it is refused. Calls at the same time share one read."""
        if self.leads(0):
            return
        sync = self._keys_sync
        if sync is None:
            sync = self._keys_sync = trio.Event()
            assert self._nursery is not None
            self._nursery.start_soon(self._sync_keys, sync)
        with trio.move_on_after(KEYS_SYNC_S):
            await sync.wait()

    async def _sync_keys(self, done: trio.Event) -> None:
        follower = self.followers[0]
        try:
            with trio.move_on_after(KEYS_SYNC_S):
                keys = follower.keys
                newest = await self.etcd.range(keys.log_prefix, prefix_end(keys.log_prefix), limit=1, keys_only=True,
                                               sort_order="DESCEND", sort_target="KEY")
                if newest.kvs:
                    last_batch = keys.lsn_of(newest.kvs[0].key)
                    while follower.next_lsn <= last_batch and not self.leads(0):
                        await trio.sleep(0.005)
        except EtcdError as error:
            log.warning("could not read how far the keys' log goes: %s", error)
        finally:
            self._keys_sync = None
            done.set()

    async def partition_caught_up(self, number: int, timeout_s: float) -> bool:
        """Whether this node's copy of partition `number` holds its log as far as etcd holds it
        now, waiting up to `timeout_s` for it to: a history read through a standby then sees every
        change acknowledged before it was asked (True at once on the partition's leader)."""
        if self.leads(number):
            return True
        follower = self.followers[number]
        keys = follower.keys
        with trio.move_on_after(timeout_s):
            newest = await self.etcd.range(keys.log_prefix, prefix_end(keys.log_prefix), limit=1, keys_only=True,
                                           sort_order="DESCEND", sort_target="KEY")
            last_batch = keys.lsn_of(newest.kvs[0].key) if newest.kvs else 0
            while follower.next_lsn <= last_batch and not self.leads(number):
                await trio.sleep(0.005)
            return True
        return False

    async def wait_for_leader(self, number: int, deadline: float) -> Leader | None:
        """The partition's leader, waiting until `deadline` (trio time) while it has none, or while
        it is this node and this node does not serve it (taking it over; its session lapsed).
        Woken by a new leader, by this node starting to serve it, and by this node's session
        answering again after a lapse (not only at the deadline)."""
        follower = self.followers[number]
        while follower.leader is None or (follower.leader.node == self.node_id and not self.leads(number)):
            if trio.current_time() >= deadline:
                return None
            events = {"changed": follower.changed}
            session = self.session
            if session is not None and not session.alive:
                events["session"] = session.answered
            with trio.move_on_at(deadline):
                await _first(events)
        return follower.leader

    @property
    def http(self) -> httpx.AsyncClient:
        assert self._http is not None
        return self._http

    @property
    def peers(self) -> Peers:
        assert self._peers is not None
        return self._peers

    def newest_snapshot(self, number: int) -> str | None:
        found = list_snapshots(snapshot_dir(partition_dir(self.data_dir, number)))
        return found[-1][1] if found else None

    _nursery: trio.Nursery | None = None
    _keys_sync: trio.Event | None = None
    # etcd's history: the revision compacted below last (by this node), how many times, and the
    # revision seen at the last round (compacted at the next).
    compacted_revision: int = 0
    compactions: int = 0
    compact_next: int = 0
