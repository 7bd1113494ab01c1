"""Prometheus metrics: cheap to count per request, everything else read from the state when scraped.

Two kinds of metric, kept apart on purpose:

- **Counted as it happens**, on the request path and in the journal: requests and their latency,
  WAL append and fsync latency, snapshot duration. A request adds to plain numbers kept per route
  (`RouteMetrics`: its count per status code, its latency buckets and sum), which `RequestCollector`
  turns into the counter and histogram families when scraped: a dict update, a bisect and two
  additions, about 0.3 µs timed alone, where prometheus-client's own counter and histogram (a lock
  per value, a walk over the buckets) took 1.7 µs (`bench/request_cost.py` times a request's whole
  instrumentation). The request path runs in the event loop, and so does the scrape (`GET
  /metrics`), so they need no lock between them. The journal's metrics, fed from its worker
  thread, keep prometheus-client's own (locked) ones.
- **Read when scraped** (`StateCollector`): live claims, usage counters, expiries and takeovers,
  supervisor fires, idempotent replays, actors, queued and running tasks. They cost nothing
  between scrapes. Counts that come from the state's usage counters (`runstate_operations_total`,
  expiries, takeovers) are replayed from the journal, so they survive restarts instead of starting
  again from zero.

Hooks for the other parts of the server:
- `JournalMetrics` (`Metrics.journal`): `append(seconds)`, `fsync(seconds)` and `snapshot(seconds)`.
  The server feeds them with `MeteredDisk`, the journal's `Disk` timing the WAL's own writes and
  fsyncs (in the journal's worker thread; prometheus-client's metrics take a lock, so that is
  safe), and with the store's `on_snapshot`. Without a data directory they stay empty.
- `Metrics.add_source(read)`: `read(state, now_ms)` yields more metric families at scrape time.
  The queue's gauges (`queue_families`) are one: they read each space's mailboxes if it has any.
"""

from __future__ import annotations

import os
import time
from bisect import bisect_left
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Mapping

import trio
from prometheus_client import CollectorRegistry, Counter, Histogram, ProcessCollector, generate_latest
from prometheus_client import disable_created_metrics
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.utils import floatToGoString

from ..actors import caps
from ..actors.usage import EXPIRIES
from ..snapshots.disk import Disk
from ..snapshots.history import kept
from .capacity_metrics import capacity_families

if TYPE_CHECKING:
    from ..actors.kernel import Kernel
    from ..actors.space import SpaceState
    from .runtime import Runtime

__all__ = ["Metrics", "RouteMetrics", "RequestCollector", "JournalMetrics", "MeteredDisk", "queue_families", "CONTENT_TYPE"]

# No `_created` series beside every counter: they double the output and nobody graphs them.
disable_created_metrics()  # type: ignore[no-untyped-call]  # prometheus_client leaves it unannotated

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

# Requests are answered in tens of microseconds; long polls wait up to 30 s.
LATENCY_BUCKETS_S = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
# An fsync takes from tens of microseconds (cache) to hundreds of milliseconds (a busy disk).
DISK_BUCKETS_S = (0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
SNAPSHOT_BUCKETS_S = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)
# The request histogram's upper bounds with +Inf last, and their `le` labels as prometheus-client writes them.
_LATENCY_BOUNDS = LATENCY_BUCKETS_S + (float("inf"),)
_LATENCY_LE = tuple(floatToGoString(bound) for bound in _LATENCY_BOUNDS)  # type: ignore[no-untyped-call]  # unannotated there

# Source of more families at scrape time: (state, now_ms) -> families.
Source = Callable[["Mapping[str, SpaceState]", int], Iterable[Metric]]


