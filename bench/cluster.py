"""The cluster legs: how long a partition is without a leader, and what a claim cycle costs in a cluster.

Failover. Three etcd members (`--pre-vote`, heartbeat 50 ms, election timeout 500 ms: the tuned
timing of `docs/cluster.md`) and three `runstate serve` nodes with `--cluster-lease-s 1`. Each trial
finds the leader of the `default` space's partition, keeps a connection open to another node,
SIGKILLs the leader and from that moment writes (creates a run) through the other node until one is
acknowledged: the figure is the time from the signal to that acknowledgement, so it includes the
session's expiry, the new leader's campaign and catch-up, and the forwarded request. The victim is
started again and the cluster settles (every partition back on its preferred node) before the next
trial.

Claim cycles. The harness's claim cycle (acquire + release, one connection per worker, 16 workers)
against a single node with its local WAL (`--fsync batch`) and, in the same run, against the
cluster: straight to the leader of the space's partition, and through another node (forwarded).
The cluster's CPU per cycle is every node's plus every etcd member's, judged against the single
node's, and forwarded against straight to the leader (`cost_ratios`); the single node and the
cycle straight to the leader run again with `CONCURRENCY_MANY` connections, where more records
share each etcd transaction. Then four spaces, one on each partition, loaded together, first on a
cluster of one node and then of three (the same etcd; the two new nodes take their share of the
partitions): how throughput grows with nodes. On a machine
of two cores the load generator, three etcd members and the nodes share those two cores, so adding
nodes adds no CPU: that row shows what the hand-off costs and what forwarding saves, not the
scaling a cluster on separate machines would have.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import statistics
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Iterator

import httpx

from .harness import ClaimSession, HarnessResult, drive
from .procs import Processes, cpu_seconds
from .report import USABLE_CPUS
from .targets import Target, create_scope, data_root, start_runstate

FAILOVER_TARGET_S = 2.0
# CPU per claim cycle: a cluster's straight to the leader (all nodes and etcd's members) over a
# single node's, and one through another node over one straight to the leader.
DIRECT_CPU_TARGET = 2.5
FORWARDED_CPU_TARGET = 1.5
SPACE = "default"
CONCURRENCY = 16
# The same cycle with many callers at once, straight to the leader (and on a single node beside it):
# more records go into each etcd transaction, so etcd's share of a cycle falls.
CONCURRENCY_MANY = 128


@contextlib.contextmanager
def unpinned() -> Iterator[None]:
    """Processes started inside inherit every usable core, not the load generator's one."""
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, USABLE_CPUS)
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


@contextlib.contextmanager
def cluster(nodes: int, root: Path, *, etcd_members: int = 3, extra: tuple[str, ...] = ()) -> Iterator["Cluster"]:
    # The cluster's processes are the tests' (real etcd members, real nodes): one way to start them.
    from tests.cluster.nodes import ClusterNodes
    from tests.etcd import EtcdCluster

    (root / "etcd").mkdir(parents=True, exist_ok=True)
    (root / "nodes").mkdir(parents=True, exist_ok=True)
    with unpinned():
        etcd = EtcdCluster(etcd_members, root=root / "etcd").start()
    try:
        made = ClusterNodes(etcd, nodes, root / "nodes", extra=("--cluster-lease-s", "1", *extra))
        with unpinned():
            made.start()
        try:
            made.wait_ready(60)
            yield Cluster(etcd, made)
        finally:
            made.close()
    finally:
        etcd.close()


@dataclass
class Cluster:
    etcd: object
    nodes: object

    def pids(self) -> tuple[list[int], list[int]]:
        """The live nodes' and etcd members' process ids."""
        nodes = [node.process.proc.pid for node in self.nodes.live()]  # type: ignore[attr-defined]
        members = [member.proc.pid for member in self.etcd.members if member.alive]  # type: ignore[attr-defined]
        return nodes, members

    def target(self, node, space: str = SPACE, api_key: str | None = None) -> Target:  # type: ignore[no-untyped-def]
        from tests.cluster.nodes import API_KEY

        proc = SimpleNamespace(pid=node.process.proc.pid)
        return Target(f"cluster-{node.name}", node.url, proc, api_key=api_key or API_KEY, space=space)  # type: ignore[arg-type]

    def start_node(self, node) -> None:  # type: ignore[no-untyped-def]
        with unpinned():
            node.start()


