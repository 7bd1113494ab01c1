"""Idempotency keys: a mutation retried with the same key returns the first answer.

The official client sends one random key per logical call and the same key on each transport
retry, so a retried acquire gets the lease it already got rather than CLAIM_HELD from itself, and a
retried long-poll receive gets the delivery it already leased rather than a second one.

Each space keeps its own table (so one space can only ever evict its own answers), in the space's
partition: key -> fingerprint of (method, path, body) and the 2xx response body. Errors and empty
answers are not stored, so a retry runs again. The same key with another fingerprint is
IDEMPOTENCY_CONFLICT. Entries live `idempotency_ttl_s` (24 h by default) and at most
`idempotency_keys_max` are kept per space, oldest dropped first; both are decided from the records'
own times, so a replay keeps exactly the entries the live server kept.

The answers count against the space's byte cap (`space_payload_bytes_max`, `caps.py`): each is
counted for its JSON, and a new answer takes the room the space's values (payloads, inputs,
results) leave, the space's oldest answers going first to make it; likewise each is one entity
against `space_entities_max`, in the room the space's other entities leave. The newest answer is always
kept (a retry comes soon after its first try), so the answers pass the cap by at most that one.
An answer is never a reason to refuse a value: the values' own check leaves the answers out, and
their next stored answer gives the room back. The room is read when an answer is stored, from
the space as the record finds it, so replay drops the same answers; a snapshot's image gives the
answers first, before the values whose room they shared, and so drops none.

Pure: no IO, no clock reads.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Callable, Iterator

from .caps import value_bytes
from .errors import IDEMPOTENCY_CONFLICT, KernelError
from .limits import Limits
from .primitive import NOT_COUNTED, Primitive, record_type
from .outcome import Space
from .shapes import Record

__all__ = ["IdempotencyTable", "Stored", "IDEM_STORED", "IDEMPOTENCY"]

# The record types this module decides and applies (the journal's spelling of each).
IDEM_STORED = record_type("idem.stored")


class Stored:
    __slots__ = ("fingerprint", "body", "at_ms", "size")

    def __init__(self, fingerprint: str, body: Any, at_ms: int) -> None:
        self.fingerprint = fingerprint
        self.body = body
        self.at_ms = at_ms
        self.size = value_bytes(body)  # what it counts for against the space's byte cap


class IdempotencyTable:
    # `values_bytes`, `entities`: the bytes of the values and the count of the other entities the
    # space keeps, read for the room an answer may take.
    _DERIVED = ("values_bytes", "entities")
    __slots__ = ("_entries", "_limits", "bytes", "values_bytes", "entities")

    def __init__(
        self, limits: Limits, values_bytes: Callable[[], int] = lambda: 0, entities: Callable[[], int] = lambda: 0
    ) -> None:
        self._entries: OrderedDict[str, Stored] = OrderedDict()
        self._limits = limits
        self.bytes = 0  # the JSON of the answers kept
        self.values_bytes = values_bytes
        self.entities = entities

    def __len__(self) -> int:
        return len(self._entries)

    def lookup(self, key: str, fingerprint: str, now_ms: int) -> Stored | None:
        """The stored answer for a repeat, None for a first try, IDEMPOTENCY_CONFLICT for a misuse."""
        stored = self._entries.get(key)
        if stored is None or now_ms - stored.at_ms >= self._limits.idempotency_ttl_s * 1000:
            return None
        if stored.fingerprint != fingerprint:
            raise KernelError(
                IDEMPOTENCY_CONFLICT,
                "this Idempotency-Key was already used for a different request",
            )
        return stored

    @staticmethod
    def record(space: str, key: str, fingerprint: str, body: Any, now_ms: int) -> Record:
        return {"type": IDEM_STORED, "space": space, "key": key, "fingerprint": fingerprint, "body": body, "at_ms": now_ms}

    def image(self, space: str) -> Iterator[Record]:
        """The stored answers as `idem.stored` records, oldest first.

        Applied in this order, each record's eviction pass drops nothing (every entry here was kept
        at a later time), so the table comes back with the same entries in the same order.
        """
        for key, stored in self._entries.items():
            yield self.record(space, key, stored.fingerprint, stored.body, stored.at_ms)

    def apply_stored(self, record: Record) -> Stored:
        entry_key = record["key"]
        stored = Stored(record["fingerprint"], record["body"], record["at_ms"])
        entries = self._entries
        replaced = entries.pop(entry_key, None)  # a re-run after the first entry expired
        if replaced is not None:
            self.bytes -= replaced.size
        entries[entry_key] = stored
        self.bytes += stored.size
        self._evict(record["at_ms"])
        return stored

    def _evict(self, now_ms: int) -> None:
        """Drop the oldest answers while one has expired, there are too many, or they take more
        bytes or entities than the space's values and other entities leave; never the newest."""
        limits = self._limits
        horizon = now_ms - limits.idempotency_ttl_s * 1000
        room = limits.space_payload_bytes_max - self.values_bytes()
        kept_max = min(limits.idempotency_keys_max, limits.space_entities_max - self.entities())
        entries = self._entries
        while len(entries) > 1:
            oldest = next(iter(entries.values()))
            if oldest.at_ms > horizon and len(entries) <= kept_max and self.bytes <= room:
                break
            entries.popitem(last=False)
            self.bytes -= oldest.size
        if entries and len(entries) > limits.idempotency_keys_max:  # idempotency_keys_max of 0
            self.bytes -= entries.popitem(last=False)[1].size


def _make(space: Space) -> None:
    # Evicted only by its own space's answers, in the room its values and other entities leave.
    space.idempotency = IdempotencyTable(space.limits, space.values_bytes, space.entities)


# First in a space's image: each answer takes the room the values leave, and before them it needs none.
IDEMPOTENCY = Primitive(
    "idempotency",
    make=_make,
    state=("idempotency",),
    records={IDEM_STORED: ("key", "fingerprint", "body", "at_ms")},
    apply={IDEM_STORED: ("idempotency", "apply_stored")},
    # A stored answer: the request it answers was counted when it ran.
    usage={IDEM_STORED: NOT_COUNTED},
    image=lambda space: space.idempotency.image(space.id),
    is_empty=lambda space: not len(space.idempotency),
)
