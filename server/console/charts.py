"""The swarm over time: per space, a ring of per-interval buckets the console draws as charts.

Kept by the server itself in bounded memory, with no Prometheus to run: for each space, every
`INTERVAL_S` seconds one bucket of

- operations done, by kind (claims, renewals, tasks, deliveries, messages, capacity,
  coordination, runs, other), from the space's usage counters (`actors/usage.py`: what the
  journal applied, batches and renewals included);
- claim leases taken over after an expiry, and leases, runs and tasks whose time ran out;
- API requests answered, refused (4xx) and failed (5xx);
- how long claim acquires took to answer (waits for a held claim included), as a histogram
  (`ACQUIRE_BOUNDS_S`), from which the page reads the 50th and 99th percentiles;
- messages and tasks waiting for a worker, and the age of the oldest, sampled at its end.

Two rings per space: `FINE_SLOTS` buckets of `INTERVAL_S` (the last 30 minutes) and
`COARSE_SLOTS` of `COARSE_S` (the last 12 hours), each a flat `array` of 32-bit counts (a bucket
is `FIELDS` numbers), so a space costs `SPACE_BYTES` (about 150 KB) whatever happens in it; at
most `SPACES_MAX` spaces are kept, those with the most recent requests.

The request path pays for none of it but a counter increment: `Telemetry.end` adds to the
space's small list of current counts (`count`), the route's role (a claim acquire or not) bound
ahead of time. `sample`, once an interval, folds those counts and the deltas of the usage
counters into the rings, so the rings are written by one task, never by a request. The lists
of current counts are bounded too (`PENDING_SPACES_MAX`): a client sending requests to spaces
that do not exist makes no chart and cannot push one out.

Kept in memory: a restart starts the charts again. In a cluster each node charts the requests
it answered and the spaces whose state it holds.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left
from collections import OrderedDict
from typing import TYPE_CHECKING, Any, Callable, Iterable

if TYPE_CHECKING:  # (the charts are sampled from the runtime, which imports them)
    from ...actors.space import SpaceState
    from ..runtime import Runtime

__all__ = ["Charts", "Series", "INTERVAL_S", "COARSE_S", "KINDS", "FIELDS", "SPACES_MAX", "SPACE_BYTES"]

INTERVAL_S = 5
FINE_SLOTS = 360  # 30 minutes of INTERVAL_S
COARSE_S = 60
COARSE_SLOTS = 720  # 12 hours of COARSE_S
SPACES_MAX = 64
PENDING_SPACES_MAX = 1024
# Upper bounds of the acquire histogram's buckets (the last is open-ended): 0.5 ms to a minute,
# closer together in seconds, where waits for a held claim (about a lease) fall.
ACQUIRE_BOUNDS_S = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 15.0, 20.0, 30.0,
                    45.0, 60.0)

# Operations by kind: a usage counter's name is `noun.verb`; its noun says its kind.
KINDS = ("claims", "renewals", "tasks", "deliveries", "messages", "capacity", "coordination", "runs", "other")
_KIND_OF_NOUN = {
    "claims": "claims", "once": "claims", "tasks": "tasks", "deliveries": "deliveries", "messages": "messages",
    "mailboxes": "messages", "dead_letters": "messages", "pools": "capacity", "quotas": "capacity", "budgets": "capacity",
    "work_limits": "capacity", "barriers": "coordination", "timers": "coordination", "groups": "coordination",
    "scopes": "runs",
}

# A bucket's fields, in order: the kinds, then the rest, then the acquire histogram.
TAKEOVERS, EXPIRIES, REQUESTS, REFUSED, FAILED, QUEUED, OLDEST_S = range(len(KINDS), len(KINDS) + 7)
ACQUIRES = OLDEST_S + 1
FIELDS = ACQUIRES + len(ACQUIRE_BOUNDS_S) + 1
GAUGES = (QUEUED, OLDEST_S)  # sampled, not counted: a coarse bucket keeps the highest of its samples
COUNT_MAX = 2**32 - 1
SPACE_BYTES = (FINE_SLOTS + COARSE_SLOTS) * (FIELDS * 4 + 8)

# What a request adds to: its space's current counts (see `count`), by position.
_PENDING_FIELDS = (REQUESTS, REFUSED, FAILED, *range(ACQUIRES, FIELDS))
_PENDING = {field: index for index, field in enumerate(_PENDING_FIELDS)}
P_REQUESTS, P_REFUSED, P_FAILED, P_ACQUIRES = (_PENDING[REQUESTS], _PENDING[REFUSED], _PENDING[FAILED], _PENDING[ACQUIRES])


def acquire_bucket(seconds: float) -> int:
    """Where an acquire that took `seconds` counts, as a position in a space's current counts."""
    return P_ACQUIRES + bisect_left(ACQUIRE_BOUNDS_S, seconds)