# -- failover ------------------------------------------------------------------------------------


def failover_trials(trials: int, say=print) -> list[float]:  # type: ignore[no-untyped-def]
    """Seconds from SIGKILL of the space's partition leader to the first write acknowledged through
    another node, per trial."""
    import signal

    times: list[float] = []
    with tempfile.TemporaryDirectory(prefix="bench-failover-", dir=data_root()) as root, cluster(3, Path(root)) as made:
        nodes = made.nodes
        for trial in range(trials):
            victim = nodes.leader_of(SPACE)  # type: ignore[attr-defined]
            other = next(node for node in nodes.live() if node is not victim)  # type: ignore[attr-defined]
            with other.client(timeout_s=10) as http:
                _write(http)  # the connection is open and the path warm before the fault
                victim.signal(signal.SIGKILL)
                began = time.perf_counter()
                while True:
                    try:
                        if _write(http).status_code == 201:
                            break
                    except httpx.HTTPError:
                        pass
                    if time.perf_counter() - began > 30:
                        raise RuntimeError(f"no write was acknowledged within 30 s of killing {victim.name}")
                    time.sleep(0.005)
                elapsed = time.perf_counter() - began
            times.append(elapsed)
            say(f"bench: failover trial {trial + 1}/{trials}: {victim.name} killed, a write through {other.name} after {elapsed:.3f} s")
            victim.kill()  # reaps it
            made.start_node(victim)
            nodes.wait_ready(60)  # type: ignore[attr-defined]
    return times


def _write(http: httpx.Client) -> httpx.Response:
    return http.post(f"/v1/spaces/{SPACE}/scopes", json={"name": "failover"}, headers={"idempotency-key": uuid.uuid4().hex})


# -- claim cycles --------------------------------------------------------------------------------


@dataclass
class Measured:
    label: str
    cycles_per_s: float
    p50_ms: float
    p99_ms: float
    node_cpu_per_cycle_ms: float
    etcd_cpu_per_cycle_ms: float
    # Of a node that neither leads the partition nor takes the requests (it applies the log it
    # watches), each: part of `node_cpu_per_cycle_ms`. 0 when there is none.
    standby_cpu_per_cycle_ms: float = 0.0
    connections: int = CONCURRENCY
    # Of the partition's leader, and of the node the requests are sent to when it is another (it
    # forwards them): parts of `node_cpu_per_cycle_ms`. 0 when not measured apart.
    leader_cpu_per_cycle_ms: float = 0.0
    forwarder_cpu_per_cycle_ms: float = 0.0

    def figure(self) -> str:
        cost = f"server CPU {self.node_cpu_per_cycle_ms:.3f} ms/cycle"
        parts = [f"{ms:.3f} ms {who}" for ms, who in (
            (self.leader_cpu_per_cycle_ms, "the leader"), (self.forwarder_cpu_per_cycle_ms, "the node forwarding"),
            (self.standby_cpu_per_cycle_ms, "each standby"),
        ) if ms]
        if parts:
            cost += f" (of which {', '.join(parts)})"
        if self.etcd_cpu_per_cycle_ms:
            cost += f" + etcd {self.etcd_cpu_per_cycle_ms:.3f} ms"
        return f"{self.cycles_per_s:,.0f} cycles/s, p50 {self.p50_ms:.2f} ms, p99 {self.p99_ms:.2f} ms; {cost}"

    @property
    def cpu_per_cycle_ms(self) -> float:
        """Every process's CPU per cycle: the nodes' and etcd's members'."""
        return self.node_cpu_per_cycle_ms + self.etcd_cpu_per_cycle_ms


@dataclass
class CostRatio:
    """One judged ratio of CPU per claim cycle, and its parts (the nodes' and etcd's)."""

    leg: str
    figure: str
    ratio: float
    target: float | None  # None: shown, not judged


SINGLE = "single node, --fsync batch"
DIRECT = "3-node cluster, to the partition's leader"
FORWARDED = "3-node cluster, through another node"


