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

from .claims import CLAIM_ACQUIRED, CLAIM_EXPIRED, CLAIM_FORCE_RELEASED, CLAIM_IMAGE, CLAIM_RELEASED, CLAIM_RENEWED
from .idempotency import IDEM_STORED
from .scopes import SCOPE_CREATED, SCOPE_ENDED, SCOPE_IMAGE

if TYPE_CHECKING:
    from .claims import ClaimTable

__all__ = ["Usage", "OPERATIONS", "FREE", "EVENTS", "NOT_COUNTED", "CLASSIFIED", "EXPIRIES", "TAKEOVER"]

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
    "mailbox.created": "mailboxes.create",
    "mailbox.declared": "mailboxes.declare",
    "message.sent": "messages.send",
    "task.created": "tasks.submit",
    "task.joined": "tasks.join",
    "task.detached": "tasks.detach",
    "delivery.leased": "deliveries.receive",
    "delivery.completed": "deliveries.complete",
    "dead_letters.requeued": "dead_letters.requeue",
    "dead_letters.deleted": "dead_letters.delete",
    "mailbox.purged": "mailboxes.purge",
    "once.acquired": "once.acquire",
    "once.completed": "once.complete",
    "once.failed": "once.fail",
    # -- capacity --
    "pool.created": "pools.create",
    "grant.acquired": "pools.acquire",
    "grant.released": "pools.release",
    "allowance.created": "quotas.create",
    "allowance.consumed": "quotas.consume",
    "allowance.cooldown": "quotas.cooldown",
    "waiter.added": "quotas.wait",
    "permit_waiter.added": "pools.wait",
    "work_limit.created": "work_limits.create",
    "budget.created": "budgets.create",
    "reservation.made": "budgets.reserve",
    "reservation.settled": "budgets.settle",
    # -- coordination --
    "barrier.created": "barriers.create",
    "barrier.arrived": "barriers.arrive",
    "timer.created": "timers.create",
    "timer.acked": "timers.ack",
    "timer.cancelled": "timers.cancel",
    "group.created": "groups.create",
    "group.joined": "groups.join",
    "group.verdict": "groups.verdict",
    "group.sealed": "groups.seal",
}
FREE: dict[str, str] = {
    CLAIM_RENEWED: "claims.renew",
    "delivery.renewed": "deliveries.renew",
    "once.renewed": "once.renew",
    "grant.renewed": "pools.renew",  # -- capacity --
}
EVENTS: dict[str, str] = {
    CLAIM_EXPIRED: "claims.expire",
    "message.visible": "messages.backoff_over",
    "message.dropped": "messages.drop",
    "task.tombstoned": "tasks.tombstone",
    "once.expired": "once.expire",
    # -- capacity --
    "grant.expired": "pools.expire",
    "waiter.granted": "quotas.grant",
    "permit_waiter.signaled": "pools.signal",
    # Counted with the submit it belongs to.
    # -- coordination --
    "timer.fired": "timers.fire",
    "timer.expired": "timers.expire",
    "group.expired": "groups.expire",
}
# Decided by the record's content.
_BY_CONTENT: dict[str, Callable[[dict], tuple[int, str]]] = {
    SCOPE_ENDED: _scope_end,
    "task.ended": _task_end,
    "delivery.requeued": _requeue,
    "delivery.dead": _dead,
    # -- capacity --
    "waiter.ended": lambda record: (OPERATION, "quotas.cancel_wait") if record["state"] == "CANCELLED" else (EVENT, "quotas.wait_expire"),
    "reservation.ended": lambda record: (OPERATION, "budgets.void") if record["state"] == "VOIDED" else (EVENT, "budgets.release"),
    # A waiter's grant is part of its acquire (the operation is `grant.acquired`).
    "permit_waiter.ended": lambda record: {
        "CANCELLED": (OPERATION, "pools.cancel_wait"), "GRANTED": (FREE_OPERATION, "pools.take_turn"),
    }.get(record["state"], (EVENT, "pools.wait_expire")),
}
# Records that are no change a caller made: snapshot images and the usage image itself; a run's
# name (its `scope.created` is the operation).
NOT_COUNTED = frozenset(
    {"usage.image", SCOPE_IMAGE, CLAIM_IMAGE, "mailbox.image", "message.image", "messages.image", "task.image",
     "workkey.image", "once.image", "run.named",
     # -- capacity --
     "pool.image", "allowance.image", "waiter.image", "permit_waiter.image", "work_limit.image", "budget.image", "reservation.image",
     "work_limit.counted", "task.requirements",
     # -- coordination --
     "barrier.image", "timer.image", "group.image", "events.image", "event.image",
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
            "type": "usage.image",
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
