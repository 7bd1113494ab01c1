"""One space: its scopes, claims, mailboxes, messages and tasks, composed of one part per primitive.

The tables (`scopes.py`, `claims.py`, `mailboxes.py`, `messages.py`, `tasks.py`) hold the state and
decide records; the parts hold the commands: `ClaimCommands` (`claiming.py`) and `WorkCommands`
(`work.py`) are each given only the tables they use and the space's `commit`. What crosses between
primitives lives here and nowhere else: ending a scope ends its subtree, which frees its claims in
the same record (so no crash can leave a claim held in an ended scope) and cancels the tasks
waiting in its queues, and, in the same turn, the tasks under way there.

Barriers, timers and task groups are the part `CoordinationCommands` (`coordination.py`); the
space's event log (`events.py`) is made in `apply` from each record as it is applied, so it is
rebuilt by replay like everything else, and a turn that made events pokes the watches parked on it.

Each command method checks, decides the records, applies them through `apply` (the same code replay
runs) and returns an `Outcome` with the reply, the records, the timers to arm and the actors to
poke. Timers come back as `FireTimer` commands; `TIMERS` maps each kind of timer to what it
proposes, in one table.

Pure: no IO, no clock reads, no awaits.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Iterator

from .admission import FREEING, POOL_FREEING, TASK_CREATED, WAKE_TIMER, on_wake_timer  # -- capacity --
from .boot import BootInfo
from .capacity import CAPACITY_APPLY, CAPACITY_TIMERS, CapacityCommands  # -- capacity --
from .caps import check_bytes, full
from .claiming import LEASE_TIMER, ClaimCommands
from .claims import (
    CLAIM_ACQUIRED, CLAIM_EXPIRED, CLAIM_FORCE_RELEASED, CLAIM_IMAGE, CLAIM_RELEASED, CLAIM_RENEWED, ClaimTable,
)
from .actor_keys import claim_actor, events_actor, mailboxes_actor, queue_actor, scope_actor
from .errors import VALIDATION_FAILED, KernelError, quote
from .idempotency import IDEM_STORED, IdempotencyTable
from .leases import LeaseTable
from .limits import Limits
from .mailboxes import MailboxTable
from .messages import MessageTable
from .once import LEASE_TIMER as ONCE_LEASE_TIMER
from .once import ONCE_APPLY, OnceCommands, OnceTable
from .outcome import Outcome, Timer
from .runs import RunCommands, RunNames
from .scopes import ACTIVE, EXPIRED, SCOPE_CREATED, SCOPE_ENDED, SCOPE_IMAGE, ScopeTree
from .tasks import TaskTable
from .usage import Usage
from .work import WORK_APPLY, WORK_TIMERS, WorkCommands
# -- coordination --
from .coordination import AFTER_APPLY_KINDS, COORDINATION_APPLY, COORDINATION_TIMERS, CoordinationCommands
from .events import DERIVE, EventLog
from .events import EVENTS_IMAGE, EVENT_IMAGE
from .runs import RUN_NAMED
from .usage import USAGE_IMAGE

if TYPE_CHECKING:
    from .commands import CreateScope, EndScope

__all__ = ["SpaceState", "RECORD_TYPES", "TIMERS", "claim_actor", "scope_actor", "queue_actor", "mailboxes_actor"]

DEADLINE_TIMER = "scope-deadline"


class SpaceState:
    # The parts hold commands over the tables, no state of their own (`snapshots.equality`).
    _DERIVED = ("claiming", "work", "onces", "runs", "leases", "_appliers", "_events_actor")

    __slots__ = (
        "id", "limits", "boot", "scopes", "claims", "mailboxes", "messages", "tasks", "usage", "once", "run_names",
        "idempotency",
        "claiming", "work", "onces", "runs", "leases",
        "capacity",  # -- capacity --
        # -- coordination --
        "coordination", "events",
        "_appliers", "_events_actor",
    )

    def __init__(self, space_id: str, limits: Limits, boot: BootInfo | None = None) -> None:
        self.id = space_id
        self.limits = limits
        self.boot = boot if boot is not None else BootInfo()  # shared by all spaces of a state
        self.scopes = ScopeTree(limits)
        self.claims = ClaimTable()
        self.mailboxes = MailboxTable(limits)
        self.messages = MessageTable(limits, self.mailboxes)
        self.tasks = TaskTable(limits)
        self.usage = Usage(self.claims)
        self.once = OnceTable()
        self.run_names = RunNames()
        # This space's stored answers, evicted only by its own, in the room its values and its
        # other entities leave.
        self.idempotency = IdempotencyTable(limits, self.values_bytes, self.entities)
        self.claiming = ClaimCommands(
            space_id, self.scopes, self.claims, self.boot, self._commit, limits.space_claims_max
        )
        self.work = WorkCommands(space_id, limits, self.scopes, self.mailboxes, self.messages, self.tasks, self._commit)
        self.onces = OnceCommands(space_id, self.scopes, self.once, self._commit)
        self.runs = RunCommands(space_id, self.scopes, self.run_names, self._commit, self._deadline_timer)
        self.work.check_bytes = self.onces.check_bytes = self._check_bytes
        self.scopes.check_entities = self.claiming.check_entities = self.work.check_entities = self._check_entities
        # -- capacity --
        self.capacity = CapacityCommands(space_id, limits, self.scopes, self.tasks, self._commit)
        self.work.needs_admission = self.capacity.needs_admission
        self.capacity.check_entities = self._check_entities
        messages = self.messages

        def delivery_held(message_id: str, token: str, now_ms: int) -> bool:
            message = messages.find(message_id)
            return message is not None and message.state == "LEASED" and message.token == token and now_ms < message.expires_ms

        self.capacity.pools.delivery_held = delivery_held
        # -- coordination --
        self.coordination = CoordinationCommands(
            space_id, limits, self.scopes, self.mailboxes, self.messages, self.tasks, self.work, self._commit
        )
        self.events = EventLog(limits)
        # Every lease of the space, for the restart rule: each kind attaches where its leases are.
        self.leases = LeaseTable()
        for part in (self.claiming, self.capacity, self.work, self.onces):
            self.leases.attach(part.lease_kind())
        # What applies each type of record here: `_APPLY` bound to this space's parts.
        self._appliers = _appliers(self)
        self._events_actor = events_actor(space_id)  # -- coordination --

    def _commit(self, outcome: Outcome, *records: dict) -> Outcome:
        events = self.events  # -- coordination --
        seq = events.seq
        space_id, apply, kept = self.id, self.apply, outcome.records
        for record in records:
            record["space"] = space_id
            apply(record)
            kept.append(record)
        # -- capacity --: capacity given back wakes the admissions parked for it, and pool units
        # given back by a delivery's end move the pools' lines.
        capacity = self.capacity
        if capacity.wakeups or capacity.subtree_wakeups or capacity.pools.made:
            self._capacity_after(outcome, records)
        if events.seq != seq:  # -- coordination -- (watches parked on the log look again)
            outcome.pokes.append(self._events_actor)
        return outcome

    def _capacity_after(self, outcome: Outcome, records: tuple[dict, ...]) -> None:
        capacity = self.capacity
        if (capacity.wakeups or capacity.subtree_wakeups) and any(record["type"] in FREEING for record in records):
            outcome.pokes.extend(capacity.take_wakeups())
        if capacity.subtree_wakeups and any(record["type"] == TASK_CREATED for record in records):
            outcome.pokes.extend(capacity.take_subtree_wakeups())
        freed = [record["at_ms"] for record in records if record["type"] in POOL_FREEING]
        if freed:
            outcome.timers.extend(capacity.pool_serve_timers(freed[-1]))

    def values_bytes(self) -> int:
        """The bytes of the caller values this space keeps (stored answers aside, `caps.py`)."""
        return self.messages.payload_bytes + self.tasks.outcome_bytes + self.once.result_bytes

    def entities(self) -> int:
        """The entities this space keeps, live or ended (stored answers aside, `caps.py`)."""
        capacity = self.capacity
        return (
            len(self.scopes) + len(self.claims) + len(self.messages) + len(self.tasks)
            + capacity.pools.waiters_kept() + capacity.allowances.waiters_kept()
        )

    def _check_entities(self, adding: int) -> None:
        """The entity cap (`caps.py`); the stored answers give their room back, so they are not counted."""
        kept = self.entities()
        if kept + adding > self.limits.space_entities_max:
            raise full(
                f"space keeps {kept} runs, claim keys, messages, tasks and waiters and this needs {adding} more",
                "space_entities_max",
            )

    def _check_bytes(self, adding: int, freeing: int) -> None:
        """The payload cap over every table that keeps caller values (`caps.py`); the stored
        answers give their room back to a value, so they are not counted here."""
        check_bytes(self.values_bytes(), adding, freeing, self.limits.space_payload_bytes_max)

    # -- scopes ---------------------------------------------------------------------------------

    def create_scope(self, command: "CreateScope", now_ms: int) -> Outcome:
        scope_id, deadline_ms = command.scope_id, command.deadline_ms
        record = self.scopes.decide_create(
            scope_id, command.name, command.parent_id, deadline_ms, command.child_limit, now_ms
        )
        outcome = self._commit(Outcome(), record)
        scope = self.scopes.get(scope_id)
        if deadline_ms is not None:
            outcome.timers.append(self._deadline_timer(scope_id, deadline_ms))
        outcome.reply = self.scopes.view(scope, now_ms)
        return outcome

    def end_scope(self, command: "EndScope", now_ms: int) -> Outcome:
        """Cancel or complete a scope; repeating the same end is harmless."""
        record = self.scopes.decide_end(command.scope_id, command.end, now_ms)
        if record is not None and command.by is not None:
            record["by"] = command.by  # who ended it, for the event log
        outcome = Outcome() if record is None else self._end_scope_commit(record)
        outcome.reply = self.scopes.view(self.scopes.get(command.scope_id), now_ms)
        return outcome

    def expire_scope(self, scope_id: str, now_ms: int) -> Outcome:
        """The supervisor's proposal: record EXPIRED if the deadline has passed on an active scope."""
        scope = self.scopes.get(scope_id)
        if scope.stored_state != ACTIVE or scope.deadline_ms is None or now_ms < scope.deadline_ms:
            return Outcome()
        return self._end_scope_commit(self.scopes.decide_end(scope_id, EXPIRED, now_ms))

    def _end_scope_commit(self, record: dict) -> Outcome:
        """Record a scope's end; wake the receivers parked in its subtree, time its ended tasks."""
        subtree = self.scopes.subtree(record["id"])
        waiting = self.messages.waiting_in_scopes(subtree)
        # Acquirers parked on a held claim of the subtree hear that the scope ended.
        claim_actors = [claim_actor(self.id, c.scope_id, c.key) for s in subtree for c in self.claims.in_scope(s)]
        outcome = self._commit(Outcome(), record)
        # Deliveries under way in the subtree end with it, in this turn (their tasks CANCELLED).
        self.work.end_in_flight(outcome, subtree, record["at_ms"])
        outcome.pokes.extend(claim_actors)
        outcome.pokes.extend(self.work.queue_actors(subtree))
        outcome.timers.extend(self.capacity.serve_timers(record["at_ms"]))  # -- capacity --
        outcome.pokes.extend(self.coordination.scope_actors(subtree))  # -- coordination --
        for message in waiting:
            if message.task_id is not None:
                outcome.timers.extend(self.work.task_timers(self.tasks.get(message.task_id)))
        return outcome

    def _deadline_timer(self, scope_id: str, deadline_ms: int) -> Timer:
        return Timer(deadline_ms, scope_actor(self.id, scope_id), (DEADLINE_TIMER, scope_id), None)

    # -- timers ---------------------------------------------------------------------------------

    def fire(self, tag: tuple, marker: Any, now_ms: int) -> Outcome:
        """A timer fell due: run what its kind proposes (each checks again that it still holds)."""
        kind, ident = tag
        handler = TIMERS.get(kind)
        if handler is None:
            raise KernelError(VALIDATION_FAILED, f"no timer of kind {quote(kind)}")
        return handler(self, ident, marker, now_ms)

    def timers(self) -> Iterator[Timer]:
        """Every timer the current state needs: after a recovery the kernel arms these."""
        for scope in self.scopes.all():
            if scope.stored_state == ACTIVE and scope.deadline_ms is not None:
                yield self._deadline_timer(scope.id, scope.deadline_ms)
        yield from self.claiming.timers()
        yield from self.work.timers()
        yield from self.onces.timers()
        yield from self.capacity.timers()  # -- capacity --
        yield from self.coordination.all_timers()  # -- coordination --

    # -- restarts and images -----------------------------------------------------------------------

    def restart(self, now_ms: int, grace_ms: int | None = None, spread_ms: int | None = None) -> Outcome:
        """At a start: the restart rule over every lease of the space together (`leases.py`:
        claims, pool grants, deliveries, once slots), then the grace of the pools' signaled
        turns. The grace and the spread are the limits' unless given."""
        limits = self.limits
        grace_ms = limits.restart_grace_s * 1000 if grace_ms is None else grace_ms
        spread_ms = limits.restart_spread_s * 1000 if spread_ms is None else spread_ms
        outcome = self.leases.restart(now_ms, grace_ms, spread_ms)
        turns = self.capacity.restart(now_ms, grace_ms)
        outcome.records.extend(turns.records)
        outcome.timers.extend(turns.timers)
        return outcome

    def image(self) -> Iterator[dict]:
        """Records that rebuild this space exactly: its stored answers (first: each takes the room
        the values leave, and before them it needs none), its scopes, its claims, then its
        mailboxes, messages and tasks (scopes first: the queues live in them), and last its usage
        counters."""
        yield from self.idempotency.image(self.id)
        for record in self.scopes.image():
            record["space"] = self.id
            yield record
        for record in self.claims.image():
            record["space"] = self.id
            yield record
        for record in self.work.image():
            record["space"] = self.id
            yield record
        # Once slots and run names; capacity after the tasks (a work limit counts its tasks by id).
        # -- coordination -- (after the queues: groups name their tasks; the event log last)
        for record in (*self.once.image(), *self.run_names.image(), *self.capacity.image(), *self.coordination.image()):
            record["space"] = self.id
            yield record
        for record in self.events.image():
            record["space"] = self.id
            yield record
        usage = self.usage
        if usage.operations or usage.free or usage.events or usage.takeovers:
            yield usage.image(self.id)  # last: it sets the counters outright

    def is_empty(self) -> bool:
        """Nothing recorded here (a space is made on first use, reads included)."""
        return (
            not len(self.scopes) and not len(self.claims) and self.work.is_empty() and not len(self.once)
            and self.capacity.is_empty()
            and self.coordination.is_empty() and not self.events.seq  # -- coordination --
            and not len(self.idempotency)
        )

    # -- applying -------------------------------------------------------------------------------

    def apply(self, record: dict) -> None:
        kind = record["type"]
        self.usage.count(record)
        if kind not in _WITH_EVENTS:  # one call for a type that makes no event (or makes its own)
            self._appliers[kind](record)
            return
        events = self.events  # -- coordination --
        derive = DERIVE.get(kind)  # seen before the record changes anything
        made = None if derive is None else derive(self, record)  # one change, a list, or None
        self._appliers[kind](record)
        if made:
            if made.__class__ is tuple:
                events.add(made, record["at_ms"])
            else:
                events.append(made, record["at_ms"])
        # What follows from the record (a scope's end, a group finalizing), after its own events.
        if kind in AFTER_APPLY_KINDS:
            after = self.coordination.after_apply(record)
            if after:
                events.append(after, record["at_ms"])

    def _apply_claim_acquired(self, record: dict) -> None:
        claims = self.claims
        takeovers = claims.takeovers
        claims.apply_acquired(record)
        # -- coordination -- (a claim's event, see `events.py`; built here, one per claim record)
        self.events.add(
            ("claim.taken_over" if claims.takeovers != takeovers else "claim.acquired", record["scope_id"], "claim",
             record["key"], (record["generation"], record["holder"])),
            record["at_ms"],
        )

    def _apply_claim_ended(self, record: dict) -> None:
        claim = self.claims.apply_ended(record)
        # -- coordination -- (a release, a forced release or an expiry is its own event type)
        kind = record["type"]
        if kind == CLAIM_FORCE_RELEASED:  # says whose claim it was, why and who took it
            payload: tuple = (record["generation"], record["holder"], record.get("reason"), record.get("by"))
        else:
            payload = (record["generation"],)
        self.events.add((kind, claim.scope_id, "claim", record["key"], payload), record["at_ms"])

    def _apply_scope_ended(self, record: dict) -> None:
        subtree = self.scopes.apply_ended(record)
        self.claims.drop_scopes(subtree)
        self.work.cascade_scope_ended(subtree, record["state"], record["at_ms"])
        self.capacity.cascade_scope_ended(subtree, record["at_ms"])  # -- capacity --