class RouteMetrics:
    """The counts of one route (or of the requests no route matched, by method): requests by status
    code, and the latency histogram's buckets (not cumulative: one count per bucket, the last
    +Inf) and sum. `RequestCollector` reads them when scraped."""

    __slots__ = ("method", "route", "acquire", "by_status", "buckets", "seconds", "_statuses")

    def __init__(self, method: str, route: str, statuses: list[tuple[RouteMetrics, int]]) -> None:
        self.method = method
        self.route = route
        # Whether the route is a claim acquire (its answer time is charted: `console/charts.py`).
        self.acquire = False
        self.by_status: dict[int, int] = {}
        self.buckets = [0] * len(_LATENCY_BOUNDS)
        self.seconds = 0.0
        # Every (route, status) answered so far, in the order first seen (the families' order).
        self._statuses = statuses

    def observe(self, status: int, seconds: float) -> None:
        by_status = self.by_status
        count = by_status.get(status)
        if count is None:
            self._statuses.append((self, status))
            count = 0
        by_status[status] = count + 1
        # The first bucket whose upper bound is at least `seconds` (Prometheus's `le`).
        self.buckets[bisect_left(_LATENCY_BOUNDS, seconds)] += 1
        self.seconds += seconds


class RequestCollector:
    """`runstate_http_requests_total{method,route,status}` and
    `runstate_http_request_duration_seconds{method,route}`, from the routes' `RouteMetrics`: the
    same families, samples and order that prometheus-client's `Counter` and `Histogram` write."""

    def __init__(self) -> None:
        self._routes: dict[tuple[str, str], RouteMetrics] = {}
        self._statuses: list[tuple[RouteMetrics, int]] = []

    def route(self, method: str, route: str) -> RouteMetrics:
        """The counts of (method, route), made on first use; the same object every time after."""
        bound = self._routes.get((method, route))
        if bound is None:
            bound = self._routes[(method, route)] = RouteMetrics(method, route, self._statuses)
        return bound

    def describe(self) -> list[Metric]:
        return list(self._families())

    def collect(self) -> Iterator[Metric]:
        requests, latency = self._families()
        for bound, status in self._statuses:
            requests.add_metric([bound.method, bound.route, str(status)], bound.by_status[status])
        for bound in self._routes.values():
            cumulative = 0
            buckets = []
            for le, count in zip(_LATENCY_LE, bound.buckets):
                cumulative += count
                buckets.append((le, cumulative))
            latency.add_metric([bound.method, bound.route], buckets, bound.seconds)
        yield requests
        yield latency

    @staticmethod
    def _families() -> tuple[CounterMetricFamily, HistogramMetricFamily]:
        return (
            CounterMetricFamily(
                "runstate_http_requests", "HTTP requests answered, by method, route pattern and status code.",
                labels=["method", "route", "status"],
            ),
            HistogramMetricFamily(
                "runstate_http_request_duration_seconds", "Time from a request's arrival to its answer, by method and route pattern.",
                labels=["method", "route"],
            ),
        )


class JournalMetrics:
    """What the journal reports: append and fsync latency, snapshot duration."""

    __slots__ = ("append", "fsync", "snapshot", "errors")

    def __init__(self, registry: CollectorRegistry) -> None:
        self.append = Histogram(
            "runstate_wal_append_seconds", "Time to write one batch of records to the WAL (before any fsync).",
            buckets=DISK_BUCKETS_S, registry=registry,
        ).observe
        self.fsync = Histogram(
            "runstate_wal_fsync_seconds", "Time of one fsync of the WAL.", buckets=DISK_BUCKETS_S, registry=registry,
        ).observe
        self.snapshot = Histogram(
            "runstate_snapshot_duration_seconds", "Time to write one snapshot, from start to its rename.",
            buckets=SNAPSHOT_BUCKETS_S, registry=registry,
        ).observe
        # A WAL write or fsync that failed: from then on the journal refuses changes until it has
        # repaired itself (`runstate_journal_refusing`). Both series are shown from 0, so that
        # `increase()` (the alert's) sees the first error: a series that appears at 1 has no rise.
        self.errors = Counter(
            "runstate_wal_errors", "WAL writes and fsyncs that failed, by operation.", ["operation"], registry=registry,
        )
        for operation in ("write", "fsync"):
            self.errors.labels(operation)


