"""Barriers: wait until `target` distinct arrivals, then stay released.

A barrier lives in a scope. Each arrival names an `arrivalKey`; a key counts once per epoch, so an
agent that retries its arrival (or arrives twice by mistake) does not release the barrier early.
When the count reaches `target` the barrier is RELEASED and stays released: a later arrival is a
409 `BARRIER_RELEASED` (which the 0.3.0 client counts as success), never a second round. Only an
explicit reset, which no client uses, would start a new epoch; `epoch` is 1 for every barrier here.

When its scope ends (cancelled, completed or expired) an open barrier is CANCELLED, and an arrival
then gets 409 `BARRIER_CANCELLED`. The cascade is applied with the scope's `scope.ended` record
(`coordination.py`), like the tasks of the scope, so no crash can leave an open barrier in an ended
scope. A barrier whose scope has passed its deadline before the expiry is recorded reads as
CANCELLED already, and refuses arrivals the same way. The barriers' declaration (`BARRIERS`, which
makes the coordination part, `coordination.py`) is at the end.

A barrier may have a name, unique in its scope (`PUT /barriers/by-name/{name}`, what the 0.3.0
client's `together(name, count)` uses): a put of a name that exists answers that barrier, in
whatever state it is, if its target is the one sent, and is 409 `CONFLICT` otherwise (two callers
that disagree on how many must meet would never both be right).

Pure: no IO, no clock reads; every method takes `now_ms`.
"""

from __future__ import annotations

from typing import Final, Iterator, Literal, NamedTuple

from . import coordination
from .actor_keys import ActorKey, barrier_actor, barrier_name_actor
from .caps import full
from .errors import CONFLICT, NOT_FOUND, KernelError
from .events import Change, entity_event
from .fields import INTEGER, body, check_text, drawn, path
from .limits import Limits
from .outcome import Outcome, Space, State
from .primitive import NOT_COUNTED, Command, Primitive, command, operation, record_type
from .scopes import ACTIVE, SCOPE_ENDED, ScopeTree
from .coordination import CoordinationCommands
from .shapes import EpochMs, Record

__all__ = [
    "Barrier", "BarrierTable", "BarrierView", "BarrierState", "BARRIERS", "CreateBarrier", "EnsureBarrier", "ArriveBarrier", "OPEN", "RELEASED", "CANCELLED", "BARRIER_RELEASED",
    "BARRIER_CANCELLED", "BARRIER_ARRIVED", "BARRIER_CREATED", "BARRIER_IMAGE",
]

# The record types this module decides and applies (the journal's spelling of each).
BARRIER_ARRIVED = record_type("barrier.arrived")
BARRIER_CREATED = record_type("barrier.created")
BARRIER_IMAGE = record_type("barrier.image")

BarrierState = Literal["OPEN", "RELEASED", "CANCELLED"]
OPEN: Final = "OPEN"
RELEASED: Final = "RELEASED"
CANCELLED: Final = "CANCELLED"

# Wire codes (409).
BARRIER_RELEASED = "BARRIER_RELEASED"
BARRIER_CANCELLED = "BARRIER_CANCELLED"

class BarrierView(NamedTuple):
    """A barrier as creating, putting by name, arriving and reading answer: its state as it acts
    (CANCELLED for an open one whose scope no longer is active), how many arrived of its target,
    and when it was released (None until then, and for one cancelled)."""

    id: str
    scope_id: str
    name: str | None
    state: BarrierState
    epoch: int
    target: int
    arrived: int
    created_ms: EpochMs
    released_ms: EpochMs | None


class Barrier:
    __slots__ = ("id", "scope_id", "target", "epoch", "state", "arrivals", "created_ms", "ended_ms", "name")

    def __init__(self, barrier_id: str, scope_id: str, target: int, created_ms: int, name: str | None = None) -> None:
        self.id = barrier_id
        self.name = name
        self.scope_id = scope_id
        self.target = target
        self.epoch = 1
        self.state: BarrierState = OPEN
        # Insertion-ordered, at most `target` keys: arrivals stop counting at the release.
        self.arrivals: dict[str, None] = {}
        self.created_ms = created_ms
        self.ended_ms: int | None = None


