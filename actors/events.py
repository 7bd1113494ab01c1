"""The event log of a space: what happened, in order, derived from the journal's records.

There is one source of truth, the records: every event is made from a record as it is applied
(`SpaceState.apply`), live and in replay, so the log after a recovery is the log before the crash,
event ids included, and nothing is ever written twice or written apart. A record that changes
nothing a reader cares about (a renewal, an image) makes no event; a record can make several
(a scope's end also cancels its barriers and timers, `coordination.after_apply`).

An event is `{eventId, type, createdAt, scopeId, aggregate: {type, id}, payload}`; the payload
holds ids and states, never a caller's data. An operator's action says who did it (`by`: the
API key's id, or "admin" for the admin key): a run's end, a task's cancel, a forced release, an
action on dead letters, a mailbox's purge. Events are numbered 1, 2, 3... per space; a cursor is
that number as a string and means "strictly after". The log keeps at most `events_kept_max`
events and none older than `events_kept_s` (measured against the newest record's time, so
trimming is decided by the records too). A cursor older than the oldest event kept is
`CURSOR_EXPIRED`: the reader would miss events without knowing.

Pure: no IO, no clock reads.
"""

from __future__ import annotations

from collections import deque
from itertools import count
from typing import Any, Callable, Iterator, NamedTuple

from .actor_keys import ActorKey, events_actor
from .errors import KernelError
from .limits import Limits
from .outcome import Outcome, Space, State
from .primitive import NOT_COUNTED, Command, Primitive, command, record_type
from .timestamps import format_ms
from .shapes import EpochMs, Json, Record, View

__all__ = [
    "AggregateView", "EventView", "EventPageView",
    "EventLog", "Event", "CURSOR_EXPIRED", "EVENT_TYPES", "PAYLOAD_NAMES", "payload_of", "EVENT_IMAGE", "EVENTS_IMAGE",
    "WatchEvents", "EVENTS", "record_payload", "entity_event", "name_payloads", "page", "watch",
]

# The record types this module decides and applies (the journal's spelling of each).
EVENT_IMAGE = record_type("event.image")
EVENTS_IMAGE = record_type("events.image")

CURSOR_EXPIRED = "CURSOR_EXPIRED"

# The payloads kept as a tuple of values, by event type, and the names of those values: the events a
# busy space makes on nearly every record (claims, deliveries, tasks) make no dict until read. Each
# primitive declares the event types it makes (`Primitive.events`); these two are filled from the
# declarations once, at import (`primitives.py`), and read by everyone else.
PAYLOAD_NAMES: dict[str, tuple[str, ...]] = {}
# Every type an event can have, sorted (for the `types` filter and its docs).
EVENT_TYPES: list[str] = []


def name_payloads(names: dict[str, tuple[str, ...]], types: tuple[str, ...]) -> None:
    """Fill `PAYLOAD_NAMES` and `EVENT_TYPES` from the declarations (once)."""
    assert not PAYLOAD_NAMES and not EVENT_TYPES, "the event types are named once"
    PAYLOAD_NAMES.update(names)
    EVENT_TYPES.extend(types)


class AggregateView(NamedTuple):
    """What an event is about: its kind (a claim, a task, a barrier...) and its id."""

    type: str
    id: str


class EventView(NamedTuple):
    """An event as the log is read: its id (`ev_<seq>`, the cursor after it being `seq`), its type,
    when it was made, its scope, what it is about, and its payload (a JSON object, as the event's
    type names its values)."""

    event_id: str
    type: str
    created_ms: EpochMs
    scope_id: str | None
    aggregate: AggregateView
    payload: Json


class EventPageView(NamedTuple):
    """A page of the log: its events, oldest first, and the cursor to read on from."""

    events: tuple[EventView, ...]
    next_cursor: str


class Event(NamedTuple):
    seq: int
    type: str
    scope_id: str | None
    aggregate_type: str
    aggregate_id: str
    payload: View
    at_ms: int

    def view(self) -> EventView:
        assert self.seq > 0, "events are numbered from 1"
        return EventView(
            f"ev_{self.seq}", self.type, self.at_ms, self.scope_id, AggregateView(self.aggregate_type, self.aggregate_id), self.payload
        )


# (type, scope_id, aggregate type, aggregate id, payload)
# The payload is kept as the record's values in the order `Primitive.events` names them, or as a
# view; `payload_of` makes the view when the event is read.
Change = tuple[str, "str | None", str, str, "View | tuple[Any, ...]"]


