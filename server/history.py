"""History: the read views of a space as they stood at a past point, from snapshots plus the journal.

The journal records every decision with its time, and the state machines rebuild state from it (a
recovery is exactly that). So a past point needs no code of its own per primitive: the partition's
state is rebuilt at the point through the generic machinery (`snapshots/history.py`: the state
model's factory, the record format, `apply`), and is then read through the very functions the
live server reads with (the routes' handlers, `actors/reads.py` and the other read modules, the
console's views), handed a `PastKernel` in place of the live kernel.

    past = await runtime.history.at("default", "2027-01-15T08:00:00Z")  # or "lsn:1234", or "ev_56"
    reads.claims_in_scope(past, "default", scope_id)                     # what a reader saw then

A `PastKernel` answers what a kernel's reads ask: `space_view`, `read` and `settled` (at once:
everything in it is recorded), `parked` (no call was parked: waiting calls are not recorded), and
a clock stopped at the point: a lease is judged at the point's time, not now.

Points (`at=`):
- a time, ISO 8601 with a zone: the state after the last record stamped at or before it, judged
  at that time;
- `lsn:N`: the state after record N of the space's partition, judged at that record's time;
- `ev_N` (an event's id): the state right after the change that made the space's event N, found
  while the live event log still holds that event.
An answer says where it stands: `asOf` (its LSN, time, partition, and `cursor`, the `lsn:N` that
asks for the same records again: judged at their newest record's time, so a point asked by a time
later than that is asked for exactly again by its time, `at`).

Only the space asked for is rebuilt: records of a space carry `space` (`actors/records.py`), so
the others' are read and skipped. One rebuild runs at a time (the others wait, at most
`WAITING_MAX`); the last point rebuilt is kept, so the several views of one page cost one rebuild.
A rebuild runs in a worker thread: it shares the interpreter with the server, which answers on
meanwhile, more slowly (docs/history.md says by how much).
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, NoReturn, TypeVar

import trio

from ..actors.commands import Command
from ..actors.fields import Parser, compile_parser
from ..actors.keys import KeyTable
from ..actors.outcome import ActorKey
from ..actors.shapes import Record
from ..actors.errors import NOT_FOUND, UNAVAILABLE, VALIDATION_FAILED, KernelError, quote
from ..actors.partition import EMPTY, Idem
from ..actors.shapes import Body
from ..actors.space import SpaceState
from ..actors.state import KernelState
from ..actors.timestamps import format_ms, parse_timestamp
from ..snapshots.history import Kept, NotKept, PointNotReached, Reached, Target, kept, replay
from ..snapshots.model import StateModel
from ..snapshots.recovery import RecoveryError
from ..snapshots.etcd import EtcdError
from .errors import ApiError
from .views import KeptPointView, KeptView, PointView

if TYPE_CHECKING:
    from ..snapshots.store import Store
    from .runtime import Runtime

__all__ = [
    "HISTORY_NOT_KEPT", "PastKernel", "PastClock", "Point", "History", "parse_point", "rebuild", "one_space_model",
    "stands_before",
]

# The answer (410) to a point the server keeps no history for: before the oldest point kept, or a
# server without a data directory.
HISTORY_NOT_KEPT = "HISTORY_NOT_KEPT"
# Rebuilds waiting for the one that runs; one more is answered 503 with Retry-After.
WAITING_MAX = 16
# A read of a file pruned while it was read is tried again this many times.
PRUNED_RETRIES = 2
# How long a node of a cluster waits for its copy of a partition to reach the end of the log
# before a history read of it is answered 503.
CATCH_UP_S = 5.0

T = TypeVar("T")
# A request's query, read by name (`Request.param`), as a command's parser takes it.
Query = Callable[[str], "str | None"] | None

_LSN = re.compile(r"^lsn:(\d{1,19})$")
_EVENT = re.compile(r"^ev_(\d{1,19})$")


@dataclass(frozen=True, slots=True)
class Asked:
    """A point as asked for: `kind` is "time", "lsn" or "event", `value` its number."""

    kind: str
    value: int
    text: str


def parse_point(text: str | None, name: str = "at") -> Asked:
    """`at=` as a point: a timestamp with a zone, `lsn:N` or `ev_N`; VALIDATION_FAILED otherwise."""
    if text is None or not text.strip():
        raise KernelError(VALIDATION_FAILED, f"{name} is required: a time (2027-01-15T08:00:00Z), lsn:N or an event id (ev_N)")
    text = text.strip()
    found = _LSN.match(text)
    if found:
        return Asked("lsn", int(found.group(1)), text)
    found = _EVENT.match(text)
    if found:
        return Asked("event", int(found.group(1)), text)
    try:
        return Asked("time", parse_timestamp(text), text)
    except ValueError as error:
        raise KernelError(
            VALIDATION_FAILED, f"{name} must be a time with a zone (2027-01-15T08:00:00Z), lsn:N or an event id (ev_N), "
            f"got {quote(text)}: {error}",
        ) from None


@dataclass(frozen=True, slots=True)
class Point:
    """Where a past state stands: after record `lsn` of `partition`, judged at `now_ms`."""

    partition: int
    lsn: int
    now_ms: int
    record_ms: int  # the newest time among the records up to `lsn` (0: none)
    snapshot_lsn: int
    records: int  # records replayed on top of the snapshot
    seconds: float

    def view(self) -> PointView:
        return PointView(self.lsn, self.now_ms, f"lsn:{self.lsn}", self.partition, self.record_ms or None, self.snapshot_lsn, self.records)

    def headers(self) -> dict[str, str]:
        return {"runstate-as-of-lsn": str(self.lsn), "runstate-as-of": format_ms(self.now_ms)}


class PastClock:
    """The clock of a past point: stopped there."""

    __slots__ = ("_now_ms",)

    def __init__(self, now_ms: int) -> None:
        self._now_ms = now_ms

    def now_ms(self) -> int:
        return self._now_ms


class PastKernel:
    """A kernel's reads at a past point: hand it to any read function in place of the live kernel.

    It answers reads only. Nothing more happens at a past point, so a read that would wait for a
    change (a long poll) answers at once with what there is."""

    __slots__ = ("state", "space_id", "clock", "limits", "point", "_parsers")

    def __init__(self, state: KernelState, space_id: str, point: Point) -> None:
        self.state = state
        self.space_id = space_id
        self.point = point
        self.clock = PastClock(point.now_ms)
        self.limits = state.limits
        self._parsers: dict[type, Parser] = {}

    def space_view(self, space_id: str) -> SpaceState:
        self._only(space_id)
        return self.state.space_view(space_id)

    async def read(self, space_id: str, view: Callable[[SpaceState | None], T]) -> T:
        self._only(space_id)
        return view(self.state.spaces.get(space_id))

    async def settled(self, space_id: str | None = None) -> None:
        return None  # everything in a past state was recorded

    def parked(self) -> list[tuple[ActorKey, int]]:
        return []  # calls parked then are not recorded: a past point shows none

    def parked_commands(self, key: ActorKey) -> list[Any]:
        return []  # (nor what waited on one actor)

    def parked_holders(self, key: ActorKey, count_max: int) -> list[str]:
        return []  # (nor who waited on one actor)

    def spaces(self) -> Iterator[SpaceState]:
        yield from (space for space in self.state.spaces.values() if space.id == self.space_id)

    def space_known(self, space_id: str) -> bool:
        return space_id == self.space_id and space_id in self.state.spaces

    @property
    def keys(self) -> KeyTable:
        return self.state.keys

    # `Any`, as `Kernel.parse`: the command parsed is of `command_class`, which each route names.
    def parse(self, command_class: type, body: Body, params: dict[str, str], query: Query = None) -> Any:
        """A read's parameters, read as the live kernel reads them (`Kernel.parse`); a read draws
        no random value, so none is given."""
        parser = self._parsers.get(command_class)
        if parser is None:
            parser = self._parsers[command_class] = compile_parser(command_class, self.limits)
        return parser(body, params, _no_draw, query)

    async def submit(self, command: Command, *, idem: Idem | None = None, wait_ms: int | None = None) -> object:
        """A read that a live server may hold (a long poll: a watch, a task's or a once key's wait)
        ends at once with nothing, as a wait that nothing ended does: the route then answers
        from the state. Only reads are routed here (`routes/history.py`)."""
        return EMPTY

    def _only(self, space_id: str) -> None:
        if space_id != self.space_id:  # a past state holds the one space it was rebuilt for
            raise KernelError(NOT_FOUND, f"space {quote(space_id)} not found at this point")


def _no_draw(what: str) -> NoReturn:
    raise KernelError(VALIDATION_FAILED, "a past point answers reads only")


class _OneSpace:
    """A state that applies the records of one space and those of no space (boots, keys), and skips
    the rest: a space's records name it (`actors/records.py`), and nothing else reads them."""

    __slots__ = ("state", "space", "boot")

    def __init__(self, state: KernelState, space: str | None) -> None:
        self.state = state
        self.space = space
        self.boot = state.boot

    def apply(self, record: Record) -> None:
        space = record.get("space")
        if space is None or space == self.space or self.space is None:
            self.state.apply(record)

    # The rest of a recoverable state, as the state it filters has them (a replay only applies).

    def image(self) -> Iterable[Record]:
        return self.state.image()

    def decide_boot(self, fsync: str, now_ms: int) -> list[Record]:
        return self.state.decide_boot(fsync, now_ms)

    def restart(self, now_ms: int) -> list[Record]:
        return self.state.restart(now_ms)

    def counts(self) -> dict[str, int]:
        return self.state.counts()