class BarrierTable:
    """The barriers of one space, by id."""

    __slots__ = ("_by_id", "_open_by_scope", "_by_name", "_scopes", "_limits")
    # (`_scopes` is the space's own table, compared there: `snapshots.equality`.)
    _DERIVED = ("_scopes",)

    def __init__(self, limits: Limits, scopes: ScopeTree) -> None:
        self._by_id: dict[str, Barrier] = {}
        # The open barriers of each scope, so a scope's end finds its own without a scan.
        self._open_by_scope: dict[str, dict[str, None]] = {}
        # Named barriers, whatever their state: (scope_id, name) -> barrier id.
        self._by_name: dict[tuple[str, str], str] = {}
        self._scopes = scopes
        self._limits = limits

    def __len__(self) -> int:
        return len(self._by_id)

    def get(self, barrier_id: str) -> Barrier:
        barrier = self._by_id.get(barrier_id)
        if barrier is None:
            raise KernelError(NOT_FOUND, f"barrier {barrier_id!r} not found")
        return barrier

    def find(self, barrier_id: str) -> Barrier | None:
        return self._by_id.get(barrier_id)

    def by_name(self, scope_id: str, name: str) -> Barrier | None:
        barrier_id = self._by_name.get((scope_id, name))
        return None if barrier_id is None else self._by_id[barrier_id]

    def all(self) -> Iterator[Barrier]:
        return iter(self._by_id.values())

    def state_of(self, barrier: Barrier, now_ms: int) -> BarrierState:
        """The stored state, or CANCELLED for an open barrier whose scope is no longer active."""
        if barrier.state == OPEN and self._scopes.effective(self._scopes.get(barrier.scope_id), now_ms) != ACTIVE:
            return CANCELLED
        return barrier.state

    def view(self, barrier: Barrier, now_ms: int) -> BarrierView:
        arrived = len(barrier.arrivals)
        assert arrived <= barrier.target, "arrivals stop counting at the release"
        released_ms = barrier.ended_ms if barrier.state == RELEASED else None
        return BarrierView(
            barrier.id, barrier.scope_id, barrier.name, self.state_of(barrier, now_ms), barrier.epoch, barrier.target, arrived,
            barrier.created_ms, released_ms,
        )

    # -- deciding -------------------------------------------------------------------------------

    def decide_create(self, barrier_id: str, scope_id: str, target: int, now_ms: int, name: str | None = None) -> Record:
        self._scopes.require_active(scope_id, now_ms)
        if name is not None and (scope_id, name) in self._by_name:
            raise KernelError(CONFLICT, f"scope {scope_id} already has a barrier named {name!r}")
        if len(self._by_id) >= self._limits.barriers_max:
            raise full(f"space holds {len(self._by_id)} barriers", "barriers_max")
        if barrier_id in self._by_id:  # an id source collision: the caller draws another id
            raise KernelError(CONFLICT, f"barrier id {barrier_id} is taken")
        assert target > 0, "a barrier waits for some arrivals"
        record = {"type": BARRIER_CREATED, "id": barrier_id, "scope_id": scope_id, "target": target, "at_ms": now_ms}
        if name is not None:
            record["name"] = name
        return record

    @staticmethod
    def check_named(barrier: Barrier, target: int) -> None:
        """A put by name of a barrier that exists: the target sent must be its own."""
        if barrier.target != target:
            raise KernelError(CONFLICT, f"barrier {barrier.name!r} has target {barrier.target}, not {target}")

    def decide_arrive(self, barrier: Barrier, arrival_key: str, now_ms: int) -> list[Record]:
        """The arrival's record (which releases the barrier when it is the last one needed); none
        for a key already counted in this epoch."""
        state = self.state_of(barrier, now_ms)
        if state == CANCELLED:
            raise KernelError(BARRIER_CANCELLED, f"barrier {barrier.id} was cancelled (its scope ended)")
        if state == RELEASED:
            raise KernelError(
                BARRIER_RELEASED, f"barrier {barrier.id} was already released (epoch {barrier.epoch})",
                details={"epoch": barrier.epoch},
            )
        if arrival_key in barrier.arrivals:
            return []
        # Paired with `apply_arrived`: an open barrier has fewer arrivals than its target.
        assert barrier.state == OPEN and len(barrier.arrivals) < barrier.target, "only an open barrier takes arrivals"
        return [{"type": BARRIER_ARRIVED, "id": barrier.id, "arrival_key": arrival_key, "at_ms": now_ms}]

    # -- applying -------------------------------------------------------------------------------

    def apply_created(self, record: Record) -> Barrier:
        barrier = Barrier(record["id"], record["scope_id"], record["target"], record["at_ms"], record.get("name"))
        self._by_id[barrier.id] = barrier
        if barrier.name is not None:
            assert (barrier.scope_id, barrier.name) not in self._by_name, f"two barriers named {barrier.name!r}"
            self._by_name[(barrier.scope_id, barrier.name)] = barrier.id
        self._open_by_scope.setdefault(barrier.scope_id, {})[barrier.id] = None
        return barrier

    def _close(self, barrier: Barrier, state: BarrierState, at_ms: int | None) -> None:
        barrier.state = state
        barrier.ended_ms = at_ms
        open_here = self._open_by_scope.get(barrier.scope_id)
        if open_here is not None:
            open_here.pop(barrier.id, None)
            if not open_here:
                del self._open_by_scope[barrier.scope_id]

    def apply_arrived(self, record: Record) -> Barrier:
        barrier = self._by_id[record["id"]]
        assert barrier.state == OPEN, f"an arrival at barrier {barrier.id} after it ended"
        barrier.arrivals[record["arrival_key"]] = None
        assert len(barrier.arrivals) <= barrier.target, "a barrier counts at most target arrivals"
        if len(barrier.arrivals) == barrier.target:
            self._close(barrier, RELEASED, record["at_ms"])
        return barrier

    def cancel_in_scopes(self, scope_ids: list[str], at_ms: int) -> list[Barrier]:
        """Applied with a scope's end: its open barriers (and its subtree's) are CANCELLED."""
        cancelled = []
        for scope_id in scope_ids:
            for barrier_id in list(self._open_by_scope.get(scope_id, ())):
                barrier = self._by_id[barrier_id]
                self._close(barrier, CANCELLED, at_ms)
                cancelled.append(barrier)
        return cancelled

    def drop_scopes(self, scope_ids: frozenset[str]) -> None:
        """Ended runs removed (`runs.py`): their barriers, all ended, leave with them."""
        for barrier in [barrier for barrier in self._by_id.values() if barrier.scope_id in scope_ids]:
            assert barrier.state != OPEN, f"barrier {barrier.id} of a removed run is open"
            del self._by_id[barrier.id]
            if barrier.name is not None:
                del self._by_name[(barrier.scope_id, barrier.name)]

    # -- images ---------------------------------------------------------------------------------

    def image(self) -> Iterator[Record]:
        for barrier in self._by_id.values():
            yield {
                "type": BARRIER_IMAGE,
                "id": barrier.id,
                "scope_id": barrier.scope_id,
                "target": barrier.target,
                "epoch": barrier.epoch,
                "state": barrier.state,
                "arrivals": list(barrier.arrivals),
                "at_ms": barrier.created_ms,
                "ended_ms": barrier.ended_ms,
                "name": barrier.name,
            }

    def apply_image(self, record: Record) -> Barrier:
        barrier = self.apply_created(record)
        barrier.epoch = record["epoch"]
        barrier.arrivals = dict.fromkeys(record["arrivals"])
        if record["state"] != OPEN:
            self._close(barrier, record["state"], record["ended_ms"])
        return barrier


