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

from .barriers import BARRIER_ARRIVED, BARRIER_CREATED
from .dead_letters import DEAD_LETTERS_DELETED, DEAD_LETTERS_REQUEUED
from .errors import KernelError
from .groups import GROUP_CREATED, GROUP_EXPIRED, GROUP_JOINED, GROUP_SEALED, GROUP_VERDICT
from .limits import Limits
from .mailboxes import MAILBOX_PURGED
from .messages import DELIVERY_COMPLETED, DELIVERY_DEAD, DELIVERY_LEASED, DELIVERY_REQUEUED, MESSAGE_SENT
from .scopes import SCOPE_CREATED, SCOPE_ENDED
from .tasks import TASK_CREATED, TASK_ENDED
from .timers import TIMER_ACKED, TIMER_CANCELLED, TIMER_CREATED, TIMER_EXPIRED, TIMER_FIRED
from .outcome import Space
from .timestamps import format_ms

__all__ = [
    "EventLog", "Event", "EVENT_RECORDS", "CURSOR_EXPIRED", "DERIVE", "EVENT_TYPES", "PAYLOAD_NAMES", "payload_of",
    "EVENT_IMAGE", "EVENTS_IMAGE",
]

# The record types this module decides and applies (the journal's spelling of each).
EVENT_IMAGE = "event.image"
EVENTS_IMAGE = "events.image"

CURSOR_EXPIRED = "CURSOR_EXPIRED"

EVENT_RECORDS: dict[str, tuple[str, ...]] = {
    EVENTS_IMAGE: ("seq",),
    EVENT_IMAGE: ("seq", "event_type", "scope_id", "aggregate_type", "aggregate_id", "payload", "at_ms"),
}


class Event(NamedTuple):
    seq: int
    type: str
    scope_id: str | None
    aggregate_type: str
    aggregate_id: str
    payload: dict
    at_ms: int

    def view(self) -> dict:
        return {
            "eventId": f"ev_{self.seq}",
            "type": self.type,
            "createdAt": format_ms(self.at_ms),
            "scopeId": self.scope_id,
            "aggregate": {"type": self.aggregate_type, "id": self.aggregate_id},
            "payload": self.payload,
        }


# (type, scope_id, aggregate type, aggregate id, payload)
Change = tuple[str, "str | None", str, str, dict]


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

    def image(self) -> Iterator[dict]:
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

    def apply_image_header(self, record: dict) -> None:
        self.seq = record["seq"]
        self._changes.clear()
        self._times.clear()

    def apply_image_event(self, record: dict) -> None:
        # An image lists the kept events oldest first, the newest being `seq` (see the class).
        assert record["seq"] <= self.seq, "events are imaged up to the header's number"
        kind, payload = record["event_type"], record["payload"]
        names = PAYLOAD_NAMES.get(kind)
        if names is not None and isinstance(payload, dict) and tuple(payload) == names:
            payload = tuple(payload.values())  # kept as the live log keeps it
        self._changes.append((kind, record["scope_id"], record["aggregate_type"], record["aggregate_id"], payload))
        self._times.append(record["at_ms"])


# -- deriving events from records --------------------------------------------------------------
# Each function sees the space before the record is applied (so what a record ends can still be
# looked up) and returns the events the record makes: one change (a tuple, the usual case), a list
# of them, or None.

Derive = Callable[[Space, dict], Any]


# The payloads kept as a tuple of values, by event type, and the names of those values: the events a
# busy space makes on nearly every record (claims, deliveries, tasks) make no dict until read.
PAYLOAD_NAMES: dict[str, tuple[str, ...]] = {
    "claim.acquired": ("generation", "holder"),
    "claim.taken_over": ("generation", "holder"),
    "claim.released": ("generation",),
    "claim.expired": ("generation",),
    "claim.force_released": ("generation", "holder", "reason", "by"),
    "scope.created": ("parentId",),
    "task.created": ("taskKey", "mailboxId"),
    "message.sent": ("mailboxId",),
}


def payload_of(kind: str, payload: Any) -> dict:
    """An event's payload as the wire carries it (a dict), from what the log keeps."""
    return payload if payload.__class__ is dict else dict(zip(PAYLOAD_NAMES[kind], payload))