def one_space_model(model: StateModel, space: str | None) -> StateModel:
    """`model`, whose states keep only `space`'s records (None: all of them)."""
    def make_state() -> _OneSpace:
        state = model.make_state()
        assert isinstance(state, KernelState), "history rebuilds the kernel's state"
        return _OneSpace(state, space)

    return StateModel(make_state=make_state, records=model.records, place=model.place)


def _target(asked: Asked, event_ms: int | None, space: str) -> Target:
    if asked.kind == "lsn":
        return Target(lsn=asked.value)
    if asked.kind == "time":
        return Target(ms=asked.value)
    seq = asked.value

    def made(state: _OneSpace) -> bool:
        found = state.state.spaces.get(space)
        return found is not None and found.events.seq >= seq

    assert event_ms is not None
    return Target(reached=made, starts_before_ms=event_ms)


def _point(reached: Reached, asked: Asked, partition: int, started: float) -> Point:
    now_ms = asked.value if asked.kind == "time" else reached.newest_ms
    return Point(partition, reached.lsn, now_ms, reached.newest_ms, reached.snapshot_lsn, reached.records,
                 time.perf_counter() - started)


def rebuild(
    folder: str, model: StateModel, partition: int, space: str | None, points: list[tuple[Asked, int | None]],
    on_point: Callable[[KernelState, Point], None], *, through_lsn: int | None,
    on_record: Callable[[int, dict[str, Any], int, KernelState], None] | None = None,
) -> None:
    """Rebuild `space` (None: every space of the partition) at each of `points` ((asked, the
    event's time for `ev_N`)), in order, and call `on_point` with the state and where it stands at
    each (read it before returning: the replay goes on changing it).

    Blocking. Raises `NotKept`, `PointNotReached`, `RecoveryError` (`snapshots.history.replay`)."""
    started = time.perf_counter()
    targets = [_target(asked, event_ms, space or "") for asked, event_ms in points]

    def reached(found: Reached, state: _OneSpace) -> None:
        asked = points[targets.index(found.target)][0]
        on_point(state.state, _point(found, asked, partition, started))

    tap = None if on_record is None else (lambda lsn, record, count, state: on_record(lsn, record, count, state.state))
    replay(folder, one_space_model(model, space), targets, reached, partition=partition, through_lsn=through_lsn, on_record=tap)