# -- commands ----------------------------------------------------------------------------------


@command
class CreateBarrier(Command):
    space: str = path("space")
    scope_id: str = body("scopeId")
    target: int = body("target", INTEGER, minimum=1, maximum="barrier_target_max")
    barrier_id: str = drawn("br_")

    def actor(self, state: State) -> ActorKey:
        return barrier_actor(self.space, self.barrier_id)


@command
class EnsureBarrier(Command):
    """The barrier of this name in the scope, created with `target` when it does not exist yet; one
    that exists must have that target (else CONFLICT)."""

    space: str = path("space")
    name: str = path("name")
    scope_id: str = body("scopeId")
    target: int = body("target", INTEGER, minimum=1, maximum="barrier_target_max")
    barrier_id: str = drawn("br_")

    def actor(self, state: State) -> ActorKey:
        return barrier_name_actor(self.space, self.scope_id, self.name)

    def check(self, limits: Limits) -> None:
        check_text("name", self.name, limits.name_len_max)


@command
class ArriveBarrier(Command):
    """Arrive once per arrival key; the arrival that makes `target` releases the barrier."""

    space: str = path("space")
    barrier_id: str = path("barrier_id")
    arrival_key: str = body("arrivalKey", length_max="claim_key_len_max")

    def actor(self, state: State) -> ActorKey:
        return barrier_actor(self.space, self.barrier_id)


# -- transitions (of the coordination part) --------------------------------------------------------