class MeteredDisk(Disk):
    """The journal's disk, timing the writes and fsyncs of WAL segments (not those of snapshots)."""

    def __init__(self, journal: JournalMetrics, fsync_slow_ms: float = 100.0) -> None:
        super().__init__(fsync_slow_ms)
        self._journal = journal
        self._wal_fds: set[int] = set()

    def _track(self, fd: int, path: str) -> int:
        # A segment lives in a partition's `wal` folder; a snapshot, in its `snapshots` folder.
        if os.path.basename(os.path.dirname(os.path.abspath(path))) == "wal":
            self._wal_fds.add(fd)
        return fd

    def create(self, path: str) -> int:
        return self._track(super().create(path), path)

    def open_write(self, path: str) -> int:
        return self._track(super().open_write(path), path)

    def close(self, fd: int) -> None:
        self._wal_fds.discard(fd)
        super().close(fd)

    def write(self, fd: int, data: bytes | memoryview) -> None:
        if fd not in self._wal_fds:
            return super().write(fd, data)
        started = time.perf_counter()
        try:
            super().write(fd, data)
        except OSError:
            self._journal.errors.labels("write").inc()
            raise
        self._journal.append(time.perf_counter() - started)

    def fsync(self, fd: int, what: str = "") -> None:
        if fd not in self._wal_fds:
            return super().fsync(fd, what)
        started = time.perf_counter()
        try:
            super().fsync(fd, what)
        except OSError:
            self._journal.errors.labels("fsync").inc()
            raise
        self._journal.fsync(time.perf_counter() - started)


class Metrics:
    def __init__(self, *, process: bool = True) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = RequestCollector()
        self.registry.register(self.requests)
        self.journal = JournalMetrics(self.registry)
        self.state = StateCollector()
        self.registry.register(self.state)
        if process:
            ProcessCollector(registry=self.registry)

    def route(self, method: str, route: str) -> RouteMetrics:
        return self.requests.route(method, route)

    def add_source(self, read: Source) -> None:
        self.state.sources.append(read)

    def render(self) -> bytes:
        return generate_latest(self.registry)


class StateCollector:
    """Families read from the running server at scrape time."""

    def __init__(self) -> None:
        self.runtime: "Runtime | None" = None
        self.sources: list[Source] = [queue_families, cap_families, capacity_families]
        from .coordination_metrics import coordination_families

        self.sources.append(coordination_families)

    def describe(self) -> list[Metric]:
        return []  # families depend on what the state holds; nothing to check at registration

    def collect(self) -> Iterator[Metric]:
        runtime = self.runtime
        if runtime is None:
            return
        ready = GaugeMetricFamily("runstate_ready", "1 once the state is recovered and the server answers, else 0.")
        ready.add_metric([], 1 if runtime.ready else 0)
        yield ready
        in_flight = GaugeMetricFamily("runstate_http_requests_in_flight", "Requests being answered now (long polls included).")
        in_flight.add_metric([], runtime.telemetry.in_flight)
        yield in_flight
        kernel = runtime.kernel_if_open
        if kernel is None:
            return
        refusing = GaugeMetricFamily(
            "runstate_journal_refusing", "1 while /healthz is 503 for a partition (a WAL write or fsync failed and it repairs "
            "itself, it could not be opened at the start, or a cluster's node cannot serve it), else 0."
        )
        refusing.add_metric([], 1 if runtime.journal_refusal() is not None else 0)
        yield refusing
        doors = runtime.doors
        connections = GaugeMetricFamily("runstate_connections", "Connections open now (connections_max bounds them).")
        connections.add_metric([], doors.connections)
        yield connections
        turned = CounterMetricFamily(
            "runstate_connections_turned_away",
            "Connections ended by the doors, by why: refused at connections_max (refused), closed to make room for a new one "
            "(evicted: it had shown no valid key), a request head too slow (header_timeout), not valid HTTP/1.1 (protocol_error).",
            labels=["reason"],
        )
        for reason, count in (("refused", doors.connections_refused), ("evicted", doors.connections_evicted),
                              ("header_timeout", doors.header_timeouts), ("protocol_error", doors.protocol_errors)):
            turned.add_metric([reason], count)
        yield turned
        cluster = runtime.cluster
        if cluster is not None:  # a node of a cluster
            from .cluster_metrics import cluster_families

            yield from cluster_families(cluster)
        yield from _kernel_families(kernel)
        yield from history_families(runtime)
        now_ms = kernel.clock.now_ms()
        spaces = {space.id: space for space in kernel.spaces()}
        yield from _space_families(spaces, now_ms)
        for read in self.sources:
            yield from read(spaces, now_ms)