def _direct_over_single(single: Measured, direct: Measured, target: float | None) -> CostRatio:
    base = max(single.cpu_per_cycle_ms, 1e-9)
    return CostRatio(
        f"CPU per claim cycle: 3-node cluster to the partition's leader (nodes + etcd) / single node, {direct.connections} conn",
        f"{direct.node_cpu_per_cycle_ms:.3f} + {direct.etcd_cpu_per_cycle_ms:.3f} = {direct.cpu_per_cycle_ms:.3f} ms "
        f"against {single.cpu_per_cycle_ms:.3f} ms: the nodes {direct.node_cpu_per_cycle_ms / base:.2f}x, "
        f"etcd's members {direct.etcd_cpu_per_cycle_ms / base:.2f}x",
        direct.cpu_per_cycle_ms / base, target,
    )


def cost_ratios(measured: list[Measured]) -> list[CostRatio]:
    """What the cluster's claim cycle costs against a single node's and through another node
    against straight to the leader, each in CPU per cycle, with etcd's share given apart (a
    cluster straight to the leader can come no nearer a single node than etcd's share allows).
    Judged at the leg's `CONCURRENCY`; shown with `CONCURRENCY_MANY` callers too, where there are
    such rows."""
    found = {(row.label, row.connections): row for row in measured}
    single, direct, forwarded = (found[label, CONCURRENCY] for label in (SINGLE, DIRECT, FORWARDED))
    ratios = [
        _direct_over_single(single, direct, DIRECT_CPU_TARGET),
        CostRatio(
            f"CPU per claim cycle: through another node / to the partition's leader (nodes + etcd), {CONCURRENCY} conn",
            f"{forwarded.node_cpu_per_cycle_ms:.3f} + {forwarded.etcd_cpu_per_cycle_ms:.3f} = {forwarded.cpu_per_cycle_ms:.3f} ms "
            f"against {direct.cpu_per_cycle_ms:.3f} ms",
            forwarded.cpu_per_cycle_ms / max(direct.cpu_per_cycle_ms, 1e-9), FORWARDED_CPU_TARGET,
        ),
    ]
    if (SINGLE, CONCURRENCY_MANY) in found and (DIRECT, CONCURRENCY_MANY) in found:
        ratios.append(_direct_over_single(found[SINGLE, CONCURRENCY_MANY], found[DIRECT, CONCURRENCY_MANY], None))
    return ratios


class SteadyClaims:
    """The claim cycle of `ClaimSession`, going on through a leader change: a cycle refused (a
    failover or a hand-off on a loaded machine) is counted and the next one takes another key
    (the one refused may still be held until its lease ends)."""

    refused = 0

    def __init__(self, target: Target, scope_id: str, worker: int) -> None:
        self.target, self.scope_id, self.worker = target, scope_id, worker
        self.session = ClaimSession(target, scope_id, worker)

    async def open(self) -> "SteadyClaims":
        await self.session.open()
        return self

    async def cycle(self) -> None:
        try:
            await self.session.cycle()
        except RuntimeError:
            SteadyClaims.refused += 1
            await self.session.close()
            self.session = await ClaimSession(self.target, self.scope_id, self.worker * 1000 + SteadyClaims.refused).open()
            await asyncio.sleep(0.2)

    async def close(self) -> None:
        await self.session.close()


