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

Every record type of the space is classified here; a test checks that none is left out, so a new
record type (queues, tasks) must say whether it is an operation.

Pure: no IO, no clock reads.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from .admission import TASK_REQUIREMENTS
from .barriers import BARRIER_ARRIVED, BARRIER_CREATED, BARRIER_IMAGE
from .budgets import (
    BUDGET_CREATED, BUDGET_IMAGE, RESERVATION_ENDED, RESERVATION_IMAGE, RESERVATION_MADE, RESERVATION_SETTLED,
)
from .claims import CLAIM_ACQUIRED, CLAIM_EXPIRED, CLAIM_FORCE_RELEASED, CLAIM_IMAGE, CLAIM_RELEASED, CLAIM_RENEWED
from .dead_letters import DEAD_LETTERS_DELETED, DEAD_LETTERS_REQUEUED
from .events import EVENTS_IMAGE, EVENT_IMAGE
from .groups import GROUP_CREATED, GROUP_EXPIRED, GROUP_IMAGE, GROUP_JOINED, GROUP_SEALED, GROUP_VERDICT
from .idempotency import IDEM_STORED
from .mailboxes import MAILBOX_CREATED, MAILBOX_DECLARED, MAILBOX_IMAGE, MAILBOX_PURGED
from .messages import (
    DELIVERY_COMPLETED, DELIVERY_DEAD, DELIVERY_LEASED, DELIVERY_RENEWED, DELIVERY_REQUEUED, MESSAGES_IMAGE,
    MESSAGE_DROPPED, MESSAGE_IMAGE, MESSAGE_SENT, MESSAGE_VISIBLE, WORKKEY_IMAGE,
)
from .once import ONCE_ACQUIRED, ONCE_COMPLETED, ONCE_EXPIRED, ONCE_FAILED, ONCE_IMAGE, ONCE_RENEWED
from .pools import (
    GRANT_ACQUIRED, GRANT_EXPIRED, GRANT_RELEASED, GRANT_RENEWED, PERMIT_WAITER_ADDED, PERMIT_WAITER_ENDED,
    PERMIT_WAITER_IMAGE, PERMIT_WAITER_SIGNALED, POOL_CREATED, POOL_IMAGE,
)
from .quotas import (
    ALLOWANCE_CONSUMED, ALLOWANCE_COOLDOWN_RECORD, ALLOWANCE_CREATED, ALLOWANCE_IMAGE, WAITER_ADDED, WAITER_ENDED,
    WAITER_GRANTED, WAITER_IMAGE,
)
from .runs import RUN_NAMED
from .scopes import SCOPE_CREATED, SCOPE_ENDED, SCOPE_IMAGE
from .tasks import TASK_CREATED, TASK_DETACHED, TASK_ENDED, TASK_IMAGE, TASK_JOINED, TASK_TOMBSTONED
from .timers import TIMER_ACKED, TIMER_CANCELLED, TIMER_CREATED, TIMER_EXPIRED, TIMER_FIRED, TIMER_IMAGE
from .work_limits import WORK_LIMIT_COUNTED, WORK_LIMIT_CREATED, WORK_LIMIT_IMAGE

if TYPE_CHECKING:
    from .claims import ClaimTable

__all__ = ["Usage", "OPERATIONS", "FREE", "EVENTS", "NOT_COUNTED", "CLASSIFIED", "EXPIRIES", "TAKEOVER", "USAGE_IMAGE"]

# The record types this module decides and applies (the journal's spelling of each).
USAGE_IMAGE = "usage.image"

# The three buckets, as indexes into `Usage._buckets`.
OPERATION, FREE_OPERATION, EVENT = 0, 1, 2

def _scope_end(record: dict) -> tuple[int, str]:
    state = record["state"]
    if state == "EXPIRED":
        return EVENT, "scopes.expire"
    return OPERATION, "scopes.cancel" if state == "CANCELLED" else "scopes.complete"


# The reasons the queue records when the server, not a caller, ends a task (`work.py`).
_SERVER_TASK_ENDS = frozenset({"deadline_exceeded", "scope_cancelled", "scope_completed", "scope_expired"})


def _task_end(record: dict) -> tuple[int, str]:
    if record["state"] == "EXPIRED":
        return EVENT, "tasks.expire"
    if record.get("reason") in _SERVER_TASK_ENDS:
        return EVENT, "tasks.end_with_run"
    return OPERATION, "tasks.cancel"