class _Ring:
    """`slots` buckets of `FIELDS` counts, each stamped with the number of its interval."""

    __slots__ = ("slots", "values", "stamps")

    def __init__(self, slots: int) -> None:
        self.slots = slots
        self.values = array("I", bytes(4 * FIELDS * slots))
        self.stamps = array("q", [-1]) * slots

    def put(self, number: int, bucket: list[int]) -> None:
        assert len(bucket) == FIELDS
        at = (number % self.slots) * FIELDS
        self.values[at:at + FIELDS] = array("I", (min(COUNT_MAX, max(0, value)) for value in bucket))
        self.stamps[number % self.slots] = number

    def get(self, number: int) -> array[int] | None:
        """Bucket `number`, or None when the ring does not hold it (before the charts began, or a
        gap: the server was down, or the space had no chart then)."""
        if self.stamps[number % self.slots] != number:
            return None
        at = (number % self.slots) * FIELDS
        return self.values[at:at + FIELDS]


class Series:
    """The charts of one space: its two rings, the bucket being folded into a coarse one, and
    its usage counters as last seen (to take their deltas)."""

    __slots__ = ("fine", "coarse", "_coarse_number", "_coarse", "_seen", "last")

    def __init__(self) -> None:
        self.fine = _Ring(FINE_SLOTS)
        self.coarse = _Ring(COARSE_SLOTS)
        self._coarse_number: int | None = None
        self._coarse = [0] * FIELDS
        self._seen: dict[str, int] | None = None
        self.last: int | None = None  # the number of the newest fine bucket

    def add(self, number: int, bucket: list[int]) -> None:
        """Bucket `number` (of INTERVAL_S) is done: into the fine ring, and folded into its coarse one."""
        self.fine.put(number, bucket)
        self.last = number
        coarse_number = number * INTERVAL_S // COARSE_S
        if coarse_number != self._coarse_number:
            self._coarse_number, self._coarse = coarse_number, [0] * FIELDS
        folded = self._coarse
        for field, value in enumerate(bucket):
            folded[field] = max(folded[field], value) if field in GAUGES else folded[field] + value
        self.coarse.put(coarse_number, folded)

    def deltas(self, counters: dict[str, int]) -> dict[str, int]:
        """How much each usage counter grew since the last sample (nothing the first time: the
        counters hold the space's whole history, not this interval's)."""
        seen, self._seen = self._seen, counters
        if seen is None:
            return {}
        return {name: count - seen.get(name, 0) for name, count in counters.items() if count != seen.get(name, 0)}

    def buckets(self, fine: bool, first: int, last: int) -> Iterable[tuple[int, array[int] | None]]:
        """(number, bucket or None) for the buckets `first` to `last` of one ring."""
        ring = self.fine if fine else self.coarse
        for number in range(max(first, last - ring.slots + 1), last + 1):
            yield number, ring.get(number)


def _usage_counters(space: SpaceState) -> dict[str, int]:
    """The usage counters a bucket takes deltas of: operations by kind, takeovers, expiries."""
    usage = space.usage
    counters = dict.fromkeys(KINDS, 0)
    for name, count in usage.operations.items():
        kind = _KIND_OF_NOUN.get(name.partition(".")[0], "other")
        counters[kind] += count
    counters["renewals"] = sum(usage.free.values())
    counters["takeovers"] = usage.takeovers
    counters["expiries"] = usage.expiries
    return counters