def _delivery(task_type: str, message_type: str, **extra: str) -> Derive:
    """A delivery's event: the message, its attempt and its holder (the one it is leased to, or
    the one whose lease this record ends: what a worker's crash took down), then `extra` fields."""
    PAYLOAD_NAMES[task_type] = PAYLOAD_NAMES[message_type] = ("messageId", "mailboxId", "attempt", "holder", *extra)
    fields = tuple(extra.values())

    def derive(space: Space, record: dict) -> "Change | None":
        message = space.messages.find(record["message_id"])
        if message is None:
            return None
        # The delivery's attempt, numbered as the task view and recv number it (1 for the first):
        # a lease is the attempt it starts (its record says which; the message, seen before the
        # record applies, still counts the ones before); any other change is about the current one.
        attempt = record["attempt"] if "attempt" in record else message.attempts
        payload: tuple = (message.id, message.mailbox_id, attempt, record.get("holder", message.holder))
        if fields:
            payload += tuple(record.get(field) for field in fields)
        if message.task_id is not None:
            return (task_type, message.scope_id, "task", message.task_id, payload)
        return (message_type, message.scope_id, "message", message.id, payload)

    return derive


def _dead(space: Space, record: dict) -> list:
    message = space.messages.find(record["message_id"])
    if message is None:
        return []
    payload = {"messageId": message.id, "mailboxId": message.mailbox_id, "reason": record.get("reason"), "holder": message.holder}
    events = [("delivery.dead_lettered", message.scope_id, "message", message.id, payload)]
    if message.task_id is not None:
        events.insert(0, ("task.failed", message.scope_id, "task", message.task_id, payload))
    return events


# A claim's events are made as its record is applied, from what applying it found
# (`SpaceState._apply_claim_acquired` and `_apply_claim_ended`): the claim table is looked up once,
# not once here and once there. `claim.acquired` or `claim.taken_over` (the previous holder's lease
# had ended) carries (generation, holder); `claim.released` and `claim.expired` carry (generation,);
# `claim.force_released` (an operator's release) carries (generation, holder, reason, by).


_SCOPE_END_REASONS = {"CANCELLED": "scope_cancelled", "COMPLETED": "scope_completed", "EXPIRED": "scope_expired"}


def _scope_ended(space: Space, record: dict) -> list:
    """The scope's end, and the end of every task that waited in its subtree (they end with it)."""
    by = record.get("by")  # who ended it (an API key's id, or "admin"); None when it expired
    events = [("scope." + record["state"].lower(), record["id"], "scope", record["id"], {"state": record["state"], "by": by})]
    reason = _SCOPE_END_REASONS[record["state"]]
    for message in space.messages.waiting_in_scopes(space.scopes.subtree(record["id"])):
        if message.task_id is not None:
            events.append(("task.cancelled", message.scope_id, "task", message.task_id, {"reason": reason, "by": by}))
    return events


def _task_ended(space: Space, record: dict) -> list:
    task = space.tasks.find(record["task_id"])
    scope_id = None if task is None else task.scope_id
    payload = {"reason": record.get("reason"), "by": record.get("by")}
    return [("task." + record["state"].lower(), scope_id, "task", record["task_id"], payload)]


# Record fields as an event's payload names them (the wire's camelCase; times as timestamps).
_WIRE = {"mailbox_id": "mailboxId", "task_id": "taskId", "arrival_key": "arrivalKey", "fire_ms": "fireAt"}


def _payload(record: dict, fields: tuple[str, ...]) -> dict:
    payload = {}
    for field in fields:
        if field not in record:
            continue
        value = record[field]
        payload[_WIRE.get(field, field)] = format_ms(value) if field.endswith("_ms") else value
    return payload


def _group(kind: str, *fields: str) -> Derive:
    def derive(space: Space, record: dict) -> list:
        group = space.coordination.groups.find(record["id"])
        scope_id = record.get("scope_id") if group is None else group.scope_id
        return [(kind, scope_id, "group", record["id"], _payload(record, fields))]

    return derive


def _barrier(kind: str, *fields: str) -> Derive:
    def derive(space: Space, record: dict) -> list:
        barrier = space.coordination.barriers.find(record["id"])
        scope_id = record.get("scope_id") if barrier is None else barrier.scope_id
        return [(kind, scope_id, "barrier", record["id"], _payload(record, fields))]

    return derive


def _timer(kind: str, *fields: str) -> Derive:
    def derive(space: Space, record: dict) -> list:
        timer = space.coordination.timers.find(record["id"])
        scope_id = record.get("scope_id") if timer is None else timer.scope_id
        return [(kind, scope_id, "timer", record["id"], _payload(record, fields))]

    return derive