def _requeue(record: dict) -> tuple[int, str]:
    return (OPERATION, "deliveries.nack") if record.get("cause") == "retry" else (EVENT, "deliveries.expire")


def _dead(record: dict) -> tuple[int, str]:
    return (OPERATION, "deliveries.nack") if record.get("cause") == "rejected" else (EVENT, "deliveries.dead")


# Record type -> the name it is counted under, in one of the three buckets.
OPERATIONS: dict[str, str] = {
    SCOPE_CREATED: "scopes.create",
    CLAIM_ACQUIRED: "claims.acquire",
    CLAIM_RELEASED: "claims.release",
    CLAIM_FORCE_RELEASED: "claims.force_release",
    MAILBOX_CREATED: "mailboxes.create",
    MAILBOX_DECLARED: "mailboxes.declare",
    MESSAGE_SENT: "messages.send",
    TASK_CREATED: "tasks.submit",
    TASK_JOINED: "tasks.join",
    TASK_DETACHED: "tasks.detach",
    DELIVERY_LEASED: "deliveries.receive",
    DELIVERY_COMPLETED: "deliveries.complete",
    DEAD_LETTERS_REQUEUED: "dead_letters.requeue",
    DEAD_LETTERS_DELETED: "dead_letters.delete",
    MAILBOX_PURGED: "mailboxes.purge",
    ONCE_ACQUIRED: "once.acquire",
    ONCE_COMPLETED: "once.complete",
    ONCE_FAILED: "once.fail",
    # -- capacity --
    POOL_CREATED: "pools.create",
    GRANT_ACQUIRED: "pools.acquire",
    GRANT_RELEASED: "pools.release",
    ALLOWANCE_CREATED: "quotas.create",
    ALLOWANCE_CONSUMED: "quotas.consume",
    ALLOWANCE_COOLDOWN_RECORD: "quotas.cooldown",
    WAITER_ADDED: "quotas.wait",
    PERMIT_WAITER_ADDED: "pools.wait",
    WORK_LIMIT_CREATED: "work_limits.create",
    BUDGET_CREATED: "budgets.create",
    RESERVATION_MADE: "budgets.reserve",
    RESERVATION_SETTLED: "budgets.settle",
    # -- coordination --
    BARRIER_CREATED: "barriers.create",
    BARRIER_ARRIVED: "barriers.arrive",
    TIMER_CREATED: "timers.create",
    TIMER_ACKED: "timers.ack",
    TIMER_CANCELLED: "timers.cancel",
    GROUP_CREATED: "groups.create",
    GROUP_JOINED: "groups.join",
    GROUP_VERDICT: "groups.verdict",
    GROUP_SEALED: "groups.seal",
}
FREE: dict[str, str] = {
    CLAIM_RENEWED: "claims.renew",
    DELIVERY_RENEWED: "deliveries.renew",
    ONCE_RENEWED: "once.renew",
    GRANT_RENEWED: "pools.renew",  # -- capacity --
}
EVENTS: dict[str, str] = {
    CLAIM_EXPIRED: "claims.expire",
    MESSAGE_VISIBLE: "messages.backoff_over",
    MESSAGE_DROPPED: "messages.drop",
    TASK_TOMBSTONED: "tasks.tombstone",
    ONCE_EXPIRED: "once.expire",
    # -- capacity --
    GRANT_EXPIRED: "pools.expire",
    WAITER_GRANTED: "quotas.grant",
    PERMIT_WAITER_SIGNALED: "pools.signal",
    # Counted with the submit it belongs to.
    # -- coordination --
    TIMER_FIRED: "timers.fire",
    TIMER_EXPIRED: "timers.expire",
    GROUP_EXPIRED: "groups.expire",
}
# Decided by the record's content.
_BY_CONTENT: dict[str, Callable[[dict], tuple[int, str]]] = {
    SCOPE_ENDED: _scope_end,
    TASK_ENDED: _task_end,
    DELIVERY_REQUEUED: _requeue,
    DELIVERY_DEAD: _dead,
    # -- capacity --
    WAITER_ENDED: lambda record: (OPERATION, "quotas.cancel_wait") if record["state"] == "CANCELLED" else (EVENT, "quotas.wait_expire"),
    RESERVATION_ENDED: lambda record: (OPERATION, "budgets.void") if record["state"] == "VOIDED" else (EVENT, "budgets.release"),
    # A waiter's grant is part of its acquire (the operation is `grant.acquired`).
    PERMIT_WAITER_ENDED: lambda record: {
        "CANCELLED": (OPERATION, "pools.cancel_wait"), "GRANTED": (FREE_OPERATION, "pools.take_turn"),
    }.get(record["state"], (EVENT, "pools.wait_expire")),
}
# Records that are no change a caller made: snapshot images and the usage image itself; a run's
# name (its `scope.created` is the operation).
NOT_COUNTED = frozenset(
    {USAGE_IMAGE, SCOPE_IMAGE, CLAIM_IMAGE, MAILBOX_IMAGE, MESSAGE_IMAGE, MESSAGES_IMAGE, TASK_IMAGE,
     WORKKEY_IMAGE, ONCE_IMAGE, RUN_NAMED,
     # -- capacity --
     POOL_IMAGE, ALLOWANCE_IMAGE, WAITER_IMAGE, PERMIT_WAITER_IMAGE, WORK_LIMIT_IMAGE, BUDGET_IMAGE, RESERVATION_IMAGE,
     WORK_LIMIT_COUNTED, TASK_REQUIREMENTS,
     # -- coordination --
     BARRIER_IMAGE, TIMER_IMAGE, GROUP_IMAGE, EVENTS_IMAGE, EVENT_IMAGE,
     # A stored answer: the request it answers was counted when it ran.
     IDEM_STORED}
)

