"""Scopes (runs): a tree of lifetimes that everything else lives in.

A scope is created active, and ends once: cancelled, completed, or expired at its deadline. Its
*effective* state is the first ending found walking from it up to the root, so ending a scope ends
its whole subtree at once, without touching every descendant. What the end does to what lives in
the subtree (claims freed, queued tasks cancelled, deliveries under way ended, waiters ended,
barriers and timers cancelled) each primitive declares for itself (`scope_ended`, applied with
the `scope.ended` record, and `scope_ending`, run in the turn that decides it), and the space runs
them in the declarations' order (`SpaceState.scope_ended`, `SpaceState.scope_ending`).

Timers (on the scope's actor):
    ("scope-deadline", scope_id)   -   the deadline passed: record EXPIRED if the scope is still active

Pure: no IO, no clock reads; every method takes `now_ms`.
"""

from __future__ import annotations

from typing import Callable, ClassVar, Final, Iterator, Literal, NamedTuple

from .actor_keys import ActorKey, scope_actor
from .caps import full
from .errors import CONFLICT, NOT_FOUND, SCOPE_CANCELLED, VALIDATION_FAILED, KernelError, quote
from .fields import INTEGER, TIMESTAMP, body, caller, drawn, path
from .limits import Limits
from .outcome import Outcome, Timer, Space, State, TimerMarker
from .primitive import EVENT, NOT_COUNTED, OPERATION, Command, Primitive, command, operation, record_type, timer_kind
from .shapes import EpochMs, Record

__all__ = [
    "Scope", "ScopeTree", "ACTIVE", "CANCELLED", "COMPLETED", "EXPIRED", "SCOPE_CREATED", "SCOPE_ENDED", "SCOPE_IMAGE",
    "SCOPE_END_REASONS", "ScopeState", "ScopeView", "ScopesView", "CreateScope", "EndScope", "CancelScope", "CompleteScope", "SCOPES", "deadline_timer",
]

# The record types this module decides and applies (the journal's spelling of each).
SCOPE_CREATED = record_type("scope.created")
SCOPE_ENDED = record_type("scope.ended")
SCOPE_IMAGE = record_type("scope.image")

ScopeState = Literal["ACTIVE", "CANCELLED", "COMPLETED", "EXPIRED"]
ACTIVE: Final = "ACTIVE"
CANCELLED: Final = "CANCELLED"
COMPLETED: Final = "COMPLETED"
EXPIRED: Final = "EXPIRED"
# What a task or a group that a scope's end ends records as its reason (0.3.0 reads `scope_cancelled`).
SCOPE_END_REASONS = {CANCELLED: "scope_cancelled", COMPLETED: "scope_completed", EXPIRED: "scope_expired"}

DEADLINE_TIMER = timer_kind("scope-deadline")


class ScopeView(NamedTuple):
    """A scope (a run, at the root) as creating, ending and reading it answer: its own state as
    recorded (`stored_state`) and the one that counts (`effective`: the first end on the way up
    to the root, or EXPIRED once a deadline passed), its number of child scopes, and its times."""

    id: str
    name: str | None
    parent_id: str | None
    deadline_ms: EpochMs | None
    child_limit: int | None
    children: int
    stored_state: ScopeState
    effective: ScopeState
    created_ms: EpochMs
    ended_ms: EpochMs | None


class ScopesView(NamedTuple):
    """A page of the runs of a space, newest first, at most a listing's limit: `next_cursor` reads
    the next page (None on the last; `truncated` says the same as a boolean)."""

    scopes: tuple[ScopeView, ...]
    truncated: bool
    next_cursor: str | None


class Scope:
    __slots__ = (
        "id",
        "name",
        "parent_id",
        "deadline_ms",
        "child_limit",
        "stored_state",
        "created_ms",
        "ended_ms",
        "children",
        "depth",
        "live",  # not ended, nor under an ended scope (what `space_scopes_max` counts)
    )

    def __init__(
        self,
        scope_id: str,
        name: str | None,
        parent_id: str | None,
        deadline_ms: int | None,
        child_limit: int | None,
        created_ms: int,
        depth: int,
    ) -> None:
        self.id = scope_id
        self.name = name
        self.parent_id = parent_id
        self.deadline_ms = deadline_ms
        self.child_limit = child_limit
        self.stored_state: ScopeState = ACTIVE
        self.created_ms = created_ms
        self.ended_ms: int | None = None
        self.children: list[str] = []
        self.depth = depth
        self.live = True