def _waiting(space: SpaceState, now_ms: int) -> tuple[int, int]:
    """Messages and tasks waiting for a worker, and the age in seconds of the oldest."""
    queued = sum(mailbox.queued + mailbox.delayed for mailbox in space.mailboxes.all())
    oldest = min(space.messages.oldest_waiting_ms().values(), default=None) if queued else None
    return queued, 0 if oldest is None else max(0, now_ms - oldest) // 1000


class Charts:
    """The charts of every space this server keeps them for."""

    def __init__(self) -> None:
        self.series: OrderedDict[str, Series] = OrderedDict()  # least recently active first
        # Counts of requests since the last sample, per space (see `count`).
        self.pending: dict[str, list[int]] = {}
        # Called with (space, number of the bucket just done) after each sample (the live stream).
        self.listener: Callable[[str, int], None] | None = None

    def count(self, space: str) -> list[int] | None:
        """The current counts of `space`, to add a request to (positions `P_...`); None when too
        many spaces were asked about in this interval (a request pays nothing more for that)."""
        counts = self.pending.get(space)
        if counts is None:
            if len(self.pending) >= PENDING_SPACES_MAX:
                return None
            counts = self.pending[space] = [0] * len(_PENDING_FIELDS)
        return counts

    def sample(self, find: Callable[[str], Any], number: int, now_ms: int) -> list[str]:
        """Bucket `number` is done: fold the requests counted and the usage counters' growth into
        the series of each space that has one or had requests, `find(space)` giving its state
        (None for a space that holds nothing: no chart). Returns the spaces sampled."""
        pending, self.pending = self.pending, {}
        sampled = []
        for space_id in list(self.series) + [s for s in pending if s not in self.series]:
            space = find(space_id)
            if space is None:
                continue
            series = self._series(space_id, space_id in pending)
            if series is None:
                continue
            bucket = [0] * FIELDS
            for field, value in zip(_PENDING_FIELDS, pending.get(space_id, ())):
                bucket[field] = value
            deltas = series.deltas(_usage_counters(space))
            for index, kind in enumerate(KINDS):
                bucket[index] = deltas.get(kind, 0)
            bucket[TAKEOVERS], bucket[EXPIRIES] = deltas.get("takeovers", 0), deltas.get("expiries", 0)
            bucket[QUEUED], bucket[OLDEST_S] = _waiting(space, now_ms)
            series.add(number, bucket)
            sampled.append(space_id)
        if self.listener is not None:
            for space_id in sampled:
                self.listener(space_id, number)
        return sampled

    def _series(self, space_id: str, active: bool) -> Series | None:
        """The series of a space, made for one with requests (the least recently active one goes
        when there are SPACES_MAX); marked active when it had requests."""
        series = self.series.get(space_id)
        if series is None:
            if not active:
                return None
            if len(self.series) >= SPACES_MAX:
                self.series.popitem(last=False)
            series = self.series[space_id] = Series()
        if active:
            self.series.move_to_end(space_id)
        return series


async def sample_every_interval(charts: Charts, runtime: Runtime) -> None:
    """Close a bucket at every multiple of INTERVAL_S of the server's wall clock, for as long as
    the server runs (started beside the runtime: `Lifecycle.run_runtime`)."""
    import trio

    interval_ms = INTERVAL_S * 1000
    while True:
        kernel = runtime.kernel_if_open
        now_ms = kernel.clock.now_ms() if kernel is not None else int(trio.current_time() * 1000)
        number = now_ms // interval_ms
        await trio.sleep(((number + 1) * interval_ms - now_ms) / 1000)
        kernel = runtime.kernel_if_open
        if kernel is None or not runtime.ready:
            charts.pending.clear()
            continue

        def find(space_id: str) -> Any:
            return kernel.partition_of(space_id).state.spaces.get(space_id)

        charts.sample(find, number, kernel.clock.now_ms())
