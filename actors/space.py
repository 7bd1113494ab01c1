"""One space: the parts its primitives make, and the one `apply` every change of it goes through.

A space is composed of one part per primitive, made in the order `primitives.PRIMITIVES` lists them
(tables that hold state, and parts that hold the commands over them, each given only the tables it
uses and the space's `commit`). Everything a space does for all of its primitives is a loop over
their declarations, resolved into flat tables at import: applying a record (`apply`, with the
events it makes and its usage count), firing a timer (`fire`), the timers a recovery arms
(`timers`), the decisions of a start (`restart`: the lease rule over every lease, then each
primitive's own), an image (`image`), emptiness, the entities and bytes it keeps (its caps), and
what a scope's end does to what lives in its subtree (`scope_ended`, `scope_ending`), and what an
ended run's removal drops (`scopes_removed`, `scopes_kept`). This module names no primitive.

The space's event log (`events.py`) is made in `apply` from each record as it is applied, so it is
rebuilt by replay like everything else, and a turn that made events pokes the watches parked on it.

Each command's transition checks, decides the records, applies them through `commit` (the same
`apply` replay runs) and returns an `Outcome` with the reply, the records, the timers to arm and the
actors to poke. Timers come back as `FireTimer` commands; each primitive declares what its kinds of
timer propose.

Pure: no IO, no clock reads, no awaits.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Iterator

from .actor_keys import ActorKey, events_actor
from .boot import BootInfo
from .caps import check_bytes, full
from .errors import VALIDATION_FAILED, KernelError, quote
from .leases import LeaseTable
from .limits import Limits
from .outcome import Outcome, Timer, TimerMarker, TimerTag
from .primitives import TABLES, bind
from .shapes import Record

if TYPE_CHECKING:  # the tables a space's primitives make on it: named for the checker only
    from .capacity import CapacityCommands
    from .claiming import ClaimCommands
    from .claims import ClaimTable
    from .coordination import CoordinationCommands
    from .events import EventLog
    from .idempotency import IdempotencyTable
    from .mailboxes import MailboxTable
    from .messages import MessageTable
    from .once import OnceCommands, OnceTable
    from .runs import RunCommands, RunNames
    from .scopes import ScopeTree
    from .tasks import TaskTable
    from .usage import Usage
    from .work import WorkCommands

__all__ = ["SpaceState", "RECORD_TYPES"]

_PRIMITIVES = TABLES.space
_APPLY = TABLES.space_apply
_TIMERS = TABLES.timers
_DERIVE = TABLES.derive
_AFTER = TABLES.after
_MAKERS = tuple(p.make for p in _PRIMITIVES if p.make is not None)
_IMAGES = tuple(p.image for p in _PRIMITIVES if p.image is not None)
_EMPTY = tuple(p.is_empty for p in _PRIMITIVES if p.is_empty is not None)
_ENTITIES = tuple(p.entities for p in _PRIMITIVES if p.entities is not None)
_VALUES = tuple(p.values_bytes for p in _PRIMITIVES if p.values_bytes is not None)
_DEADLINES = tuple(p.deadlines for p in _PRIMITIVES if p.deadlines is not None)
_LEASES = tuple(p.leases for p in _PRIMITIVES if p.leases is not None)
_RESTARTS = tuple(p.restart for p in _PRIMITIVES if p.restart is not None)
_SCOPE_ENDED = tuple(p.scope_ended for p in _PRIMITIVES if p.scope_ended is not None)
_SCOPE_ENDING = tuple(p.scope_ending for p in _PRIMITIVES if p.scope_ending is not None)
_COMMITTED = tuple(p.committed for p in _PRIMITIVES if p.committed is not None)
_COMMITTED_ON = TABLES.committed_on  # a turn that applies none of these calls no hook
_SCOPES_REMOVED = tuple(p.scopes_removed for p in _PRIMITIVES if p.scopes_removed is not None)
_SCOPES_KEPT = tuple(p.scopes_kept for p in _PRIMITIVES if p.scopes_kept is not None)

# Every record type a space applies.
RECORD_TYPES = frozenset(_APPLY)
# The types whose events `apply` derives before and after applying them (a claim's are made as it
# applies; most other types make none, and are applied with one call).
_WITH_EVENTS = frozenset(_DERIVE) | frozenset(_AFTER)


class SpaceState:
    # The parts hold commands over the tables, no state of their own (`snapshots.equality`).
    _DERIVED = (*(name for p in _PRIMITIVES for name in p.parts), "leases", "_appliers", "_events_actor")

    __slots__ = (
        "id", "limits", "boot", *(name for p in _PRIMITIVES for name in (*p.state, *p.parts)), "leases", "_appliers",
        "_events_actor",
    )
    # Attributes the primitives make (`Primitive.make`) that the space and the kernel's state read
    # by name; each is made, and holds its state, in its primitive's module.
    scopes: ScopeTree
    claims: ClaimTable
    mailboxes: MailboxTable
    messages: MessageTable
    tasks: TaskTable
    idempotency: IdempotencyTable
    events: EventLog
    usage: Usage
    claiming: ClaimCommands
    once: OnceTable
    onces: OnceCommands
    run_names: RunNames
    runs: RunCommands
    work: WorkCommands
    capacity: CapacityCommands
    coordination: CoordinationCommands

    def __init__(self, space_id: str, limits: Limits, boot: BootInfo | None = None) -> None:
        self.id = space_id
        self.limits = limits
        self.boot = boot if boot is not None else BootInfo()  # shared by all spaces of a state
        for make in _MAKERS:
            make(self)
        # Every lease of the space, for the restart rule: each kind attaches where its leases are.
        self.leases = LeaseTable()
        for kind in _LEASES:
            self.leases.attach(kind(self))
        # What applies each type of record here: each declared applier bound to its part, so that
        # applying a record is one call (`apply` runs on every record, live and in replay).
        self._appliers: dict[str, Callable[[Record], Any]] = {kind: bind(self, on) for kind, on in _APPLY.items()}
        self._events_actor: ActorKey = events_actor(space_id)

    # -- committing and applying ------------------------------------------------------------------

    def commit(self, outcome: Outcome, *records: Record) -> Outcome:
        """Apply `records` (in order) and keep them in `outcome`, as a transition's decision."""
        events = self.events
        seq = events.seq
        space_id, apply, kept = self.id, self.apply, outcome.records
        hooked = False
        for record in records:
            record["space"] = space_id
            apply(record)
            kept.append(record)
            if record["type"] in _COMMITTED_ON:
                hooked = True
        if hooked:
            for committed in _COMMITTED:
                committed(self, outcome, records)
        if events.seq != seq:  # watches parked on the log look again
            outcome.pokes.append(self._events_actor)
        return outcome

    def apply(self, record: Record) -> None:
        kind = record["type"]
        self.usage.count(record)
        if kind not in _WITH_EVENTS:  # one call for a type that makes no event (or makes its own)
            self._appliers[kind](record)
            return
        events = self.events
        derive = _DERIVE.get(kind)  # seen before the record changes anything
        made = None if derive is None else derive(self, record)  # one change, a list, or None
        self._appliers[kind](record)
        if made:
            if made.__class__ is tuple:
                events.add(made, record["at_ms"])
            else:
                events.append(made, record["at_ms"])
        # What follows from the record (a scope's end, a group finalizing), after its own events.
        after = _AFTER.get(kind)
        if after is not None:
            followed = after(self, record)
            if followed:
                events.append(followed, record["at_ms"])

    # -- a scope's end, for every primitive living in its subtree ----------------------------------

    def scope_ended(self, subtree: list[str], state: str, at_ms: int) -> None:
        """Applied with `scope.ended` (live and in replay): what lives in the subtree ends with it."""
        for ended in _SCOPE_ENDED:
            ended(self, subtree, state, at_ms)

    def scope_ending(self, subtree: list[str]) -> list[Callable[[Outcome, int], None]]:
        """In the turn that decides a scope's end, before its record applies: what each primitive
        must see now, and do once the end has applied (in declaration order)."""
        return [then for ending in _SCOPE_ENDING if (then := ending(self, subtree)) is not None]

    # -- an ended run's removal (`runs.py`) -------------------------------------------------------

    def scopes_kept(self, scope_ids: frozenset[str]) -> set[str]:
        """Those of these ended scopes that must stay for now: something live refers to what they hold."""
        kept: set[str] = set()
        for keeping in _SCOPES_KEPT:
            kept |= keeping(self, scope_ids)
        return kept

    def scopes_removed(self, scope_ids: frozenset[str]) -> None:
        """Applied with `run.removed` (live and in replay): every primitive drops what it keeps of
        these scopes, all ended."""
        for removed in _SCOPES_REMOVED:
            removed(self, scope_ids)

    # -- the caps (`caps.py`) ---------------------------------------------------------------------

    # These two run on every command that keeps something new (a submit, a send, a completion):
    # a plain loop, since `sum` over a generator resumes a frame per primitive as well as calling it.

    def values_bytes(self) -> int:
        """The bytes of the caller values this space keeps (stored answers aside, `caps.py`)."""
        held = 0
        for values in _VALUES:
            held += values(self)
        return held

    def entities(self) -> int:
        """The entities this space keeps, live or ended (stored answers aside, `caps.py`)."""
        kept = 0
        for count in _ENTITIES:
            kept += count(self)
        return kept

    def check_entities(self, adding: int) -> None:
        """The entity cap (`caps.py`); the stored answers give their room back, so they are not counted."""
        kept = self.entities()
        if kept + adding > self.limits.space_entities_max:
            raise full(
                f"space keeps {kept} runs, claim keys, messages, tasks and waiters and this needs {adding} more",
                "space_entities_max",
            )

    def check_bytes(self, adding: int, freeing: int) -> None:
        """The payload cap over every table that keeps caller values (`caps.py`); the stored
        answers give their room back to a value, so they are not counted here."""
        check_bytes(self.values_bytes(), adding, freeing, self.limits.space_payload_bytes_max)

    # -- timers, restarts, images -----------------------------------------------------------------

    def fire(self, tag: TimerTag, marker: TimerMarker, now_ms: int) -> Outcome:
        """A timer fell due: run what its kind proposes (each checks again that it still holds)."""
        kind, ident = tag
        handler = _TIMERS.get(kind)
        if handler is None:
            raise KernelError(VALIDATION_FAILED, f"no timer of kind {quote(kind)}")
        that, propose = handler
        return propose(that(self), ident, marker, now_ms)

    def timers(self) -> Iterator[Timer]:
        """Every timer the current state needs: after a recovery the kernel arms these."""
        for deadlines in _DEADLINES:
            yield from deadlines(self)

    def restart(self, now_ms: int, grace_ms: int | None = None, spread_ms: int | None = None) -> Outcome:
        """At a start: the restart rule over every lease of the space together (`leases.py`:
        claims, pool grants, deliveries, once slots), then what each primitive decides besides
        (the pools' signaled turns). The grace and the spread are the limits' unless given."""
        limits = self.limits
        grace_ms = limits.restart_grace_s * 1000 if grace_ms is None else grace_ms
        spread_ms = limits.restart_spread_s * 1000 if spread_ms is None else spread_ms
        outcome = self.leases.restart(now_ms, grace_ms, spread_ms)
        for restart in _RESTARTS:
            decided = restart(self, now_ms, grace_ms)
            outcome.records.extend(decided.records)
            outcome.timers.extend(decided.timers)
        return outcome

    def image(self) -> Iterator[Record]:
        """Records that rebuild this space exactly, each primitive's in declaration order: its
        stored answers first (each takes the room the values leave, and before them it needs none),
        the scopes before what lives in them, the tasks before what counts them, the event log
        and the usage counters last."""
        space_id = self.id
        for image in _IMAGES:
            for record in image(self):
                record["space"] = space_id
                yield record

    def is_empty(self) -> bool:
        """Nothing recorded here (a space is made on first use, reads included)."""
        return all(empty(self) for empty in _EMPTY)