class ScopeTree:
    """The scopes of one space, and how many of them are live (counted as records are applied)."""

    # `check_entities`: the space's cap on the entities it keeps (`caps.py`), not state.
    _DERIVED = ("check_entities",)
    __slots__ = ("_scopes", "_limits", "live", "ended_roots", "check_entities")

    def __init__(self, limits: Limits) -> None:
        self._scopes: dict[str, Scope] = {}
        self._limits = limits
        self.live = 0
        # The ended runs (root scopes) still kept: id -> when it ended (their removal: `runs.py`).
        self.ended_roots: dict[str, int] = {}
        self.check_entities: Callable[[int], None] = lambda adding: None

    def __len__(self) -> int:
        return len(self._scopes)

    def __contains__(self, scope_id: str) -> bool:
        return scope_id in self._scopes

    def get(self, scope_id: str) -> Scope:
        scope = self._scopes.get(scope_id)
        if scope is None:
            raise KernelError(NOT_FOUND, self.not_found(scope_id))
        return scope

    def find(self, scope_id: str) -> Scope | None:
        return self._scopes.get(scope_id)

    def not_found(self, scope_id: str) -> str:
        """What an unknown scope id answers: a removed run is not remembered, so the answer to an
        id of the shape this server draws names the retention that may have removed it (`runs.py`)."""
        retention_s = self._limits.ended_run_retention_s
        if not retention_s or not scope_id.startswith("sc_") or len(scope_id) > 64:
            return f"scope {quote(scope_id)} not found"
        return (
            f"scope {quote(scope_id)} not found (an ended run is removed {retention_s} s after its end: "
            "ended_run_retention_s)"
        )

    def all(self) -> Iterator[Scope]:
        return iter(self._scopes.values())

    # -- reading --------------------------------------------------------------------------------

    def effective(self, scope: Scope, now_ms: int) -> ScopeState:
        """ACTIVE only if this scope and every ancestor is active and before its deadline."""
        node: Scope | None = scope
        while node is not None:
            if node.stored_state != ACTIVE:
                return node.stored_state
            if node.deadline_ms is not None and now_ms >= node.deadline_ms:
                return EXPIRED
            node = self._scopes.get(node.parent_id) if node.parent_id else None
        return ACTIVE

    def require_active(self, scope_id: str, now_ms: int) -> Scope:
        """The scope, or NOT_FOUND / SCOPE_CANCELLED (the code that stops a worker cleanly)."""
        scope = self.get(scope_id)
        state = self.effective(scope, now_ms)
        if state != ACTIVE:
            raise KernelError(SCOPE_CANCELLED, f"scope {scope_id} is {state.lower()}")
        return scope

    def subtree(self, scope_id: str) -> list[str]:
        """The scope and all its descendants, parents before children."""
        order = [scope_id]
        for current in order:  # grows while iterating: a breadth-first walk
            order.extend(self._scopes[current].children)
        return order

    def view(self, scope: Scope, now_ms: int) -> ScopeView:
        effective = self.effective(scope, now_ms)
        assert scope.stored_state != ACTIVE or scope.ended_ms is None, "an active scope has no end time"
        return ScopeView(
            scope.id, scope.name, scope.parent_id, scope.deadline_ms, scope.child_limit, len(scope.children),
            scope.stored_state, effective, scope.created_ms, scope.ended_ms,
        )

    # -- deciding -------------------------------------------------------------------------------

    def decide_create(
        self,
        scope_id: str,
        name: str | None,
        parent_id: str | None,
        deadline_ms: int | None,
        child_limit: int | None,
        now_ms: int,
    ) -> Record:
        """The `scope.created` record for a new scope, or a refusal."""
        depth = 0
        if parent_id is not None:
            parent = self.require_active(parent_id, now_ms)
            if parent.child_limit is not None and len(parent.children) >= parent.child_limit:
                raise KernelError(
                    CONFLICT,
                    f"scope {parent_id} already has {len(parent.children)} children, "
                    f"its childLimit is {parent.child_limit}",
                )
            depth = parent.depth + 1
            if depth > self._limits.scope_depth_max:
                raise KernelError(
                    VALIDATION_FAILED,
                    f"scopes nest at most {self._limits.scope_depth_max} deep",
                )
        if self.live >= self._limits.space_scopes_max:
            raise full(f"space holds {self.live} live scopes", "space_scopes_max")
        self.check_entities(1)
        if scope_id in self._scopes:  # an id source collision: the caller draws another id
            raise KernelError(CONFLICT, f"scope id {scope_id} is taken")
        assert 0 <= depth <= self._limits.scope_depth_max and self.live < self._limits.space_scopes_max
        return {
            "type": SCOPE_CREATED,
            "id": scope_id,
            "name": name,
            "parent_id": parent_id,
            "deadline_ms": deadline_ms,
            "child_limit": child_limit,
            "at_ms": now_ms,
        }

    def decide_end(self, scope_id: str, state: str, now_ms: int) -> Record | None:
        """The `scope.ended` record that moves an active scope to `state`, or None if it is a repeat.

        Ending a scope the same way twice is harmless; ending it another way than it already ended
        is a CONFLICT (completing a cancelled scope says something false about it).
        """
        scope = self.get(scope_id)
        if scope.stored_state == state:
            return None
        if scope.stored_state != ACTIVE:
            raise KernelError(
                CONFLICT, f"scope {scope_id} is already {scope.stored_state.lower()}"
            )
        # Paired with `apply_ended`: a scope ends once, from ACTIVE, to one of its ends.
        assert state in SCOPE_END_REASONS, f"no end {state!r}"
        return {"type": SCOPE_ENDED, "id": scope_id, "state": state, "at_ms": now_ms}

    # -- images ---------------------------------------------------------------------------------

    def image(self) -> Iterator[Record]:
        """Records that rebuild this tree exactly through `apply_image`.

        Scopes come in creation order, so every parent comes before its children and each
        parent's list of children is rebuilt in the same order.
        """
        for scope in self._scopes.values():
            yield {
                "type": SCOPE_IMAGE,
                "id": scope.id,
                "name": scope.name,
                "parent_id": scope.parent_id,
                "deadline_ms": scope.deadline_ms,
                "child_limit": scope.child_limit,
                "state": scope.stored_state,
                "ended_ms": scope.ended_ms,
                "at_ms": scope.created_ms,
            }

    def apply_image(self, record: Record) -> Scope:
        scope = self.apply_created(record)
        scope.stored_state = record["state"]
        scope.ended_ms = record["ended_ms"]
        if scope.stored_state != ACTIVE and scope.live:
            scope.live = False
            self.live -= 1
        if scope.stored_state != ACTIVE and scope.parent_id is None:
            self.ended_roots[scope.id] = scope.ended_ms
        return scope

    # -- applying -------------------------------------------------------------------------------

    def apply_created(self, record: Record) -> Scope:
        parent_id = record["parent_id"]
        depth = 0
        if parent_id is not None:
            parent = self._scopes[parent_id]
            parent.children.append(record["id"])
            depth = parent.depth + 1
        scope = Scope(
            record["id"],
            record["name"],
            parent_id,
            record["deadline_ms"],
            record["child_limit"],
            record["at_ms"],
            depth,
        )
        # Live unless its parent has ended (only an image brings a child after its parent's end).
        scope.live = parent_id is None or self._scopes[parent_id].live
        self.live += scope.live
        self._scopes[scope.id] = scope
        return scope

    def apply_ended(self, record: Record) -> list[str]:
        """Record the end; returns the subtree it ends (parents first), none of which is live now."""
        scope = self._scopes[record["id"]]
        assert scope.stored_state == ACTIVE and record["state"] in SCOPE_END_REASONS, "a scope ends once"
        scope.stored_state = record["state"]
        scope.ended_ms = record["at_ms"]
        if scope.parent_id is None:
            self.ended_roots[scope.id] = scope.ended_ms
        subtree = self.subtree(scope.id)
        scopes = self._scopes
        for scope_id in subtree:
            node = scopes[scope_id]
            if node.live:
                node.live = False
                self.live -= 1
        return subtree

    def apply_removed(self, scope_ids: frozenset[str]) -> None:
        """Ended runs removed after their retention (`runs.py`): whole trees, all ended."""
        scopes = self._scopes
        for scope_id in scope_ids:
            scope = scopes.pop(scope_id)
            assert not scope.live and (scope.parent_id is None or scope.parent_id in scope_ids), "only ended runs, whole"
            self.ended_roots.pop(scope_id, None)


