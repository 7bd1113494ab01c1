"""How a primitive declares itself: its commands, records, appliers, timers, events, usage, hooks and views.

A primitive (claims, once slots, pools, task groups...) is one module, or one module beside its
table's, that ends with one `Primitive` declaration. The kernel's tables are built from the
declarations once, at import (`primitives.py`): the dispatch table of commands, the record format's
fields, the appliers, the timer handlers, the events each record makes, the usage classification,
and what a space does at a start, in an image, at a scope's end. Nothing else names a primitive: a
new one is its module(s) plus a line in `primitives.PRIMITIVES`, its routes and its SDK methods.

A command is a frozen dataclass (`@command`). Its fields say where each value comes from (the
JSON body, the path, or a draw from the kernel's seeded source) and which limits it keeps
(`fields.py`); its `check` holds whatever spans more than one field; its `actor` names the key
whose actor serializes it (`actor_keys.py`). Reading the state to find an actor (a token's claim,
a message's queue) happens in the caller's task; the turn checks again, since the state may change
before the turn runs. A command is data, so it can be logged, compared, replayed in a test, or sent
to another node later.

Names that must be declared somewhere are made here, so that one declared nowhere is found at
import rather than by the first request that needs it: `record_type("claim.acquired")` (the
journal's spelling of a record type, on disk for good) and `timer_kind("claim-lease")`.

Pure: no IO.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Iterable, Mapping, TypeVar, cast, dataclass_transform, overload

from .fields import INTEGER, TEXT, body
from .limits import Limits
from .outcome import ActorKey, Outcome, TimerMarker, TimerTag, State
from .shapes import Record

__all__ = [
    "Command", "command", "lease_field", "reason_field", "FireTimer", "Primitive", "On", "Transition",
    "record_type", "timer_kind", "RECORD_TYPES_MADE", "TIMER_KINDS_MADE", "COMMANDS_MADE", "BASES_MADE", "operation", "free", "event",
    "NOT_COUNTED", "OPERATION", "FREE_OPERATION", "EVENT",
]


# Every command class made with `@command` (each must be declared by one primitive), and the bases
# of commands (declared by none: they are never sent).
COMMANDS_MADE: list[type] = []
BASES_MADE: list[type] = []

_Class = TypeVar("_Class", bound="type[Command]")


class Command:
    """Base of every command. Subclasses are declared with `@command`."""

    __slots__ = ()
    # A base of other commands (it is never sent itself, so no primitive declares it).
    base: ClassVar[bool] = False

    def actor(self, state: State) -> ActorKey:
        raise NotImplementedError

    def check(self, limits: Limits) -> None:
        """Checks that involve more than one field (each field's own limits are in `fields.py`)."""

    def wait_key(self) -> Any:
        """What a parked call of this command waits for, when two parked calls with equal keys
        find the same answer in the same state (a free claim, a deliverable message): after one
        of them ran again and still found nothing, the others need not run (`Partition`). None:
        each runs again."""
        return None


@overload
def command(cls: _Class, *, base: bool = False) -> _Class: ...
@overload
def command(cls: None = None, *, base: bool = False) -> Callable[[_Class], _Class]: ...


# `dataclass_transform` tells the type checker what `make` does: each command is a frozen,
# keyword-only dataclass, so a command built with a field it does not have is found there.
@dataclass_transform(frozen_default=True, kw_only_default=True)
def command(cls: _Class | None = None, *, base: bool = False) -> _Class | Callable[[_Class], _Class]:
    """Make `cls` a command: a frozen, slotted, keyword-only dataclass, named in `COMMANDS_MADE`
    so that one no primitive declares fails at import. `base=True` for a class that only others
    derive from (it is never sent, so no primitive declares it)."""

    def make(cls: _Class) -> _Class:
        made = cast(_Class, dataclass(frozen=True, slots=True, kw_only=True)(cls))  # slots: a new class, of the same kind
        made.base = base  # its own value, not inherited: a subclass of a base is a command again
        made_ones = BASES_MADE if base else COMMANDS_MADE
        assert all(other.__name__ != made.__name__ for other in (*COMMANDS_MADE, *BASES_MADE)), f"command {made.__name__} is named twice"
        made_ones.append(made)
        return made

    return make if cls is None else make(cls)


def lease_field(required: bool = False, default: str | None = None) -> Any:
    """`leaseSeconds`, bounded by the lease limits."""
    return body("leaseSeconds", INTEGER, required=required, minimum="lease_s_min", maximum="lease_s_max", default=default)


def reason_field(wire: str) -> Any:
    """A caller's free text saying why (an error, a reason), empty allowed."""
    return body(wire, TEXT, required=False, length_min=0, length_max="reason_len_max")


@command
class FireTimer(Command):
    """The supervisor's proposal that a timer is due; the turn checks it still is (each kind of
    timer is declared by its primitive with what it proposes)."""

    on: ActorKey
    tag: TimerTag
    marker: TimerMarker

    def actor(self, state: State) -> ActorKey:
        return self.on


# -- names declared once -----------------------------------------------------------------------

RECORD_TYPES_MADE: set[str] = set()
TIMER_KINDS_MADE: set[str] = set()


def record_type(name: str) -> str:
    """A record type as the journal spells it (for good: data directories hold it)."""
    assert name not in RECORD_TYPES_MADE, f"record type {name!r} is named twice"
    RECORD_TYPES_MADE.add(name)
    return name


def timer_kind(name: str) -> str:
    """A kind of timer: the first element of its tag, which the space looks up when it fires."""
    assert name not in TIMER_KINDS_MADE, f"timer kind {name!r} is named twice"
    TIMER_KINDS_MADE.add(name)
    return name


# -- usage: how each record type is counted (`usage.py`) ----------------------------------------

OPERATION, FREE_OPERATION, EVENT = 0, 1, 2
# Not counted at all: images, stored answers, what belongs to another record's operation.
NOT_COUNTED = None


def operation(name: str) -> tuple[int, str]:
    """An accepted change a caller asked for."""
    return (OPERATION, name)


def free(name: str) -> tuple[int, str]:
    """A caller's change that is not billed (renewals)."""
    return (FREE_OPERATION, name)


def event(name: str) -> tuple[int, str]:
    """What the server does by itself (an expiry, a backoff ending)."""
    return (EVENT, name)


# -- the declaration ---------------------------------------------------------------------------

# A function of one attribute of a space (or of the kernel's state, for a kernel primitive):
# (attribute name, function), the attribute "" being the space (the state) itself. An applier may
# name a method of that object instead ("apply_created"), looked up when the space is made.
On = tuple[str, Any]
# A transition: (KernelState, command, now_ms) -> Outcome.
Transition = Callable[[Any, Any, int], Outcome]


@dataclass(frozen=True)
class Primitive:
    """Everything the kernel needs to know of one primitive, in one place.

    Functions of "the space" take a `SpaceState` (or, for a `kernel` primitive, the `KernelState`);
    `On` entries name the attribute whose object the function is bound to, so the hot paths (a
    command's transition, a record's applier) are one call each.
    """

    name: str
    # Builds its attributes on a new space, in declaration order (so it may use those made before).
    make: Callable[[Any], None] | None = None
    # The attributes it makes: those holding state (compared, imaged) and those holding none (the
    # commands over the tables, hooks), which a comparison of two states leaves out.
    state: tuple[str, ...] = ()
    parts: tuple[str, ...] = ()
    # Command class -> its transition: `On` (attribute of the command's space, method(part,
    # command, now_ms)) or a full `Transition`.
    commands: Mapping[type, On | Transition] = field(default_factory=dict)
    # Record type -> its fields, snake case, units last; "name?" is optional (`records.py`).
    records: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    # Record type -> what applies it, live and in replay: `On` (attribute, function(that, record)).
    apply: Mapping[str, On] = field(default_factory=dict)
    # Record type -> how usage counts it: `operation(...)`, `free(...)`, `event(...)`, a function
    # of the record that says which, or `NOT_COUNTED`. Every record type says.
    usage: Mapping[str, Any] = field(default_factory=dict)
    # Timer kind -> what it proposes when due: `On` (attribute, handler(that, ident, marker, now_ms)).
    timers: Mapping[str, On] = field(default_factory=dict)
    # Record type -> the events it makes, seen before it applies: derive(space, record) -> one
    # change (a tuple), a list of them, or None (`events.py`). Several primitives may derive from
    # one record type (a scope's end: its own event, then its tasks'): in declaration order.
    derive: Mapping[str, Callable[[Any, Record], Any]] = field(default_factory=dict)
    # Record type -> what follows from it once applied, as events: after(space, record) -> list.
    after: Mapping[str, Callable[[Any, Record], Any]] = field(default_factory=dict)
    # Event type -> the names of its payload when the log keeps it as a tuple (None: a dict).
    events: Mapping[str, tuple[str, ...] | None] = field(default_factory=dict)
    # The leases it holds (`leases.py`), as the lease table sees them: space -> LeaseKind.
    leases: Callable[[Any], Any] | None = None
    # What a start decides besides the leases' rule: (space, now_ms, grace_ms) -> Outcome.
    restart: Callable[[Any, int, int], Outcome] | None = None
    # Every timer its state needs now (after a recovery the kernel arms these): space -> timers.
    deadlines: Callable[[Any], Iterable[Any]] | None = None
    # Records that rebuild its state exactly (applied in declaration order), and whether it
    # holds nothing; the entities and the bytes of caller values it keeps (the space's caps).
    image: Callable[[Any], Iterable[Record]] | None = None
    is_empty: Callable[[Any], bool] | None = None
    entities: Callable[[Any], int] | None = None
    values_bytes: Callable[[Any], int] | None = None
    # A scope's end: `scope_ended(space, subtree, state, at_ms)` is applied with its record (live
    # and in replay); `scope_ending(space, subtree)` runs in the turn that decides it, before the
    # record applies, and returns what to do once it has (`(outcome, at_ms) -> None`) or None.
    scope_ended: Callable[[Any, list[str], str, int], None] | None = None
    scope_ending: Callable[[Any, list[str]], Callable[[Outcome, int], None] | None] | None = None
    # An ended run's removal after its retention (`runs.py`): `scopes_removed(space, scope_ids)`
    # drops what it keeps of these scopes, all ended (applied with the `run.removed` record, live and
    # in replay); `scopes_kept(space, scope_ids)` names those of them that must stay for now
    # (something live outside them still refers to what they hold).
    scopes_removed: Callable[[Any, frozenset[str]], None] | None = None
    scopes_kept: Callable[[Any, frozenset[str]], set[str]] | None = None
    # After records of a turn are applied: (space, outcome, records) -> None (capacity given back),
    # and the record types it reacts to: it is called only after a turn that applied one of these
    # (most turns apply none, and then no hook is called). Given together, or neither.
    committed: Callable[[Any, Outcome, tuple[Record, ...]], None] | None = None
    committed_on: frozenset[str] = frozenset()
    # Its read views, by name: view(space, now_ms, ...) -> what a reader is shown.
    views: Mapping[str, Callable[..., Any]] = field(default_factory=dict)
    # The kernel's own (not of a space): its attributes and functions are the `KernelState`'s.
    kernel: bool = False