def stands_before(first: Point, second: Asked, second_event_ms: int | None) -> bool:
    """Whether the point `second` stands before `first`, reached before it (a replay reaches its
    points in order, so a second point of another kind that the log passed before the first is
    reached at the first, and would be said to stand there): an LSN before the first's, a time
    (an event's) before its newest record's."""
    if second.kind == "lsn":
        return second.value < first.lsn
    if second.kind == "time":
        return second.value < first.record_ms
    assert second_event_ms is not None
    return second_event_ms < first.record_ms


def not_kept(message: str, found: Kept | None = None) -> ApiError:
    error = ApiError(HISTORY_NOT_KEPT, message, status=410)
    if found is not None:
        error.details = {"oldestLsn": found.oldest_lsn, "oldestAt": None if found.oldest_ms is None else format_ms(found.oldest_ms)}
    return error


class History:
    """A server's history reads: each space's partition rebuilt from its folder (a node of a cluster
    reads its own local copy of the partition), one rebuild at a time, the last one kept."""

    def __init__(self, runtime: "Runtime") -> None:
        self.runtime = runtime
        self._limiter = trio.CapacityLimiter(1)
        self._waiting = 0
        self._last: tuple[tuple[str, str, int], PastKernel, int] | None = None
        # For /metrics: rebuilds done, and the seconds they took.
        self.rebuilds = 0
        self.rebuild_seconds = 0.0

    # -- where a partition's history is -----------------------------------------------------------

    def stores(self) -> dict[int, "Store"]:
        """The store of every partition this server has a folder of (a node: its local copies)."""
        runtime = self.runtime
        if runtime.data is not None:
            return dict(runtime.data.stores)
        cluster = runtime.cluster
        if cluster is not None:
            return {number: follower.store for number, follower in getattr(cluster, "followers", {}).items()}
        return {}

    def _store(self, space: str) -> tuple[int, "Store"]:
        kernel = self.runtime.kernel
        number = kernel.layout.of(space)
        store = self.stores().get(number)
        if store is None:
            if self.runtime.data is None and self.runtime.cluster is None:
                raise not_kept("this server keeps no history: it runs without a data directory")
            raise KernelError(UNAVAILABLE, f"the partition of space {quote(space)} is not open on this node", retry_after_s=1)
        return number, store

    def kept(self, space: str) -> KeptView:
        """What the space's partition keeps of its history: the oldest point, and the newest."""
        number, store = self._store(space)
        found = kept(store.data_dir)
        journal = store.journal
        return KeptView(
            number,
            KeptPointView(found.oldest_lsn, found.oldest_ms),
            KeptPointView(journal.durable_lsn if journal is not None else 0, self.runtime.kernel.clock.now_ms()),
            store.config.history_retention_s,
            store.checkpoint_every_records,
            found.disk_bytes,
        )

    # -- points -----------------------------------------------------------------------------------

    def _event_ms(self, space: str, asked: Asked) -> int | None:
        """The time of event `ev_N`, from the live event log (which must still hold it)."""
        if asked.kind != "event":
            return None
        log = self.runtime.kernel.space_view(space).events
        if not 1 <= asked.value <= log.seq:  # never made: no history of any length holds it
            raise KernelError(VALIDATION_FAILED, f"the space has made no event {asked.value} (its newest is ev_{log.seq})")
        if asked.value < log.oldest_seq:
            raise not_kept(
                f"event {asked.value} is not in the space's event log now (it holds {log.oldest_seq} to {log.seq}): ask by time instead"
            )
        for seq, _, at_ms in log.scan(newest_first=True):
            if seq == asked.value:
                return at_ms
        raise AssertionError("an event the log holds is found by its scan")

    def _check(self, asked: Asked, durable_lsn: int) -> None:
        if asked.kind == "lsn" and asked.value > durable_lsn:
            raise KernelError(VALIDATION_FAILED, f"LSN {asked.value} is past the end of the space's partition (LSN {durable_lsn})")
        if asked.kind == "time" and asked.value > self.runtime.kernel.clock.now_ms():
            raise KernelError(VALIDATION_FAILED, f"{asked.text} is in the future: history is of the past")

    async def _caught_up(self, number: int) -> None:
        """On a node of a cluster, its copy of the partition as far as the log goes now: a point
        asked by time (or the newest) is not rebuilt from a copy that has not reached it yet."""
        cluster = self.runtime.cluster
        if cluster is None:
            return
        try:
            caught_up = await cluster.partition_caught_up(number, CATCH_UP_S)
        except EtcdError as error:  # etcd unreachable: this copy cannot say it is current
            raise KernelError(UNAVAILABLE, f"this node cannot tell how far partition {number}'s log goes: {error}", retry_after_s=1) from None
        if not caught_up:
            raise KernelError(UNAVAILABLE, f"this node's copy of partition {number} is behind its log; try again, or ask another node",
                              retry_after_s=1)

    async def at(self, space: str, text: str | None) -> PastKernel:
        """The space as it stood at the point `text` (see the module docstring)."""
        asked = parse_point(text)
        number, store = self._store(space)
        await self._caught_up(number)
        journal = store.journal
        assert journal is not None
        durable = journal.durable_lsn
        self._check(asked, durable)
        key = (space, asked.text, id(store))
        last = self._last
        if last is not None and last[0] == key and (last[1].point.lsn < last[2] or last[2] == durable):
            return last[1]
        event_ms = self._event_ms(space, asked)
        found: list[PastKernel] = []
        await self._run(store, lambda: rebuild(
            store.data_dir, store.model, number, space, [(asked, event_ms)],
            lambda state, point: found.append(PastKernel(state, space, point)), through_lsn=durable,
        ))
        past = found[0]
        self._last = (key, past, durable)
        return past

    async def between(
        self, space: str, first: str | None, second: str | None, at_point: Callable[[PastKernel], Any],
        on_record: Callable[[int, dict[str, Any], int, KernelState], None],
    ) -> tuple[Point, Point]:
        """One replay through two points: `at_point` reads the state at each (in the worker thread,
        as the replay passes it: A, then B), `on_record` sees every record between them."""
        asked = [parse_point(first, "from"), parse_point(second, "to")]
        number, store = self._store(space)
        await self._caught_up(number)
        journal = store.journal
        assert journal is not None
        durable = journal.durable_lsn
        for one in asked:
            self._check(one, durable)
        if asked[0].kind == asked[1].kind and asked[1].value < asked[0].value:
            raise KernelError(VALIDATION_FAILED, f"from ({asked[0].text}) is after to ({asked[1].text})")
        points = [(one, self._event_ms(space, one)) for one in asked]
        seen: list[Point] = []

        def on_point(state: KernelState, point: Point) -> None:
            at_point(PastKernel(state, space, point))
            seen.append(point)

        await self._run(store, lambda: rebuild(
            store.data_dir, store.model, number, space, points, on_point, through_lsn=durable, on_record=on_record,
        ))
        assert seen[0].lsn <= seen[1].lsn, "a replay reaches its points in the log's order"
        if stands_before(seen[0], asked[1], points[1][1]):
            raise KernelError(VALIDATION_FAILED, f"from ({asked[0].text}, LSN {seen[0].lsn}) is after to ({asked[1].text})")
        return seen[0], seen[1]

    async def _run(self, store: "Store", work: Callable[[], None]) -> None:
        """`work` in a worker thread (the store's), one at a time, with the errors said as answers."""
        if self._waiting >= WAITING_MAX:
            raise KernelError(UNAVAILABLE, "too many history reads at once; try again shortly", retry_after_s=1)
        self._waiting += 1
        try:
            async with self._limiter:
                started = time.perf_counter()
                for attempt in range(PRUNED_RETRIES + 1):
                    try:
                        await store.run_blocking(work)
                        break
                    except FileNotFoundError:  # pruned while it was read: the point may be gone now
                        if attempt == PRUNED_RETRIES:
                            raise not_kept("the history around that point was pruned while it was read") from None
                    except NotKept as error:
                        raise not_kept(str(error), error.kept) from None
                    except PointNotReached as error:
                        raise KernelError(VALIDATION_FAILED, str(error)) from None
                    except RecoveryError as error:
                        raise KernelError(UNAVAILABLE, f"the partition's history cannot be read: {error.reason}") from None
                self.rebuilds += 1
                self.rebuild_seconds += time.perf_counter() - started
        finally:
            self._waiting -= 1