# -- commands ----------------------------------------------------------------------------------


@command
class CreateScope(Command):
    space: str = path("space")
    name: str | None = body("name", required=False, length_max="name_len_max")
    parent_id: str | None = body("parentId", required=False)
    deadline_ms: int | None = body("deadline", TIMESTAMP, required=False)
    child_limit: int | None = body("childLimit", INTEGER, required=False, minimum=0, maximum="child_limit_max")
    scope_id: str = drawn("sc_")

    def actor(self, state: State) -> ActorKey:
        # A child is created in its parent's turn, so childLimit counts exactly.
        return scope_actor(self.space, self.parent_id if self.parent_id is not None else self.scope_id)


@command(base=True)
class EndScope(Command):
    """Cancel or complete a scope and its subtree; repeating the same end is harmless."""

    end: ClassVar[str]
    space: str = path("space")
    scope_id: str = path("scope_id")
    by: str | None = caller()

    def actor(self, state: State) -> ActorKey:
        return scope_actor(self.space, self.scope_id)


@command
class CancelScope(EndScope):
    end: ClassVar[str] = CANCELLED


@command
class CompleteScope(EndScope):
    end: ClassVar[str] = COMPLETED


# -- transitions (of the space: a scope's end reaches every primitive living in its subtree) -----


def deadline_timer(space_id: str, scope_id: str, deadline_ms: int) -> Timer:
    return Timer(deadline_ms, scope_actor(space_id, scope_id), (DEADLINE_TIMER, scope_id), None)


