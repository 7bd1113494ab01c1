"""Every primitive, in order, and the kernel's tables built from their declarations once, at import.

`PRIMITIVES` is the one list: each entry is a primitive's `Primitive` declaration (`primitive.py`),
made in its own module. Their order is the order a space makes them (one may use what those
before it made) and the order a space's image lists their records (one is applied after those
before it: the stored answers first, the scopes before what lives in them, the tasks before the
work limits that count them, the event log and the usage counters last).

`build` loops over the declarations into flat dicts that the hot paths read with one lookup (a
command's transition, a record's applier and usage class, a timer's handler, a record's events),
and refuses, by raising `DeclarationError` at import, anything declared nowhere or twice: a record
type named (`primitive.record_type`) but given no fields, applier or usage class by anyone, or
given them by two; a command class that no primitive maps to a transition; a timer kind named
but handled by nobody. So an omission stops the server from starting instead of failing the first
request that meets it, and a test builds bad declarations to see each refused.

Pure: no IO.
"""

from __future__ import annotations

from dataclasses import dataclass
from operator import attrgetter
from typing import Any, Callable, Iterable, TypeVar

from . import (
    admission, barriers, boot, budgets, claiming, dead_letters, deliveries, events, group_commands, idempotency, keys,
    mailboxes, once, pool_commands, quotas, runs, scopes, task_commands, timers, usage, work, work_limits,
)
from .primitive import COMMANDS_MADE, RECORD_TYPES_MADE, TIMER_KINDS_MADE, FireTimer, On, Primitive, Transition
from .events import Change
from .outcome import Outcome
from .outcome import Space
from .shapes import Record

_Named = TypeVar("_Named")  # what is declared: a command class, a record type, a timer kind

__all__ = ["PRIMITIVES", "Tables", "TABLES", "DeclarationError", "build", "commands_of", "named", "compiled", "bind"]

PRIMITIVES: tuple[Primitive, ...] = (
    idempotency.IDEMPOTENCY,
    scopes.SCOPES,
    claiming.CLAIMS,
    mailboxes.MAILBOXES,
    task_commands.TASKS,
    work.MESSAGES,
    deliveries.DELIVERIES,
    dead_letters.DEAD_LETTERS,
    once.ONCE,
    runs.RUNS,
    pool_commands.POOLS,
    quotas.QUOTAS,
    budgets.BUDGETS,
    work_limits.WORK_LIMITS,
    admission.ADMISSION,
    barriers.BARRIERS,
    timers.TIMERS,
    group_commands.GROUPS,
    events.EVENTS,
    usage.USAGE,
    # The kernel's own: not of any space.
    boot.BOOTS,
    keys.KEYS,
)


class DeclarationError(Exception):
    """A declaration that leaves something declared nowhere, or declared twice."""


@dataclass(frozen=True)
class Tables:
    """What the kernel reads on its hot paths, each a flat dict, built from the declarations."""

    transitions: dict[type, Transition]  # command class -> transition
    fields: dict[str, tuple[str, ...]]  # record type -> its fields ("name?" optional)
    space_apply: dict[str, On]  # record type of a space -> (attribute, applier)
    kernel_apply: dict[str, On]  # record type of the kernel's own -> (attribute of the state, applier)
    usage: dict[str, Any]  # record type -> its usage class (`primitive.operation`...), counted ones only
    classified: frozenset[str]  # every record type, counted or not
    timers: dict[str, tuple[Callable[[Any], Any], Callable[..., Outcome]]]  # kind -> (attribute getter, handler)
    derive: dict[str, Callable[[Any, Record], Any]]  # record type -> its events, before it applies
    after: dict[str, Callable[[Any, Record], Any]]  # record type -> events of what follows from it
    committed_on: frozenset[str]  # record types some primitive's hook after commits reacts to
    payload_names: dict[str, tuple[str, ...]]  # event type -> names of its tuple payload
    event_types: tuple[str, ...]  # every event type, sorted
    space: tuple[Primitive, ...]  # the primitives of a space, in order
    kernel: tuple[Primitive, ...]  # the kernel's own