def history_families(runtime: Runtime) -> Iterator[Metric]:
    """What the history kept costs (`history_retention_s`): each partition's snapshots and WAL on
    disk and the oldest point they rebuild, read from its folder at scrape time; and the history
    reads served (each a rebuild)."""
    history = getattr(runtime, "history", None)
    if history is None:
        return
    stores = history.stores()
    if stores:
        disk = GaugeMetricFamily(
            "runstate_history_disk_bytes", "Bytes of a partition's snapshots and WAL on disk (what recovery needs and the "
            "history kept), by partition and kind.", labels=["partition", "kind"],
        )
        oldest = GaugeMetricFamily(
            "runstate_history_oldest_timestamp_seconds", "The oldest point a partition's files rebuild, as a Unix time "
            "(0: the very beginning of its journal), by partition.", labels=["partition"],
        )
        for number, store in sorted(stores.items()):
            found = kept(store.data_dir)
            disk.add_metric([str(number), "snapshots"], found.snapshot_bytes)
            disk.add_metric([str(number), "wal"], found.wal_bytes)
            oldest.add_metric([str(number)], 0 if found.oldest_ms is None else found.oldest_ms / 1000)
        yield disk
        yield oldest
    reads = CounterMetricFamily("runstate_history_rebuilds", "Past points rebuilt for history reads (a page's views share one).")
    reads.add_metric([], history.rebuilds)
    yield reads
    seconds = CounterMetricFamily("runstate_history_rebuild_seconds", "Seconds spent rebuilding past points.")
    seconds.add_metric([], history.rebuild_seconds)
    yield seconds


def _kernel_families(kernel: Kernel) -> Iterator[Metric]:
    fires = CounterMetricFamily("runstate_supervisor_fires", "Expiries the supervisor proposed (lease ends, deadlines); stale ones included.")
    armed, fired = kernel.timers()
    fires.add_metric([], fired)
    yield fires
    timers = GaugeMetricFamily("runstate_supervisor_timers", "Timers the supervisor keeps (leases, deadlines).")
    timers.add_metric([], armed)
    yield timers
    replays = CounterMetricFamily("runstate_idempotency_replays", "Requests answered from a stored Idempotency-Key answer instead of being run again.")
    replays.add_metric([], kernel.idempotent_replays)
    yield replays
    turns = CounterMetricFamily("runstate_kernel_turns", "Commands run by the kernel's actors.")
    turns.add_metric([], kernel.turns)
    yield turns
    actors = GaugeMetricFamily("runstate_kernel_actors", "Actors alive now (running a command or holding parked callers).")
    actors.add_metric([], kernel.actors)
    yield actors
    pooled = GaugeMetricFamily("runstate_kernel_actor_tasks_pooled", "Idle actor tasks waiting for a key to serve (not actors; bounded per partition).")
    pooled.add_metric([], kernel.actor_tasks_pooled)
    yield pooled
    tasks = GaugeMetricFamily("runstate_trio_tasks", "Trio tasks alive in the server (connections, requests, actors, timers): flat under a steady load.")
    tasks.add_metric([], trio.lowlevel.current_statistics().tasks_living)
    yield tasks
    keys = GaugeMetricFamily("runstate_api_keys", "API keys registered, by state.", labels=["state"])
    revoked = sum(1 for key in kernel.keys.all() if key.revoked_ms is not None)
    keys.add_metric(["active"], len(kernel.keys) - revoked)
    keys.add_metric(["revoked"], revoked)
    yield keys