def create(space: Space, command: CreateScope, now_ms: int) -> Outcome:
    scopes: ScopeTree = space.scopes
    scope_id, deadline_ms = command.scope_id, command.deadline_ms
    record = scopes.decide_create(scope_id, command.name, command.parent_id, deadline_ms, command.child_limit, now_ms)
    outcome = space.commit(Outcome(), record)
    if deadline_ms is not None:
        outcome.timers.append(deadline_timer(space.id, scope_id, deadline_ms))
    outcome.reply = scopes.view(scopes.get(scope_id), now_ms)
    return outcome


def end(space: Space, command: EndScope, now_ms: int) -> Outcome:
    """Cancel or complete a scope; repeating the same end is harmless."""
    scopes: ScopeTree = space.scopes
    record = scopes.decide_end(command.scope_id, command.end, now_ms)
    if record is not None and command.by is not None:
        record["by"] = command.by  # who ended it, for the event log
    outcome = Outcome() if record is None else _ended(space, record)
    outcome.reply = scopes.view(scopes.get(command.scope_id), now_ms)
    return outcome


def on_deadline(space: Space, scope_id: str, _: TimerMarker, now_ms: int) -> Outcome:
    """The supervisor's proposal: record EXPIRED if the deadline has passed on an active scope."""
    scope = space.scopes.get(scope_id)
    if scope.stored_state != ACTIVE or scope.deadline_ms is None or now_ms < scope.deadline_ms:
        return Outcome()
    record = space.scopes.decide_end(scope_id, EXPIRED, now_ms)
    assert record is not None, "an active scope is not yet expired"
    return _ended(space, record)


def _ended(space: Space, record: Record) -> Outcome:
    """Record a scope's end, with what each primitive does in the same turn (`scope_ending`)."""
    assert record["type"] == SCOPE_ENDED and record["state"] != ACTIVE
    then = space.scope_ending(space.scopes.subtree(record["id"]))
    outcome = space.commit(Outcome(), record)
    for follow in then:
        follow(outcome, record["at_ms"])
    return outcome


def _apply_ended(space: Space, record: Record) -> None:
    """`scope.ended`: the scope and its subtree end, and what lives there with them."""
    subtree = space.scopes.apply_ended(record)
    space.scope_ended(subtree, record["state"], record["at_ms"])


def _usage_of_end(record: Record) -> tuple[int, str]:
    state = record["state"]
    if state == EXPIRED:
        return EVENT, "scopes.expire"
    return OPERATION, "scopes.cancel" if state == CANCELLED else "scopes.complete"


def _deadlines(space: Space) -> Iterator[Timer]:
    for scope in space.scopes.all():
        if scope.stored_state == ACTIVE and scope.deadline_ms is not None:
            yield deadline_timer(space.id, scope.id, scope.deadline_ms)


def _make(space: Space) -> None:
    space.scopes = ScopeTree(space.limits)
    space.scopes.check_entities = space.check_entities


SCOPES = Primitive(
    "scopes",
    make=_make,
    state=("scopes",),
    commands={CreateScope: ("", create), CancelScope: ("", end), CompleteScope: ("", end)},
    records={
        SCOPE_CREATED: ("id", "name", "parent_id", "deadline_ms", "child_limit", "at_ms"),
        SCOPE_ENDED: ("id", "state", "at_ms", "by?"),
        SCOPE_IMAGE: ("id", "name", "parent_id", "deadline_ms", "child_limit", "state", "ended_ms", "at_ms"),
    },
    apply={
        SCOPE_CREATED: ("scopes", "apply_created"),
        SCOPE_ENDED: ("", _apply_ended),
        SCOPE_IMAGE: ("scopes", "apply_image"),
    },
    usage={SCOPE_CREATED: operation("scopes.create"), SCOPE_ENDED: _usage_of_end, SCOPE_IMAGE: NOT_COUNTED},
    timers={DEADLINE_TIMER: ("", on_deadline)},
    derive={
        SCOPE_CREATED: lambda space, r: ("scope.created", r["id"], "scope", r["id"], (r["parent_id"],)),
        # Who ended it (an API key's id, or "admin"); None when it expired.
        SCOPE_ENDED: lambda space, r: ("scope." + r["state"].lower(), r["id"], "scope", r["id"], {"state": r["state"], "by": r.get("by")}),
    },
    events={"scope.created": ("parentId",), "scope.cancelled": None, "scope.completed": None, "scope.expired": None},
    deadlines=_deadlines,
    image=lambda space: space.scopes.image(),
    is_empty=lambda space: not len(space.scopes),
    entities=lambda space: len(space.scopes),
    scopes_removed=lambda space, scope_ids: space.scopes.apply_removed(scope_ids),
)