def measure(label: str, targets: list[Target], node_pids: list[int], etcd_pids: list[int], seconds: float,
            warmup_s: float, session: type = ClaimSession, standby_pids: tuple[int, ...] = (),
            concurrency: int = CONCURRENCY, leader_pid: int | None = None, forwarder_pid: int | None = None) -> Measured:
    """The claim cycle over `targets` (worker i on targets[i % len]), with the CPU of the given
    processes; among `node_pids`, given apart: `standby_pids` (each), the partition's leader and
    the node that forwards the requests to it."""
    apart = [[pid] if pid is not None else [] for pid in (leader_pid, forwarder_pid)]

    async def run() -> tuple[HarnessResult, float, float, float, list[float]]:
        scopes = [await create_scope(target, "bench") for target in targets]

        async def make(i: int) -> ClaimSession:
            return await session(targets[i % len(targets)], scopes[i % len(targets)], i).open()

        # drive() measures the CPU of one process in its window; here it is the sum over several,
        # so the window is the whole measured call (after a warm-up run of its own).
        await drive(label, make, concurrency=concurrency, duration_s=warmup_s, warmup_s=0, server_pid=None)
        nodes_before, etcd_before, standby_before = _cpu(node_pids), _cpu(etcd_pids), _cpu(list(standby_pids))
        apart_before = [_cpu(pids) for pids in apart]
        result = await drive(label, make, concurrency=concurrency, duration_s=seconds, warmup_s=0, server_pid=None)
        return (result, _cpu(node_pids) - nodes_before, _cpu(etcd_pids) - etcd_before, _cpu(list(standby_pids)) - standby_before,
                [_cpu(pids) - before for pids, before in zip(apart, apart_before)])

    result, node_cpu, etcd_cpu, standby_cpu, (leader_cpu, forwarder_cpu) = asyncio.run(asyncio.wait_for(run(), seconds + warmup_s + 120))
    cycles = max(result.cycles, 1)
    standby_each = standby_cpu / len(standby_pids) if standby_pids else 0.0
    return Measured(label, result.cycles_per_s, result.p50_ms, result.p99_ms, node_cpu / cycles * 1000, etcd_cpu / cycles * 1000,
                    standby_each / cycles * 1000, concurrency, leader_cpu / cycles * 1000, forwarder_cpu / cycles * 1000)


def _cpu(pids: list[int]) -> float:
    return sum(cpu_seconds(pid) for pid in pids)


def claim_cycles(procs: Processes, seconds: float, warmup_s: float, say=print) -> list[Measured]:  # type: ignore[no-untyped-def]
    results: list[Measured] = []
    with unpinned():
        single = start_runstate(procs, "single-node", fsync="batch", data_root=data_root())
    for concurrency in (CONCURRENCY, CONCURRENCY_MANY):
        results.append(measure(SINGLE, [single], [single.pid], [], seconds, warmup_s, concurrency=concurrency))
        say(f"bench: {results[-1].label}, {concurrency} conn: {results[-1].figure()}")
    procs.stop(single.proc)
    with tempfile.TemporaryDirectory(prefix="bench-cluster-", dir=data_root()) as root, cluster(3, Path(root)) as made:
        nodes, members = made.pids()
        leader = made.nodes.leader_of(SPACE)  # type: ignore[attr-defined]
        other = next(node for node in made.nodes.live() if node is not leader)  # type: ignore[attr-defined]
        for label, node, concurrency in ((DIRECT, leader, CONCURRENCY), (FORWARDED, other, CONCURRENCY), (DIRECT, leader, CONCURRENCY_MANY)):
            standbys = tuple(n.process.proc.pid for n in made.nodes.live() if n is not leader and n is not node)  # type: ignore[attr-defined]
            results.append(measure(label, [made.target(node)], nodes, members, seconds, warmup_s, standby_pids=standbys,
                                   leader_pid=leader.process.proc.pid,  # type: ignore[attr-defined]
                                   forwarder_pid=None if node is leader else node.process.proc.pid,  # type: ignore[attr-defined]
                                   concurrency=concurrency))
            say(f"bench: {results[-1].label}, {concurrency} conn: {results[-1].figure()}")
    with tempfile.TemporaryDirectory(prefix="bench-growth-", dir=data_root()) as root, cluster(1, Path(root)) as made:
        spaces, key = _spaces_on_every_partition(made)
        for size in (1, 3):
            if size == 3:
                _grow(made, 3, Path(root))
            leaders = made.nodes.map()  # type: ignore[attr-defined]
            by_name = {node.name: node for node in made.nodes.live()}  # type: ignore[attr-defined]
            targets = [made.target(by_name[leaders[made.nodes.layout.of(space)]], space, key) for space in spaces]  # type: ignore[attr-defined]
            nodes, members = made.pids()
            label = f"{len(spaces)} spaces on {len(spaces)} partitions, {size} node{'s' if size > 1 else ''}, each to its leader"
            results.append(measure(label, targets, nodes, members, seconds, warmup_s))
            say(f"bench: {results[-1].label}, {CONCURRENCY} conn: {results[-1].figure()}")
    return results