def _space_families(spaces: "Mapping[str, SpaceState]", now_ms: int) -> Iterator[Metric]:
    live = GaugeMetricFamily("runstate_claims_live", "Claims held now, with a lease that has not ended.", labels=["space"])
    operations = CounterMetricFamily(
        "runstate_operations", "Operations done, by space and operation, as counted for usage (renewals not included).",
        labels=["space", "operation"],
    )
    free = CounterMetricFamily("runstate_free_operations", "Operations not counted for usage (renewals), by space.", labels=["space", "operation"])
    expiries = CounterMetricFamily(
        "runstate_expiries", "Claim leases, runs, delivery leases and tasks whose time ran out, by space and kind.", labels=["space", "kind"]
    )
    takeovers = CounterMetricFamily("runstate_claim_takeovers", "Claims acquired after the previous holder's lease expired.", labels=["space"])
    for space_id, space in spaces.items():
        live.add_metric([space_id], sum(1 for claim in space.claims.held() if claim.held_at(now_ms)))
        usage = space.usage
        for name, count in usage.operations.items():
            operations.add_metric([space_id, name], count)
        for name, count in usage.free.items():
            free.add_metric([space_id, name], count)
        for name, kind in EXPIRIES.items():
            count = usage.events.get(name, 0)
            if count:
                expiries.add_metric([space_id, kind], count)
        takeovers.add_metric([space_id], usage.takeovers)
    yield from (live, operations, free, expiries, takeovers)


def queue_families(spaces: "Mapping[str, SpaceState]", now_ms: int) -> Iterator[Metric]:
    """Queued and running work per mailbox, and deliveries in flight, from each space's mailboxes.

    A space without mailboxes (a server built without the queue) yields the families empty.
    """
    queued = GaugeMetricFamily("runstate_tasks_queued", "Messages and tasks waiting for a worker, by mailbox (retry backoff included).", labels=["space", "mailbox"])
    running = GaugeMetricFamily("runstate_tasks_running", "Messages and tasks a worker holds under a lease, by mailbox.", labels=["space", "mailbox"])
    in_flight = GaugeMetricFamily("runstate_deliveries_in_flight", "Deliveries handed out and not yet settled, by space.", labels=["space"])
    dead = GaugeMetricFamily("runstate_dead_letters", "Dead letters kept, by mailbox.", labels=["space", "mailbox"])
    oldest = GaugeMetricFamily(
        "runstate_queue_oldest_age_seconds", "Age of the oldest message or task waiting for a worker, by mailbox (0 when none waits).",
        labels=["space", "mailbox"],
    )
    for space_id, space in spaces.items():
        mailboxes = getattr(space, "mailboxes", None)
        if mailboxes is None:
            continue
        leased_total = 0
        waiting_since = space.messages.oldest_waiting_ms()
        for mailbox in mailboxes.all():
            queued.add_metric([space_id, mailbox.name], mailbox.queued + mailbox.delayed)
            running.add_metric([space_id, mailbox.name], mailbox.leased)
            dead.add_metric([space_id, mailbox.name], mailbox.dead)
            since_ms = waiting_since.get(mailbox.id)
            oldest.add_metric([space_id, mailbox.name], 0 if since_ms is None else max(0, now_ms - since_ms) / 1000)
            leased_total += mailbox.leased
        in_flight.add_metric([space_id], leased_total)
    yield from (queued, running, in_flight, dead, oldest)


def cap_families(spaces: "Mapping[str, SpaceState]", now_ms: int) -> Iterator[Metric]:
    """How full each space is against its caps (`GET /caps`): what it holds and the limit."""
    held = GaugeMetricFamily("runstate_space_cap_held", "What a space holds against each of its caps, by setting.", labels=["space", "setting"])
    limit = GaugeMetricFamily("runstate_space_cap_limit", "The limit of each cap of a space, by setting.", labels=["space", "setting"])
    for space_id, space in spaces.items():
        for row in caps.view(space)["caps"]:
            held.add_metric([space_id, row["setting"]], row["held"])
            limit.add_metric([space_id, row["setting"]], row["limit"])
    yield from (held, limit)
