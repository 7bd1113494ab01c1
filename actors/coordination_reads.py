"""Reads of barriers, timers, task groups and the event log, straight from the state (no turn).

Like `reads.py`: a read may see a change whose record is not yet durable. The event log is the
exception a reader acts on (a cursor it resumes from), so the routes that serve it wait until
everything appended so far is durable before they answer (`server/routes/coordination.py`).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Literal, Union, cast

from . import events as event_log
from . import paging
from .barriers import BarrierView
from .groups import GroupView
from .outcome import Space
from .timers import TimerView
from .shapes import EpochMs
from .kernel_reads import KernelReads
from .task_commands import WaitTask

__all__ = [
    "barrier", "timer", "group", "events_page", "run", "waits", "RunView", "RunWorker", "RunCounts", "RunWaiter",
    "PoolWaitView", "AllowanceWaitView", "ParkedView", "ParkedQueueView", "ParkedTaskView", "ParkedTimersView", "ParkedKeyView",
    "WaitView", "receives_parked",
    "WaitsView", "RunBarriersView", "RunTimersView", "RunGroupsView",
]


def barrier(kernel: KernelReads, space: str, barrier_id: str) -> BarrierView:
    part = kernel.space_view(space).coordination
    return part.barriers.view(part.barriers.get(barrier_id), kernel.clock.now_ms())


def timer(kernel: KernelReads, space: str, timer_id: str) -> TimerView:
    part = kernel.space_view(space).coordination
    return part.timers.view(part.timers.get(timer_id))


def group(kernel: KernelReads, space: str, group_id: str) -> GroupView:
    part = kernel.space_view(space).coordination
    return part.groups.view(part.groups.get(group_id), kernel.clock.now_ms())


def events_page(
    kernel: KernelReads, space: str, after: int | None, limit: int, types: frozenset[str] | None = None,
    aggregate: tuple[str, str] | None = None, scope_id: str | None = None,
) -> event_log.EventPageView:
    return event_log.page(kernel.space_view(space), after, limit, types, aggregate, scope_id)


def events_latest(kernel: KernelReads, space: str, count: int) -> event_log.EventPageView:
    """The newest `count` events kept (oldest of them first), and the cursor after the newest:
    where a reader that wants only what happens from now on starts (`count` 0: the cursor alone)."""
    state = kernel.space_view(space)
    log = state.events
    if not count:
        return event_log.EventPageView((), str(log.seq))
    return event_log.page(state, max(log.oldest_seq - 1, log.seq - count), count, None, None, None)


# -- diagnostics -----------------------------------------------------------------------------------
# Observations for people and tooling, never a source of authority. Lists are cut at this many.
OPS_LIST_MAX = 1000
# The holders named for one parked entry (its `calls` counts them all), oldest first.
PARKED_HOLDERS_MAX = 10


# -- the operators' views ------------------------------------------------------------------------
# Observations, not frozen answers of a turn: frozen slotted dataclasses (not on a hot path). A
# parked entry names where the calls wait (a queue: its mailbox and run; a scope's timers: the run;
# a claim or a once key: its run and key), each kind its own view as each writes its own fields;
# then, where their commands name them, the holders the calls are for, oldest first (None, and left
# out of the answer, where none is named).


@dataclasses.dataclass(frozen=True, slots=True)
class ParkedView:
    """Calls parked on something (`on`): the event log's watches, or a kind that names nothing more."""

    on: str
    calls: int
    holders: tuple[str, ...] | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class ParkedQueueView:
    """Receives held on a queue: its mailbox and run."""

    on: str
    calls: int
    mailbox_id: str
    scope_id: str
    holders: tuple[str, ...] | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class ParkedTaskView:
    """Reads waiting for a task's end (`GET /tasks/{id}?waitMs=`): its run and id. They park on
    the task's queue, as its receives do, but wait for no delivery: they are not receivers."""

    on: str
    calls: int
    scope_id: str
    task_id: str


@dataclasses.dataclass(frozen=True, slots=True)
class ParkedTimersView:
    """Polls of a run's timers."""

    on: str
    calls: int
    scope_id: str
    holders: tuple[str, ...] | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class ParkedKeyView:
    """Acquires waiting for a held claim, or reads waiting for a once key's result: its run and key."""

    on: str
    calls: int
    scope_id: str
    key: str
    holders: tuple[str, ...] | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class RunWaiter:
    """A waiter in a pool's line: `permit` (the pool's name) and `units` are what the 0.3.0
    client's `status()` shows; `since_ms` when it started waiting."""

    permit: str
    permit_id: str
    units: int
    scope_id: str
    holder: str
    waiter_id: str
    state: Literal["WAITING", "SIGNALED"]
    since_ms: EpochMs