def _led_by_live_nodes(made: Cluster, timeout_s: float = 60) -> tuple[dict, dict]:
    """The map once every partition is led by a live node, and the live nodes by name: on a loaded
    machine a partition can still be changing hands (a session lapsed at start) when the load begins."""
    deadline = time.monotonic() + timeout_s
    while True:
        leaders = made.nodes.map()  # type: ignore[attr-defined]
        by_name = {node.name: node for node in made.nodes.live()}  # type: ignore[attr-defined]
        if all(leader in by_name for leader in leaders.values()):
            return leaders, by_name
        if time.monotonic() > deadline:
            raise RuntimeError(f"a partition had no live leader for {timeout_s:.0f} s: {leaders}")
        time.sleep(0.2)


def _spaces_on_every_partition(made: Cluster) -> tuple[list[str], str]:
    """A space on each partition but the system one (0), and one key for all of them."""
    from tests.cluster.nodes import ADMIN_KEY

    layout = made.nodes.layout  # type: ignore[attr-defined]
    wanted = set(range(1, made.nodes.partitions + 1))  # type: ignore[attr-defined]
    spaces: dict[int, str] = {}
    for index in range(100_000):
        partition = layout.of(f"bench-{index}")
        if partition in wanted and partition not in spaces:
            spaces[partition] = f"bench-{index}"
        if len(spaces) == len(wanted):
            break
    node = made.nodes.live()[0]  # type: ignore[attr-defined]
    answer = httpx.post(node.url + "/v1/admin/keys", json={"spaces": sorted(spaces.values())},
                        headers={"authorization": f"Bearer {ADMIN_KEY}"}, timeout=15)
    if answer.status_code != 201:
        raise RuntimeError(f"making a key answered {answer.status_code}: {answer.text}")
    return [spaces[p] for p in sorted(spaces)], answer.json()["key"]


def _grow(made: Cluster, size: int, root: Path) -> None:
    """Add nodes until the cluster has `size`, and wait until the partitions have spread over them."""
    from tests.cluster.nodes import Node

    nodes = made.nodes
    while len(nodes.nodes) < size:  # type: ignore[attr-defined]
        node = Node(made.etcd, len(nodes.nodes), root / "nodes", nodes.partitions, ("--cluster-lease-s", "1"))  # type: ignore[arg-type,attr-defined]
        nodes.nodes.append(node)  # type: ignore[attr-defined]
        made.start_node(node)
    nodes.wait_ready(60)  # type: ignore[attr-defined]


# -- etcd's size under a sustained load ------------------------------------------------------------

# The nodes' budget for the partitions' logs in etcd in this leg: small, so that snapshots and trims
# go round many times within a short run (the default, 256 MiB, takes hours to fill at this rate).
ETCD_LOG_BYTES_MAX = 4 << 20
ETCD_SAMPLE_EVERY_S = 5.0


@dataclass
class EtcdSize:
    seconds: float
    cycles: int
    written_bytes: int  # of log the leaders committed (their /metrics)
    log_bytes_max: int
    samples: list[tuple[float, int, int]]  # (seconds into the run, db size, db size in use), the largest member's
    refused: int = 0  # cycles refused during a leader change (then taken up again on another key)

    def figure(self) -> str:
        sizes = [size for _, size, _ in self.samples]
        half = [size for at, size, _ in self.samples if at >= self.seconds / 2]
        mib = 1 << 20
        return (f"{self.written_bytes / mib:,.0f} MiB of log written in {self.seconds / 60:.0f} min "
                f"({self.cycles:,} claim cycles); etcd db {sizes[0] / mib:.1f} MiB after 1 min, max {max(sizes) / mib:.1f} MiB, "
                f"last {sizes[-1] / mib:.1f} MiB (in use {self.samples[-1][2] / mib:.1f}); second half grew "
                f"{(max(half) - min(half)) / mib:.1f} MiB" + (f"; {self.refused} cycle(s) refused in a leader change" if self.refused else ""))

    def bound_bytes(self) -> int:
        """What docs/cluster.md states etcd's database stays under for a log budget of `log_bytes_max`."""
        return etcd_db_bound(self.log_bytes_max)


def etcd_db_bound(log_bytes_max: int) -> int:
    """The bound docs/cluster.md states: three times the logs' budget (etcd's pages hold about twice
    what is put in them, and the history of one trim interval waits for the next compaction),
    plus 64 MiB for everything else (the members' own keys, the nodes' keys, free pages)."""
    return 3 * log_bytes_max + (64 << 20)