def _getter(attribute: str) -> Callable[[Any], Any]:
    return (lambda that: that) if not attribute else attrgetter(attribute)


def bind(owner: Any, on: On) -> Callable[..., Any]:
    """The applier `on` names, bound to its object in `owner` (a space, or the kernel's state):
    one call a record. A method named by a string is looked up on that object now, so a class
    changed before the space is made (a test injecting a fault) is what runs."""
    attribute, function = on
    that = attrgetter(attribute)(owner) if attribute else owner
    bound: Callable[..., Any] = getattr(that, function) if isinstance(function, str) else function.__get__(that)
    return bound


def compiled(on: On | Transition, kernel: bool = False) -> Transition:
    """A command's transition as the kernel calls it: (state, command, now_ms) -> Outcome. An `On`
    becomes one function that looks the part up on the command's space (or on the state) and calls
    the method: compiled, so the hot path pays no lookup by name."""
    if not isinstance(on, tuple):
        return on
    attribute, method = on
    assert not attribute or attribute.isidentifier(), f"no attribute {attribute!r}"
    that = "state" if kernel else "state.space(command.space)"
    if attribute:
        that += "." + attribute
    namespace = {"method": method}
    exec(f"def transition(state, command, now_ms):\n    return method({that}, command, now_ms)", namespace)  # noqa: S102
    transition: Transition = namespace["transition"]
    transition.__qualname__ = f"{getattr(method, '__qualname__', method)} (on {attribute or 'the space'})"
    return transition


def _one(tables: dict[str, Any], kind: str, value: Any, what: str, owner: str, owners: dict[str, str]) -> None:
    if kind in tables:
        raise DeclarationError(f"{what} {kind!r} is declared by {owners[kind]} and by {owner}")
    tables[kind] = value
    owners[kind] = owner


def _chain(functions: list[Callable[[Any, Record], Any]]) -> Callable[[Any, Record], Any]:
    """One function for several primitives' events from one record type, in declaration order."""
    if len(functions) == 1:
        return functions[0]

    def chained(space: Space, record: Record) -> list[Change]:
        made: list[Change] = []
        for function in functions:
            found = function(space, record)
            if found:
                made.extend(found if isinstance(found, list) else [found])
        return made

    return chained