@dataclasses.dataclass(frozen=True, slots=True)
class PoolWaitView:
    """A pool's waiter among the space's waits (`on` is "pool", one call)."""

    on: str
    calls: int
    permit: str
    permit_id: str
    units: int
    scope_id: str
    holder: str
    waiter_id: str
    state: Literal["WAITING", "SIGNALED"]
    since_ms: EpochMs


@dataclasses.dataclass(frozen=True, slots=True)
class AllowanceWaitView:
    """A waiter in an allowance's queue for units, until `expires_ms` (its TTL)."""

    on: str
    calls: int
    scope_id: str
    allowance: str
    allowance_id: str
    units: int
    holder: str
    waiter_id: str
    expires_ms: EpochMs
    since_ms: EpochMs


ParkedAny = Union[ParkedView, ParkedQueueView, ParkedTaskView, ParkedTimersView, ParkedKeyView]
WaitView = Union[ParkedAny, PoolWaitView, AllowanceWaitView]


@dataclasses.dataclass(frozen=True, slots=True)
class WaitsView:
    """What waits in a space: parked calls, then pools' and allowances' waiters; `truncated` when cut."""

    waits: tuple[WaitView, ...]
    truncated: bool


@dataclasses.dataclass(frozen=True, slots=True)
class RunWorker:
    """A holder working in a run: what it holds under a lease (`keys`), its deliveries, and the
    earliest end of its leases there."""

    holder: str
    keys: tuple[str, ...]
    deliveries: tuple[str, ...]
    earliest_lease_expiry_ms: EpochMs


@dataclasses.dataclass(frozen=True, slots=True)
class RunCounts:
    """How many of each thing in a run's subtree, by state (states in order of their names)."""

    scopes: dict[str, int]
    tasks: dict[str, int]
    messages: dict[str, int]
    barriers: dict[str, int]
    timers: dict[str, int]
    groups: dict[str, int]


@dataclasses.dataclass(frozen=True, slots=True)
class RunView:
    """A run's subtree across primitives: workers (earliest lease end first), pools' waiters,
    parked calls, counts."""

    scope_id: str
    effective: str
    workers: tuple[RunWorker, ...]
    waiting: tuple[RunWaiter, ...]
    parked: tuple[ParkedAny, ...]
    counts: RunCounts


def run(kernel: KernelReads, space: str, scope_id: str) -> RunView:
    """A run's subtree across primitives: who works in it (claim and delivery holders with their
    keys and earliest lease end), what waits there, and how many things are in each state."""
    state = kernel.space_view(space)
    scope = state.scopes.get(scope_id)
    now_ms = kernel.clock.now_ms()
    subtree = state.scopes.subtree(scope.id)
    inside = frozenset(subtree)
    workers: dict[str, dict[str, Any]] = {}

    def worker(holder: str, expires_ms: int) -> dict[str, Any]:
        entry = workers.setdefault(holder, {"holder": holder, "keys": [], "deliveries": [], "expires_ms": expires_ms})
        entry["expires_ms"] = min(entry["expires_ms"], expires_ms)
        return entry

    # `keys`: everything a holder holds under a lease here, one entry each (the 0.3.0 client counts
    # them): claim keys, once keys, the task keys of its deliveries (a plain message's id), and the
    # pool names of grants held apart from a delivery (a delivery's own grants go with it).
    for scope_in in subtree:
        for claim in state.claims.in_scope(scope_in):
            if claim.held_at(now_ms) and claim.holder is not None:
                worker(claim.holder, claim.expires_ms)["keys"].append(claim.key)
    for slot in state.once.all():
        if slot.scope_id in inside and slot.held_at(now_ms) and slot.holder is not None:
            worker(slot.holder, slot.expires_ms)["keys"].append(slot.key)
    pools = state.capacity.pools
    for grant in pools.grants():
        if grant.scope_id in inside and grant.message_id is None and now_ms < grant.expires_ms and grant.holder is not None:
            worker(grant.holder, grant.expires_ms)["keys"].append(pools.get(grant.pool_id).name)
    messages: dict[str, int] = {}
    for message in state.messages.live():
        if message.scope_id in inside:
            messages[message.state] = messages.get(message.state, 0) + 1
            if message.state == "LEASED" and message.holder is not None:
                entry = worker(message.holder, message.expires_ms)
                entry["deliveries"].append(message.id)
                task = None if message.task_id is None else state.tasks.find(message.task_id)
                entry["keys"].append(message.id if task is None else task.key)
    part = state.coordination
    tasks = _count(task.state for task in state.tasks.all() if task.scope_id in inside)
    rows = sorted(workers.values(), key=lambda row: (row["expires_ms"], row["holder"]))[:OPS_LIST_MAX]
    parked = [entry for entry in _parked(kernel, space) if getattr(entry, "scope_id", None) in inside]
    counts = RunCounts(
        _count(state.scopes.effective(state.scopes.get(s), now_ms) for s in subtree), tasks, messages,
        _count(part.barriers.state_of(b, now_ms) for b in part.barriers.all() if b.scope_id in inside),
        _count(t.state for t in part.timers.all() if t.scope_id in inside),
        _count(g.state for g in part.groups.all() if g.scope_id in inside),
    )
    return RunView(
        scope.id, state.scopes.effective(scope, now_ms),
        tuple(RunWorker(row["holder"], tuple(row["keys"]), tuple(row["deliveries"]), row["expires_ms"]) for row in rows),
        tuple(_pool_waiters(state, inside, now_ms)[:OPS_LIST_MAX]), tuple(parked[:OPS_LIST_MAX]), counts,
    )


