"""Usage: how many operations a space has done, counted from its journal records.

Counting happens in `SpaceState.apply`, the one place every change goes through, live and in
replay. So the counts are exact across restarts (replaying the journal counts each record once
more into a state rebuilt from nothing), and a snapshot carries them as one `usage.image` record
that sets them outright. Counting in the HTTP layer instead would count refused requests and
retries, and would forget everything at a restart.

What counts as an operation: an accepted change a caller asked for (creating, cancelling or
completing a run; acquiring or releasing a claim; creating a mailbox, sending a message,
submitting, joining, detaching or cancelling a task; receiving a delivery, completing or nacking
it). Not counted as operations:
- renewals of claims and deliveries ("Renewals are free; they don't count as billable
  operations"), kept apart as `free`;
- what the server does by itself (a lease, a run or a task expiring, a backoff ending, a task
  tombstoned, a message dropped or dead-lettered when its attempts run out), kept apart as
  `events`, together with takeovers (a claim acquired after its previous holder's lease expired);
- reads, refusals (a held claim, a stale token), empty long polls and idempotent replays: they
  write no record.

Judged by the record alone, so two edges are named here: a nack that ends its task (the last
attempt, or a run that has ended) is counted as the event it causes, not as a nack; and a task
cancelled with one of the reasons the server itself uses for a run's end counts as that event.

Each primitive classifies its own record types (`Primitive.usage`: `operation`, `free`, `event`, a
function of the record, or `NOT_COUNTED`); a record type classified nowhere fails at import
(`primitives.py`), so a new one must say whether it is an operation.

Pure: no IO, no clock reads.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from .primitive import NOT_COUNTED, Primitive, record_type
from .outcome import Space
from .shapes import Record

__all__ = ["Usage", "UsageView", "PLAN", "CLASSIFIED", "EXPIRIES", "TAKEOVER", "USAGE_IMAGE", "USAGE", "classify"]

# The record types this module decides and applies (the journal's spelling of each).
USAGE_IMAGE = record_type("usage.image")

# Record type -> (bucket, name) (`primitive.OPERATION`, `FREE_OPERATION`, `EVENT`), or a function
# of the record that says which: one lookup a record. Every primitive classifies each of its record
# types (`Primitive.usage`); these are filled from the declarations once, at import (`primitives.py`).
PLAN: dict[str, Any] = {}
# Every record type, counted or not (a type declared without a class fails at import).
CLASSIFIED: set[str] = set()

TAKEOVER = "claims.takeover"
# The events that are something's time running out, by the kind of thing (metrics, expiry storms).
EXPIRIES: dict[str, str] = {"claims.expire": "claim", "scopes.expire": "scope", "deliveries.expire": "delivery", "tasks.expire": "task"}


def classify(plan: dict[str, Any], classified: frozenset[str]) -> None:
    """Fill `PLAN` and `CLASSIFIED` from the declarations (once)."""
    assert not PLAN and not CLASSIFIED, "usage is classified once"
    PLAN.update(plan)
    CLASSIFIED.update(classified)


@dataclasses.dataclass(frozen=True, slots=True)
class UsageView:
    """A space's counters, each by name in order of the names: operations, then `total` (operations
    in all), free operations, events (takeovers included)."""

    space_id: str
    operations: dict[str, int]
    total: int
    free: dict[str, int]
    events: dict[str, int]


class Usage:
    """The counters of one space: operations, free operations and events, by name."""

    __slots__ = ("operations", "free", "events", "_buckets", "_claims")

    def __init__(self, claims: Any = None) -> None:
        self.operations: dict[str, int] = {}
        self.free: dict[str, int] = {}
        self.events: dict[str, int] = {}
        self._buckets = (self.operations, self.free, self.events)
        # Takeovers are counted by the claim table, which has the claim at hand when it applies.
        self._claims = claims

    @property
    def total(self) -> int:
        """Operations in all (free ones and events not included)."""
        return sum(self.operations.values())

    @property
    def expiries(self) -> int:
        """Leases, runs and tasks whose time ran out."""
        events = self.events
        return sum(events.get(name, 0) for name in EXPIRIES)

    @property
    def takeovers(self) -> int:
        return 0 if self._claims is None else self._claims.takeovers

    def count(self, record: Record) -> None:
        """Count `record`. On every record applied, live and in replay: one lookup and one update."""
        plan = PLAN.get(record["type"])
        if plan is None:
            return
        bucket, name = plan if plan.__class__ is tuple else plan(record)
        counts = self._buckets[bucket]
        counts[name] = counts.get(name, 0) + 1

    def all_events(self) -> dict[str, int]:
        """The events, takeovers included."""
        takeovers = self.takeovers
        return {**self.events, TAKEOVER: takeovers} if takeovers else dict(self.events)

    def view(self, space_id: str) -> UsageView:
        return UsageView(
            space_id, dict(sorted(self.operations.items())), self.total, dict(sorted(self.free.items())),
            dict(sorted(self.all_events().items())),
        )

    # -- snapshots ------------------------------------------------------------------------------

    def images(self, space_id: str) -> list[Record]:
        """The image of these counters: none while nothing was counted."""
        if self.operations or self.free or self.events or self.takeovers:
            return [self.image(space_id)]
        return []

    def image(self, space_id: str) -> Record:
        """The record that sets these counters outright: last in a space's snapshot image."""
        return {
            "type": USAGE_IMAGE,
            "space": space_id,
            "operations": dict(self.operations),
            "free": dict(self.free),
            "events": dict(self.events),
            "takeovers": self.takeovers,
        }

    def apply_image(self, record: Record) -> None:
        self.operations = dict(record["operations"])
        self.free = dict(record["free"])
        self.events = dict(record["events"])
        self._buckets = (self.operations, self.free, self.events)
        if self._claims is not None:
            self._claims.takeovers = record.get("takeovers", 0)


def _make(space: Space) -> None:
    # Takeovers are counted by the claim table, which has the claim at hand when it applies.
    space.usage = Usage(space.claims)


# Last in a space's image: its record sets the counters outright, whatever replaying the image counted.
USAGE = Primitive(
    "usage",
    make=_make,
    state=("usage",),
    records={USAGE_IMAGE: ("operations", "free", "events", "takeovers?")},
    apply={USAGE_IMAGE: ("usage", "apply_image")},
    usage={USAGE_IMAGE: NOT_COUNTED},
    image=lambda space: space.usage.images(space.id),
)