CLASSIFIED = frozenset(OPERATIONS) | frozenset(FREE) | frozenset(EVENTS) | frozenset(_BY_CONTENT) | NOT_COUNTED

TAKEOVER = "claims.takeover"
# The events that are something's time running out, by the kind of thing (metrics, expiry storms).
EXPIRIES: dict[str, str] = {"claims.expire": "claim", "scopes.expire": "scope", "deliveries.expire": "delivery", "tasks.expire": "task"}


# Record type -> (bucket, name), or a function of the record that says which: one lookup a record.
_PLAN: dict[str, Any] = {
    **{kind: (OPERATION, name) for kind, name in OPERATIONS.items()},
    **{kind: (FREE_OPERATION, name) for kind, name in FREE.items()},
    **{kind: (EVENT, name) for kind, name in EVENTS.items()},
    **_BY_CONTENT,
}


class Usage:
    """The counters of one space: operations, free operations and events, by name."""

    __slots__ = ("operations", "free", "events", "_buckets", "_claims")

    def __init__(self, claims: "ClaimTable | None" = None) -> None:
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

    def count(self, record: dict) -> None:
        """Count `record`. On every record applied, live and in replay: one lookup and one update."""
        plan = _PLAN.get(record["type"])
        if plan is None:
            return
        bucket, name = plan if plan.__class__ is tuple else plan(record)
        counts = self._buckets[bucket]
        counts[name] = counts.get(name, 0) + 1

    def all_events(self) -> dict[str, int]:
        """The events, takeovers included."""
        takeovers = self.takeovers
        return {**self.events, TAKEOVER: takeovers} if takeovers else dict(self.events)

    def view(self, space_id: str) -> dict[str, Any]:
        return {
            "spaceId": space_id,
            "operations": dict(sorted(self.operations.items())),
            "total": self.total,
            "free": dict(sorted(self.free.items())),
            "events": dict(sorted(self.all_events().items())),
        }

    # -- snapshots ------------------------------------------------------------------------------

    def image(self, space_id: str) -> dict:
        """The record that sets these counters outright: last in a space's snapshot image."""
        return {
            "type": USAGE_IMAGE,
            "space": space_id,
            "operations": dict(self.operations),
            "free": dict(self.free),
            "events": dict(self.events),
            "takeovers": self.takeovers,
        }

    def apply_image(self, record: dict) -> None:
        self.operations = dict(record["operations"])
        self.free = dict(record["free"])
        self.events = dict(record["events"])
        self._buckets = (self.operations, self.free, self.events)
        if self._claims is not None:
            self._claims.takeovers = record.get("takeovers", 0)