def _dead_letters(kind: str) -> Derive:
    """An operator's action on a mailbox's dead letters: one event for the whole set."""

    def derive(space: Space, record: dict) -> "Change":
        ids = record["message_ids"]
        payload = {"mailboxId": record["mailbox_id"], "count": len(ids), "messageIds": list(ids)}
        if "new_ids" in record:
            payload["newIds"] = list(record["new_ids"])
        payload["by"] = record.get("by")
        return (kind, None, "mailbox", record["mailbox_id"], payload)

    return derive


DERIVE: dict[str, Derive] = {
    SCOPE_CREATED: lambda space, r: ("scope.created", r["id"], "scope", r["id"], (r["parent_id"],)),
    SCOPE_ENDED: _scope_ended,
    TASK_CREATED: lambda space, r: ("task.created", r["scope_id"], "task", r["id"], (r["task_key"], r["mailbox_id"])),
    MESSAGE_SENT: lambda space, r: ("message.sent", r["scope_id"], "message", r["id"], (r["mailbox_id"],)),
    DELIVERY_LEASED: _delivery("task.started", "delivery.leased"),
    DELIVERY_COMPLETED: _delivery("task.succeeded", "delivery.completed"),
    DELIVERY_REQUEUED: _delivery("task.retried", "delivery.requeued", cause="cause"),
    DELIVERY_DEAD: _dead,
    DEAD_LETTERS_REQUEUED: _dead_letters("dead_letters.requeued"),
    DEAD_LETTERS_DELETED: _dead_letters("dead_letters.deleted"),
    MAILBOX_PURGED: lambda space, r: ("mailbox.purged", r["scope_id"], "mailbox", r["mailbox_id"], {
        "mailboxId": r["mailbox_id"], "scopeId": r["scope_id"], "count": r["count"], "reason": r.get("reason"), "by": r.get("by"),
    }),
    TASK_ENDED: _task_ended,
    BARRIER_CREATED: _barrier("barrier.created", "target", "name"),
    BARRIER_ARRIVED: _barrier("barrier.arrived", "arrival_key"),
    TIMER_CREATED: _timer("timer.created", "fire_ms", "name"),
    TIMER_FIRED: _timer("timer.fired"),
    TIMER_ACKED: _timer("timer.acked"),
    TIMER_CANCELLED: _timer("timer.cancelled"),
    TIMER_EXPIRED: _timer("timer.expired"),
    GROUP_CREATED: _group("group.created", "condition", "mailbox_id"),
    GROUP_JOINED: _group("group.joined", "task_id"),
    GROUP_VERDICT: _group("group.verdict", "task_id", "verdict"),
    GROUP_SEALED: _group("group.sealed"),
    GROUP_EXPIRED: _group("group.deadline_exceeded"),
}

# Every type an event can have (the ones `after_apply` makes included), for the `types` filter's docs.
EVENT_TYPES = sorted(
    {
        "scope.created", "scope.cancelled", "scope.completed", "scope.expired", "claim.acquired", "claim.taken_over",
        "claim.released", "claim.expired", "claim.force_released", "task.created", "task.started", "task.retried", "task.succeeded",
        "task.failed", "task.cancelled", "task.expired", "message.sent", "delivery.leased", "delivery.completed",
        "delivery.requeued", "delivery.dead_lettered", "dead_letters.requeued", "dead_letters.deleted", "mailbox.purged",
        "barrier.created", "barrier.arrived", "barrier.released",
        "barrier.cancelled", "timer.created", "timer.fired", "timer.acked", "timer.cancelled", "timer.expired",
        "group.created", "group.joined", "group.verdict", "group.sealed", "group.deadline_exceeded", "group.finalized",
    }
)


def page(space: Space, after: int | None, limit: int, types: frozenset | None, aggregate: tuple | None, scope_id: str | None) -> dict:
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
    return {"events": [event.view() for event in events], "nextCursor": str(last)}


def watch(space: Space, command: Any, now_ms: int) -> Any:
    """The watch transition: a page with events, or an empty outcome that parks a long poll."""
    from .outcome import Outcome

    reply = page(space, command.after, command.limit, command.types, command.aggregate, command.scope_id)
    if not reply["events"] and command.wait_ms:
        return Outcome(empty=True)
    return Outcome(reply=reply)