def _pool_waiters(state: Space, inside: frozenset[str] | None, now_ms: int) -> list[RunWaiter]:
    """Who waits in a pool's line in the subtree (None: anywhere in the space), oldest first. (A
    pool table without a line of waiters has nobody waiting.)"""
    pools = state.capacity.pools
    waiting = [
        RunWaiter(
            pools.get(waiter.pool_id).name, waiter.pool_id, waiter.units, waiter.scope_id, waiter.holder, waiter.id,
            cast(Literal["WAITING", "SIGNALED"], waiter.state), waiter.created_ms,
        )
        for waiter in getattr(pools, "waiters", tuple)()
        if (inside is None or waiter.scope_id in inside) and waiter.state in ("WAITING", "SIGNALED") and now_ms < waiter.due_ms
    ]
    waiting.sort(key=lambda entry: (entry.since_ms, entry.waiter_id))
    return waiting


def waits(kernel: KernelReads, space: str) -> WaitsView:
    """What waits in this space now: the calls parked (held receives, reads waiting for a task's
    end, timer polls, watches), by where, then the waiters in the pools' lines and the allowances'
    queues, oldest first (those are records, not parked calls: a waiter waits between its polls
    too)."""
    waiting: list[WaitView] = list(_parked(kernel, space))
    waiting.sort(key=lambda entry: (entry.on, getattr(entry, "mailbox_id", None) or "", getattr(entry, "scope_id", None) or ""))
    state = kernel.space_view(space)
    now_ms = kernel.clock.now_ms()
    for entry in _pool_waiters(state, None, now_ms):
        waiting.append(PoolWaitView("pool", 1, *dataclasses.astuple(entry)))
    waiting.extend(_allowance_waiters(state, now_ms))
    return WaitsView(tuple(waiting[:OPS_LIST_MAX]), len(waiting) > OPS_LIST_MAX)


def _allowance_waiters(state: Space, now_ms: int) -> list[AllowanceWaitView]:
    """Who waits in an allowance's queue for units, oldest first, until its TTL runs out."""
    allowances = state.capacity.allowances
    found = [
        AllowanceWaitView(
            "allowance", 1, waiter.scope_id, allowances.get(waiter.allowance_id).name, waiter.allowance_id, waiter.units,
            waiter.holder, waiter.id, waiter.expires_ms, waiter.created_ms,
        )
        for waiter in allowances.waiters()
        if waiter.state == "WAITING" and now_ms < waiter.expires_ms
    ]
    found.sort(key=lambda entry: (entry.since_ms, entry.waiter_id))
    return found