class EventLog:
    """The bounded, ordered events of one space.

    Kept as the changes `derive` made (one tuple each, no copy) beside their times, in two deques
    of the same length: the log keeps the newest events only, so the kept ones are numbered
    `oldest_seq` to `seq` without a gap, and an `Event` is made when one is read. A busy space
    makes an event on nearly every record: this keeps that to two appends.
    """

    __slots__ = ("seq", "_changes", "_times", "_kept_ms")

    def __init__(self, limits: Limits) -> None:
        self.seq = 0  # the number of the newest event made (kept or trimmed)
        # Bounded in C: appending to a full log drops its oldest event (`events_kept_max`).
        self._changes: deque[Change] = deque(maxlen=limits.events_kept_max)
        self._times: deque[int] = deque(maxlen=limits.events_kept_max)
        self._kept_ms = limits.events_kept_s * 1000

    def __len__(self) -> int:
        return len(self._changes)

    @property
    def oldest_seq(self) -> int:
        """The number of the oldest event kept (seq + 1 when none is)."""
        return self.seq - len(self._changes) + 1

    def add(self, change: Change, at_ms: int) -> None:
        """Number and keep one change."""
        self._changes.append(change)
        times = self._times
        times.append(at_ms)
        self.seq += 1
        if times[0] < at_ms - self._kept_ms:
            self._trim(at_ms)

    def append(self, changes: list[Change], at_ms: int) -> int:
        """Number and keep `changes`; returns how many."""
        kept, times = self._changes, self._times
        for change in changes:
            kept.append(change)
            times.append(at_ms)
        self.seq += len(changes)
        if times and times[0] < at_ms - self._kept_ms:
            self._trim(at_ms)
        return len(changes)

    def _trim(self, now_ms: int) -> None:
        kept, times = self._changes, self._times
        oldest_ms = now_ms - self._kept_ms
        while times and times[0] < oldest_ms:
            kept.popleft()
            times.popleft()

    def check_cursor(self, after: int) -> None:
        """CURSOR_EXPIRED for a cursor whose next event is no longer kept, or that is ahead of
        this log (a cursor from a log that was lost: reading on would skip events silently)."""
        if after > self.seq:
            raise KernelError(CURSOR_EXPIRED, f"cursor {after} is ahead of this space's events (newest {self.seq}); start again without a cursor")
        if after + 1 < self.oldest_seq:
            raise KernelError(
                CURSOR_EXPIRED,
                f"cursor {after} is older than the events kept (oldest {self.oldest_seq}); start again without a cursor",
            )

    def _event(self, index: int) -> Event:
        """The kept event at `index` (0: the oldest)."""
        kind, scope_id, aggregate_type, aggregate_id, payload = self._changes[index]
        return Event(self.oldest_seq + index, kind, scope_id, aggregate_type, aggregate_id, payload_of(kind, payload), self._times[index])

    def after(self, after: int) -> Iterator[Event]:
        """The events strictly after `after`, oldest first."""
        start = max(0, after + 1 - self.oldest_seq)
        return (self._event(index) for index in range(start, len(self._changes)))

    def scan(self, newest_first: bool = False) -> Iterator[tuple[int, Change, int]]:
        """`(seq, change, at_ms)` of every kept event, oldest or newest first, without making
        `Event`s: for a reader that filters many events and makes an `Event` (`made`) only of
        those it keeps. It walks the deques in order; `after` indexes into them, which costs an
        index's distance from an end, so `after` from deep inside a long log is slow."""
        if newest_first:
            return zip(count(self.seq, -1), reversed(self._changes), reversed(self._times))
        return zip(count(self.oldest_seq), self._changes, self._times)

    @staticmethod
    def made(seq: int, change: Change, at_ms: int) -> Event:
        """The `Event` of one `(seq, change, at_ms)` from `scan`."""
        kind, scope_id, aggregate_type, aggregate_id, payload = change
        return Event(seq, kind, scope_id, aggregate_type, aggregate_id, payload_of(kind, payload), at_ms)

    def page(self, after: int | None, limit: int, match: Callable[[Event], bool] | None) -> tuple[list[Event], int]:
        """Up to `limit` events after `after` (None: from the oldest kept) that `match`, and the
        cursor after the last event scanned: past the ones the filter skipped, so a reader never
        scans them again, and the newest event's number when the scan reached the end."""
        if after is None:
            after = self.oldest_seq - 1
        else:
            self.check_cursor(after)
        found: list[Event] = []
        last = after
        for event in self.after(after):
            last = event.seq
            if match is None or match(event):
                found.append(event)
                if len(found) >= limit:
                    return found, last
        return found, max(last, self.seq)

    # -- images ---------------------------------------------------------------------------------

    def image(self) -> Iterator[Record]:
        if not self.seq:
            return
        yield {"type": EVENTS_IMAGE, "seq": self.seq}
        for event in self.after(self.oldest_seq - 1):
            yield {
                "type": EVENT_IMAGE,
                "seq": event.seq,
                "event_type": event.type,
                "scope_id": event.scope_id,
                "aggregate_type": event.aggregate_type,
                "aggregate_id": event.aggregate_id,
                "payload": event.payload,
                "at_ms": event.at_ms,
            }

    def apply_image_header(self, record: Record) -> None:
        self.seq = record["seq"]
        self._changes.clear()
        self._times.clear()

    def apply_image_event(self, record: Record) -> None:
        # An image lists the kept events oldest first, the newest being `seq` (see the class).
        assert record["seq"] <= self.seq, "events are imaged up to the header's number"
        kind, payload = record["event_type"], record["payload"]
        names = PAYLOAD_NAMES.get(kind)
        if names is not None and isinstance(payload, dict) and tuple(payload) == names:
            payload = tuple(payload.values())  # kept as the live log keeps it
        self._changes.append((kind, record["scope_id"], record["aggregate_type"], record["aggregate_id"], payload))
        self._times.append(record["at_ms"])