def create(part: CoordinationCommands, command: CreateBarrier, now_ms: int) -> Outcome:
    barriers: BarrierTable = part.barriers
    record = barriers.decide_create(command.barrier_id, command.scope_id, command.target, now_ms)
    outcome = part.commit(Outcome(), record)
    outcome.reply = barriers.view(barriers.get(command.barrier_id), now_ms)
    return outcome


def ensure(part: CoordinationCommands, command: EnsureBarrier, now_ms: int) -> Outcome:
    """The scope's barrier of this name (its target must be the one sent), created if missing."""
    barriers: BarrierTable = part.barriers
    barrier = barriers.by_name(command.scope_id, command.name)
    if barrier is not None:
        barriers.check_named(barrier, command.target)
        return Outcome(reply=barriers.view(barrier, now_ms))
    record = barriers.decide_create(command.barrier_id, command.scope_id, command.target, now_ms, command.name)
    outcome = part.commit(Outcome(), record)
    outcome.reply = barriers.view(barriers.get(command.barrier_id), now_ms)
    return outcome


def arrive(part: CoordinationCommands, command: ArriveBarrier, now_ms: int) -> Outcome:
    barriers: BarrierTable = part.barriers
    barrier = barriers.get(command.barrier_id)
    outcome = part.commit(Outcome(), *barriers.decide_arrive(barrier, command.arrival_key, now_ms))
    outcome.reply = barriers.view(barrier, now_ms)
    return outcome


# -- what follows from records (events) ------------------------------------------------------------


def _after_arrival(space: Space, record: Record) -> list[Change]:
    barrier = space.coordination.barriers.get(record["id"])
    if barrier.state == RELEASED:  # this arrival made the target
        return [("barrier.released", barrier.scope_id, "barrier", barrier.id, {"arrived": len(barrier.arrivals)})]
    return []


def _after_scope_ended(space: Space, record: Record) -> list[Change]:
    """A scope's end cancels the open barriers of its subtree."""
    subtree = space.scopes.subtree(record["id"])
    cancelled = space.coordination.barriers.cancel_in_scopes(subtree, record["at_ms"])
    return [("barrier.cancelled", barrier.scope_id, "barrier", barrier.id, {"state": barrier.state}) for barrier in cancelled]


def _find(space: Space, barrier_id: str) -> Barrier | None:
    return space.coordination.barriers.find(barrier_id)


def _make(space: Space) -> None:
    part = coordination.make(space)  # the coordination part, shared with timers and task groups
    part.barriers = BarrierTable(space.limits, space.scopes)


_TABLE = "coordination.barriers"

BARRIERS = Primitive(
    "barriers",
    make=_make,
    state=("coordination",),
    commands={
        CreateBarrier: ("coordination", create),
        EnsureBarrier: ("coordination", ensure),
        ArriveBarrier: ("coordination", arrive),
    },
    records={
        # `name` only on a named barrier (`PUT /barriers/by-name/{name}`).
        BARRIER_CREATED: ("id", "scope_id", "target", "at_ms", "name?"),
        # The arrival that makes `target` releases the barrier in the same record: a release recorded
        # apart could be lost with the tail of the journal while the arrival was kept.
        BARRIER_ARRIVED: ("id", "arrival_key", "at_ms"),
        BARRIER_IMAGE: ("id", "scope_id", "target", "epoch", "state", "arrivals", "at_ms", "ended_ms", "name?"),
    },
    apply={
        BARRIER_CREATED: (_TABLE, "apply_created"),
        BARRIER_ARRIVED: (_TABLE, "apply_arrived"),
        BARRIER_IMAGE: (_TABLE, "apply_image"),
    },
    usage={BARRIER_CREATED: operation("barriers.create"), BARRIER_ARRIVED: operation("barriers.arrive"), BARRIER_IMAGE: NOT_COUNTED},
    derive={
        BARRIER_CREATED: entity_event("barrier.created", "barrier", _find, "target", "name"),
        BARRIER_ARRIVED: entity_event("barrier.arrived", "barrier", _find, "arrival_key"),
    },
    after={BARRIER_ARRIVED: _after_arrival, SCOPE_ENDED: _after_scope_ended},
    events={"barrier.created": None, "barrier.arrived": None, "barrier.released": None, "barrier.cancelled": None},
    image=lambda space: space.coordination.barriers.image(),
    is_empty=lambda space: not len(space.coordination.barriers),
    scopes_removed=lambda space, scope_ids: space.coordination.barriers.drop_scopes(scope_ids),
)