def _parked(kernel: KernelReads, space: str) -> list[ParkedAny]:
    """The kernel's parked calls in this space: on a claim (acquires waiting for it: its run and
    key), a once key (reads waiting for its result), a queue (receives; the reads waiting there for
    a task's end are their own entry, by task), a scope's timers (polls), or the event log
    (watches); with the holders the calls are for, oldest first, where their commands name one."""
    found: list[ParkedAny] = []
    for key, calls in kernel.parked():
        if len(key) < 2 or key[1] != space:
            continue
        holders = tuple(kernel.parked_holders(key, PARKED_HOLDERS_MAX)) or None  # (none named: left out)
        on = key[0]
        entry: ParkedAny
        if on == "queue":
            reads = _task_reads(kernel, key)
            for task_id, count in reads.items():
                found.append(ParkedTaskView("task", count, key[3], task_id))
            receives = calls - sum(reads.values())
            if not receives:
                continue
            entry = ParkedQueueView(on, receives, key[2], key[3], holders)
        elif on == "timers":
            entry = ParkedTimersView(on, calls, key[2], holders)
        elif on in ("claim", "once"):  # acquires waiting for a held claim; reads waiting for a once key's result
            entry = ParkedKeyView(on, calls, key[2], key[3], holders)
        else:
            entry = ParkedView(on, calls, holders)
        found.append(entry)
    return found


def _task_reads(kernel: KernelReads, key: Any) -> dict[str, int]:
    """The reads parked on a queue's actor waiting for a task's end, by task id (the rest of its
    parked calls are receives)."""
    reads: dict[str, int] = {}
    for command in kernel.parked_commands(key):
        if isinstance(command, WaitTask):
            reads[command.task_id] = reads.get(command.task_id, 0) + 1
    return reads


def receives_parked(kernel: KernelReads, key: Any, calls: int) -> int:
    """How many of the `calls` parked on the queue actor `key` are receives (workers waiting for
    work), not reads waiting for a task's end."""
    return calls - sum(_task_reads(kernel, key).values())


def _count(states: Any) -> dict[str, int]:
    counts: dict[str, int] = {}
    for name in states:
        counts[name] = counts.get(name, 0) + 1
    return dict(sorted(counts.items()))


# -- inspection ------------------------------------------------------------------------------------
# A page of a run's barriers, timers or task groups, newest first (by when each was made, then its
# id: `paging.py`), cut at the caller's limit; `next_cursor` reads the next page (None on the last,
# and `truncated` says the same as a boolean): a view for each kind, as each names its list after
# the kind.


@dataclasses.dataclass(frozen=True, slots=True)
class RunBarriersView:
    scope_id: str
    barriers: tuple[BarrierView, ...]
    truncated: bool
    next_cursor: str | None


@dataclasses.dataclass(frozen=True, slots=True)
class RunTimersView:
    scope_id: str
    timers: tuple[TimerView, ...]
    truncated: bool
    next_cursor: str | None


@dataclasses.dataclass(frozen=True, slots=True)
class RunGroupsView:
    """The task groups gated by the run or created under it."""

    scope_id: str
    groups: tuple[GroupView, ...]
    truncated: bool
    next_cursor: str | None


def _made(row: Any) -> tuple[int, str]:
    """A barrier's, a timer's or a group's place in a newest-first listing."""
    return (row.created_ms, row.id)


def in_scope(
    kernel: KernelReads, space: str, scope_id: str, what: Literal["barriers", "timers", "groups"], limit: int,
    cursor: str | None = None,
) -> RunBarriersView | RunTimersView | RunGroupsView:
    """A page of the barriers, timers or task groups of one run, newest first, at most `limit`,
    past `cursor` (a page's `next_cursor`)."""
    assert limit >= 1, f"a listing shows at least one entry: {limit}"
    after = None if cursor is None else paging.parse_created(cursor)
    state = kernel.space_view(space)
    state.scopes.get(scope_id)  # 404 for a run that does not exist
    part, now_ms = state.coordination, kernel.clock.now_ms()
    if what == "barriers":
        barriers, place = paging.newest_first((b for b in part.barriers.all() if b.scope_id == scope_id), _made, after, limit)
        return RunBarriersView(scope_id, tuple(part.barriers.view(b, now_ms) for b in barriers), *_next(place))
    if what == "timers":
        timers, place = paging.newest_first((t for t in part.timers.all() if t.scope_id == scope_id), _made, after, limit)
        return RunTimersView(scope_id, tuple(part.timers.view(t) for t in timers), *_next(place))
    assert what == "groups", f"a run lists its barriers, timers or groups, not {what}"
    groups, place = paging.newest_first(
        (g for g in part.groups.all() if g.scope_id == scope_id or g.parent_scope_id == scope_id), _made, after, limit,
    )
    return RunGroupsView(scope_id, tuple(part.groups.view(g, now_ms) for g in groups), *_next(place))


def _next(place: tuple[int, str] | None) -> tuple[bool, str | None]:
    """A page's `truncated` and `next_cursor`, from the place of its last row when more follow."""
    return place is not None, None if place is None else paging.created_cursor(place)