# -- deriving events from records ----------------------------------------------------------------
# Each primitive derives the events of its records (`Primitive.derive`, seen before the record
# applies, so what a record ends can still be looked up): one change (a tuple), a list, or None.

# Record fields as an event's payload names them (the wire's camelCase; times as timestamps).
_WIRE = {"mailbox_id": "mailboxId", "task_id": "taskId", "arrival_key": "arrivalKey", "fire_ms": "fireAt"}


def payload_of(kind: str, payload: View | tuple[Any, ...]) -> View:
    """An event's payload as the wire carries it (a dict), from what the log keeps."""
    return payload if payload.__class__ is dict else dict(zip(PAYLOAD_NAMES[kind], payload))


def record_payload(record: Record, fields: tuple[str, ...]) -> View:
    """An event's payload from some fields of its record (camelCase, times as timestamps)."""
    payload = {}
    for field in fields:
        if field not in record:
            continue
        value = record[field]
        payload[_WIRE.get(field, field)] = format_ms(value) if field.endswith("_ms") else value
    return payload


def entity_event(kind: str, aggregate: str, find: Callable[[Space, str], Any], *fields: str) -> Callable[[Space, Record], list[Change]]:
    """The event of a record about one thing (a barrier, a timer, a group) named by the record's
    `id`: its scope is the thing's (found by `find`), else the record's own `scope_id`."""

    def derive(space: Space, record: Record) -> list[Change]:
        found = find(space, record["id"])
        scope_id = record.get("scope_id") if found is None else found.scope_id
        return [(kind, scope_id, aggregate, record["id"], record_payload(record, fields))]

    return derive


def page(
    space: Space, after: int | None, limit: int, types: frozenset[str] | None, aggregate: tuple[str, str] | None, scope_id: str | None
) -> EventPageView:
    """A page of the space's events as the wire carries it: `{events, nextCursor}`.

    Filters: `types` (exact names), `aggregate` ((type, id)), `scope_id` (the scope and its
    descendants; NOT_FOUND for a scope that does not exist).
    """
    subtree = None if scope_id is None else frozenset(space.scopes.subtree(space.scopes.get(scope_id).id))

    def match(event: Event) -> bool:
        if types is not None and event.type not in types:
            return False
        if aggregate is not None and (event.aggregate_type, event.aggregate_id) != aggregate:
            return False
        return subtree is None or event.scope_id in subtree

    plain = types is None and aggregate is None and subtree is None
    events, last = space.events.page(after, limit, None if plain else match)
    return EventPageView(tuple(event.view() for event in events), str(last))


@command
class WatchEvents(Command):
    """A page of a space's events after a cursor; with `wait_ms`, an empty page waits for events.

    Built by the route from the query string (`server/routes/coordination.py`), not from a body.
    """

    space: str
    after: int | None
    limit: int
    types: frozenset[str] | None = None
    aggregate: tuple[str, str] | None = None
    scope_id: str | None = None
    wait_ms: int | None = None

    def actor(self, state: State) -> ActorKey:
        return events_actor(self.space)


def watch(space: Space, command: WatchEvents, now_ms: int) -> Outcome:
    """The watch transition: a page with events, or an empty outcome that parks a long poll."""
    reply = page(space, command.after, command.limit, command.types, command.aggregate, command.scope_id)
    if not reply.events and command.wait_ms:
        return Outcome(empty=True)
    return Outcome(reply=reply)


def _make(space: Space) -> None:
    space.events = EventLog(space.limits)


# Last but the usage counters in a space's image.
EVENTS = Primitive(
    "events",
    make=_make,
    state=("events",),
    commands={WatchEvents: ("", watch)},
    records={
        EVENTS_IMAGE: ("seq",),
        EVENT_IMAGE: ("seq", "event_type", "scope_id", "aggregate_type", "aggregate_id", "payload", "at_ms"),
    },
    apply={EVENTS_IMAGE: ("events", "apply_image_header"), EVENT_IMAGE: ("events", "apply_image_event")},
    usage={EVENTS_IMAGE: NOT_COUNTED, EVENT_IMAGE: NOT_COUNTED},
    image=lambda space: space.events.image(),
    is_empty=lambda space: not space.events.seq,
)