def build(
    primitives: Iterable[Primitive],
    commands: Iterable[type] | None = None,
    record_types: Iterable[str] | None = None,
    timer_kinds: Iterable[str] | None = None,
) -> Tables:
    """The tables of `primitives`, checked: every command class in `commands`, record type in
    `record_types` and timer kind in `timer_kinds` is declared, exactly once (`DeclarationError`)."""
    primitives = tuple(primitives)
    names = [primitive.name for primitive in primitives]
    if len(set(names)) != len(names):
        raise DeclarationError(f"a primitive is declared twice: {sorted(n for n in names if names.count(n) > 1)}")
    transitions: dict[type, Transition] = {}
    fields: dict[str, tuple[str, ...]] = {}
    space_apply: dict[str, On] = {}
    kernel_apply: dict[str, On] = {}
    classes: dict[str, Any] = {}
    handlers: dict[str, tuple[Callable[[Any], Any], Callable[..., Any]]] = {}
    derive: dict[str, list[Callable[[Any, Record], Any]]] = {}
    after: dict[str, list[Callable[[Any, Record], Any]]] = {}
    payload_names: dict[str, tuple[str, ...]] = {}
    event_types: set[str] = set()
    owners: dict[Any, str] = {}
    committed_on: set[str] = set()
    for primitive in primitives:
        owner = f"{primitive.name!r}"
        for cls, on in primitive.commands.items():
            if cls in transitions:
                raise DeclarationError(f"command {cls.__name__} is declared by {owners[cls]} and by {owner}")
            transitions[cls] = compiled(on, primitive.kernel)
            owners[cls] = owner
        if set(primitive.records) != set(primitive.apply) or set(primitive.records) != set(primitive.usage):
            loose = set(primitive.records) ^ set(primitive.apply) | set(primitive.records) ^ set(primitive.usage)
            raise DeclarationError(f"{owner} gives record type(s) {sorted(loose)} fields, an applier and a usage class unevenly")
        for kind, spec in primitive.records.items():
            _one(fields, kind, spec, "record type", owner, owners)
            _one(kernel_apply if primitive.kernel else space_apply, kind, primitive.apply[kind], "applier of", owner, owners)
            classes[kind] = primitive.usage[kind]
        for kind, on in primitive.timers.items():
            _one(handlers, kind, (_getter(on[0]), on[1]), "timer kind", owner, owners)
        for kind, function in primitive.derive.items():
            derive.setdefault(kind, []).append(function)
        for kind, function in primitive.after.items():
            after.setdefault(kind, []).append(function)
        if (primitive.committed is None) != (not primitive.committed_on):
            raise DeclarationError(f"{owner} gives a hook after commits without the record types it reacts to, or those without the hook")
        committed_on |= primitive.committed_on
        for kind, payload in primitive.events.items():
            if kind in event_types:
                raise DeclarationError(f"event type {kind!r} is declared twice")
            event_types.add(kind)
            if payload is not None:
                payload_names[kind] = payload
    for kind in (*derive, *after):
        if kind not in fields:
            raise DeclarationError(f"events are derived from record type {kind!r}, which no primitive declares")
    for kind in sorted(committed_on - set(fields)):
        raise DeclarationError(f"a hook after commits reacts to record type {kind!r}, which no primitive declares")
    _check_declared("command", set(transitions), commands, lambda cls: cls.__name__)
    _check_declared("record type", set(fields), record_types, str)
    _check_declared("timer kind", set(handlers), timer_kinds, str)
    return Tables(
        transitions=transitions, fields=fields, space_apply=space_apply, kernel_apply=kernel_apply,
        usage={kind: value for kind, value in classes.items() if value is not None}, classified=frozenset(classes),
        timers=handlers, derive={kind: _chain(found) for kind, found in derive.items()},
        after={kind: _chain(found) for kind, found in after.items()}, committed_on=frozenset(committed_on),
        payload_names=payload_names,
        event_types=tuple(sorted(event_types)), space=tuple(p for p in primitives if not p.kernel),
        kernel=tuple(p for p in primitives if p.kernel),
    )


def _check_declared(what: str, declared: set[_Named], named: Iterable[_Named] | None, name: Callable[[_Named], str]) -> None:
    if named is None:
        return
    nowhere = sorted(name(item) for item in set(named) - declared)
    if nowhere:
        raise DeclarationError(f"{what}(s) declared by no primitive: {', '.join(nowhere)}")


# The kernel's own command: a timer fell due (`space.SpaceState.fire`).
_CORE = Primitive(
    "timers due",
    commands={FireTimer: lambda state, command, now_ms: state.space(command.on[1]).fire(command.tag, command.marker, now_ms)},
)

TABLES = build((*PRIMITIVES, _CORE), COMMANDS_MADE, RECORD_TYPES_MADE, TIMER_KINDS_MADE)
# The tables a few modules keep for their readers, filled from the declarations.
events.name_payloads(TABLES.payload_names, TABLES.event_types)
usage.classify(TABLES.usage, TABLES.classified)


def commands_of(primitives: Iterable[Primitive] = PRIMITIVES) -> dict[str, type]:
    """Every command class the primitives declare, by name (`commands.py` gathers them)."""
    return {cls.__name__: cls for primitive in (*primitives, _CORE) for cls in primitive.commands}


def named(*names: str) -> tuple[Primitive, ...]:
    """The declarations of these primitives, in the order given."""
    by_name = {primitive.name: primitive for primitive in PRIMITIVES}
    return tuple(by_name[name] for name in names)