# What each kind of timer proposes, by the first element of its tag.
TIMERS: dict[str, Callable[[SpaceState, Any, Any, int], Outcome]] = {
    LEASE_TIMER: lambda space, _, token, now_ms: space.claiming.expire(token, now_ms),
    DEADLINE_TIMER: lambda space, scope_id, _, now_ms: space.expire_scope(scope_id, now_ms),
    ONCE_LEASE_TIMER: lambda space, ident, token, now_ms: space.onces.expire(ident, token, now_ms),
    **{kind: (lambda handler: lambda space, ident, marker, now_ms: handler(space.work, ident, marker, now_ms))(handler)
       for kind, handler in WORK_TIMERS.items()},
    # -- capacity --
    **{kind: (lambda handler: lambda space, ident, marker, now_ms: handler(space.capacity, ident, marker, now_ms))(handler)
       for kind, handler in CAPACITY_TIMERS.items()},
    WAKE_TIMER: on_wake_timer,
    # -- coordination --
    **{kind: (lambda handler: lambda space, ident, marker, now_ms: handler(space.coordination, ident, marker, now_ms))(handler)
       for kind, handler in COORDINATION_TIMERS.items()},
}

# What applies each type of record, by the attribute of the space holding the part that applies
# it ("" for the space itself: what crosses between parts, and a claim's records, whose events
# come from what applying them found). Image-only records are a snapshot's way of saying "this is
# how it stands"; `run.named` is its own image.
_APPLY: tuple[tuple[str, dict[str, Callable[[Any, dict], Any]]], ...] = (
    ("", {
        SCOPE_ENDED: SpaceState._apply_scope_ended,
        CLAIM_ACQUIRED: SpaceState._apply_claim_acquired,
        CLAIM_RELEASED: SpaceState._apply_claim_ended,
        CLAIM_EXPIRED: SpaceState._apply_claim_ended,
        CLAIM_FORCE_RELEASED: SpaceState._apply_claim_ended,
    }),
    ("scopes", {SCOPE_CREATED: ScopeTree.apply_created, SCOPE_IMAGE: ScopeTree.apply_image}),
    ("claims", {CLAIM_RENEWED: ClaimTable.apply_renewed, CLAIM_IMAGE: ClaimTable.apply_image}),
    ("usage", {USAGE_IMAGE: Usage.apply_image}),
    ("run_names", {RUN_NAMED: RunNames.apply_named}),
    ("work", WORK_APPLY),  # mailboxes, messages and tasks, image records included
    ("once", ONCE_APPLY),
    ("capacity", CAPACITY_APPLY),  # -- capacity --
    ("coordination", COORDINATION_APPLY),  # -- coordination --
    ("events", {EVENTS_IMAGE: EventLog.apply_image_header, EVENT_IMAGE: EventLog.apply_image_event}),
    ("idempotency", {IDEM_STORED: IdempotencyTable.apply_stored}),
)

RECORD_TYPES = frozenset(kind for _, table in _APPLY for kind in table)
assert len(RECORD_TYPES) == sum(len(table) for _, table in _APPLY), "each record type is applied by one part"
# -- coordination -- the types whose events `apply` derives before and after applying them (a
# claim's are made as it applies, `_apply_claim_acquired`; most other types make none).
_WITH_EVENTS = frozenset(DERIVE) | AFTER_APPLY_KINDS
assert _WITH_EVENTS <= RECORD_TYPES and not _WITH_EVENTS & {
    CLAIM_ACQUIRED, CLAIM_RELEASED, CLAIM_EXPIRED, CLAIM_FORCE_RELEASED,
}


def _appliers(space: SpaceState) -> dict[str, Callable[[dict], Any]]:
    """`_APPLY` for one space: each entry bound to the part it applies to, so that applying a
    record is one call (`apply` runs on every record, live and in replay)."""
    return {
        kind: apply.__get__(getattr(space, attribute) if attribute else space)
        for attribute, table in _APPLY
        for kind, apply in table.items()
    }