def etcd_size(seconds: float, say=print) -> EtcdSize:  # type: ignore[no-untyped-def]
    """Claim cycles through every partition's leader for `seconds` on three nodes and three etcd
    members, etcd's database size sampled every few seconds; the nodes' log budget is small
    (ETCD_LOG_BYTES_MAX), so snapshots, trims and compactions go round many times."""
    import threading

    extra = ("--cluster-log-bytes-max", str(ETCD_LOG_BYTES_MAX))
    samples: list[tuple[float, int, int]] = []
    with tempfile.TemporaryDirectory(prefix="bench-etcd-size-", dir=data_root()) as root, \
            cluster(3, Path(root), extra=extra) as made:
        spaces, key = _spaces_on_every_partition(made)
        leaders, by_name = _led_by_live_nodes(made)
        targets = [made.target(by_name[leaders[made.nodes.layout.of(space)]], space, key) for space in spaces]  # type: ignore[attr-defined]
        before = _log_bytes(made)
        began = time.monotonic()
        done = threading.Event()

        def sample() -> None:
            while not done.wait(ETCD_SAMPLE_EVERY_S):
                statuses = [member.status(5) for member in made.etcd.members]  # type: ignore[attr-defined]
                sizes = [(int(s.get("dbSize", 0)), int(s.get("dbSizeInUse", 0))) for s in statuses if s]
                if sizes:
                    at = time.monotonic() - began
                    samples.append((at, *max(sizes)))
                    if len(samples) % 12 == 0:
                        say(f"bench: etcd size after {at:.0f} s: {max(sizes)[0] / (1 << 20):.1f} MiB")

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        try:
            measured = measure("etcd size", targets, *made.pids(), seconds, 0, session=SteadyClaims)
        finally:
            done.set()
            sampler.join(10)
        written = _log_written(before, _log_bytes(made))
    kept = [entry for entry in samples if entry[0] >= 60] or samples
    return EtcdSize(seconds, round(measured.cycles_per_s * seconds), written, ETCD_LOG_BYTES_MAX, kept, SteadyClaims.refused)


def _log_bytes(made: Cluster) -> dict[tuple[str, int], int]:
    """Bytes of each partition's log each live node applied or committed so far, by (node, partition)
    (`runstate_cluster_log_written_bytes_total`). Every node applies every batch of every partition,
    leader or not, so each node's counter covers the whole log from its start."""
    import re

    counters: dict[tuple[str, int], int] = {}
    for node in made.nodes.live():  # type: ignore[attr-defined]
        try:
            text = httpx.get(node.url + "/metrics", timeout=10).text
        except httpx.HTTPError:
            continue  # a node that does not answer now is left out of this read
        for number, value in re.findall(r'^runstate_cluster_log_written_bytes_total\{partition="(\d+)"\} (\S+)', text, re.M):
            counters[(node.name, int(number))] = int(float(value))
    return counters


def _log_written(before: dict[tuple[str, int], int], after: dict[tuple[str, int], int]) -> int:
    """The log written between two reads: per partition, the most any one node's counter grew.

    Each counter is compared only with itself (a node's own, read twice): the leaders at the end
    need not be those at the start (a leader change on a loaded machine), a partition may have no
    node serving it at the moment of a read, and a restarted node's counter starts again from 0;
    summing the leaders' counters at each end mixed counters of different nodes, or left a partition
    out of one read only, and once read a negative figure ("-0 MiB of log written")."""
    grown: dict[int, int] = {}
    for (name, number), value in after.items():
        if (name, number) in before:
            grown[number] = max(grown.get(number, 0), value - before[(name, number)])
    return sum(grown.values())


def summary(times: list[float]) -> tuple[float, float]:
    return statistics.median(times), max(times)


__all__ = ["DIRECT_CPU_TARGET", "FAILOVER_TARGET_S", "CONCURRENCY", "CONCURRENCY_MANY", "FORWARDED_CPU_TARGET", "Measured", "claim_cycles", "cost_ratios", "etcd_db_bound", "etcd_size", "failover_trials", "summary"]
