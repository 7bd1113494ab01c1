"""Runs by name: `PUT /runs/{name}` gets or creates a named root scope, the same one for every caller.

A name, once given to a run, keeps naming that run: a PUT of a run that has since been cancelled,
completed or expired answers that run as it is (`effective` not ACTIVE), and callers treat it as
stopped. That is what makes a stop reach every worker of the run, including those that join later;
work that should start afresh takes a new run name. A deadline sent with the PUT applies only when
the run is created.

Records: `run.named` {name, scope_id, at_ms}, written in the turn that writes the run's
`scope.created`; snapshots carry it as is (it is its own image).

**Retention.** An ended run (a root scope: one made by `PUT /runs/{name}` or `POST /scopes` without
a parent) is removed `ended_run_retention_s` after its end (7 days by default; 0 keeps ended runs
for good), the way Temporal removes a closed workflow after its namespace's retention: the run,
its child runs (ended with it) and everything each primitive keeps of them (task tombstones,
finished messages and dead letters, once slots, barriers, timers, task groups: `scopes_removed`
in each declaration) leave in one `run.removed` {ids, at_ms} record, applied live and in replay
like any other decision. Its ids then answer 404, and its name names no run any more: a
`PUT /runs/{name}` of it makes a new run. What stays: the event log (bounded by its own
`events_kept_max` and `events_kept_s`, and its `run.removed` event says what went), usage
counters, stored Idempotency-Key answers (their own TTL), and what capacity keeps with a run's id
as a label (pool and allowance waiters, budget reservations: they leave by their own rules). A
run something live still refers to is kept (`scopes_kept`: a task group not yet finalized, outside
the run, with a member task in it) and looked at again a sweep later.

Removals are swept: a run's removal falls due at the first sweep instant (a multiple of a tenth of
the retention, at least a second and at most a minute) at or after its end plus the retention, and
the timer of the first run due removes every run then due (at most `RUNS_REMOVED_MAX` a record),
so a burst of runs that ended together costs one pass over the space's tables rather than one a
run. A timer of a run already removed finds nothing to do.

Timers (on the run's scope actor):
    ("run-removal", scope_id)   -   the run's retention ended: remove it, and every run then due

Pure: no IO, no clock reads, no awaits.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator, NamedTuple

from .actor_keys import ActorKey, run_actor, scope_actor
from .caps import CapView
from .fields import TIMESTAMP, body, check_text, drawn, path
from .limits import Limits
from .outcome import Outcome, Timer, Space, State
from .primitive import NOT_COUNTED, Command, Primitive, command, record_type, timer_kind
from .scopes import ScopeTree, deadline_timer
from .shapes import DurationMs, EpochMs, Record

__all__ = [
    "RunNames", "RunCommands", "run_actor", "RUN_NAMED", "RUN_REMOVED", "EnsureRun", "RUNS", "removal_due_ms",
    "pending_removal", "PendingRemovalView", "SpaceCapsView", "RUNS_REMOVED_MAX",
]

# The record types this module decides and applies (the journal's spelling of each).
RUN_NAMED = record_type("run.named")
RUN_REMOVED = record_type("run.removed")

REMOVAL_TIMER = timer_kind("run-removal")

# Runs one `run.removed` record removes at most (the rest go at the same instant, by their own timers).
RUNS_REMOVED_MAX = 1_000
# The sweep's step: a tenth of the retention, within these bounds.
SWEEP_MS_MIN = 1_000
SWEEP_MS_MAX = 60_000


class RunNames:
    __slots__ = ("_by_name",)

    def __init__(self) -> None:
        self._by_name: dict[str, str] = {}

    def __len__(self) -> int:
        return len(self._by_name)

    def scope_of(self, name: str) -> str | None:
        return self._by_name.get(name)

    def apply_named(self, record: Record) -> None:
        assert record["name"] not in self._by_name, "a run name names one run"
        self._by_name[record["name"]] = record["scope_id"]

    def forget(self, name: str, scope_id: str) -> None:
        """The run `scope_id` was removed: its name names no run any more."""
        if self._by_name.get(name) == scope_id:
            del self._by_name[name]

    def image(self) -> Iterator[Record]:
        for name, scope_id in self._by_name.items():
            yield {"type": RUN_NAMED, "name": name, "scope_id": scope_id, "at_ms": 0}


@command
class EnsureRun(Command):
    """Get or create the run (a root scope) of this name (see above for what a stopped run answers)."""

    space: str = path("space")
    name: str = path("name")
    deadline_ms: int | None = body("deadline", TIMESTAMP, required=False)
    scope_id: str = drawn("sc_")

    def actor(self, state: State) -> ActorKey:
        return run_actor(self.space, self.name)

    def check(self, limits: Limits) -> None:
        check_text("name", self.name, limits.name_len_max)


class RunCommands:
    __slots__ = ("_space_id", "_scopes", "_names", "_commit", "_deadline_timer")

    def __init__(
        self,
        space_id: str,
        scopes: ScopeTree,
        names: RunNames,
        commit: Callable[..., Outcome],
        deadline_timer: Callable[[str, int], Timer],
    ) -> None:
        self._space_id = space_id
        self._scopes = scopes
        self._names = names
        self._commit = commit
        self._deadline_timer = deadline_timer

    def ensure(self, command: EnsureRun, now_ms: int) -> Outcome:
        scopes = self._scopes
        existing = self._names.scope_of(command.name)
        if existing is not None:
            return Outcome(reply=scopes.view(scopes.get(existing), now_ms))
        scope_id = command.scope_id
        created = scopes.decide_create(scope_id, command.name, None, command.deadline_ms, None, now_ms)
        named = {"type": RUN_NAMED, "name": command.name, "scope_id": scope_id, "at_ms": now_ms}
        outcome = self._commit(Outcome(), created, named)
        if command.deadline_ms is not None:
            outcome.timers.append(self._deadline_timer(scope_id, command.deadline_ms))
        outcome.reply = scopes.view(scopes.get(scope_id), now_ms)
        return outcome


# -- retention ---------------------------------------------------------------------------------


def sweep_ms(limits: Limits) -> int:
    """How far apart removals are swept: a tenth of the retention, within one second and a minute."""
    return min(SWEEP_MS_MAX, max(SWEEP_MS_MIN, limits.ended_run_retention_s * 100))


def removal_due_ms(limits: Limits, ended_ms: int) -> int | None:
    """When a run that ended at `ended_ms` is removed: the first sweep instant at or after its
    retention ends; None when ended runs are kept for good."""
    return _due_ms(limits, ended_ms) if limits.ended_run_retention_s else None


def _due_ms(limits: Limits, ended_ms: int) -> int:
    """`removal_due_ms` where a retention is set."""
    assert limits.ended_run_retention_s, "ended runs are kept for good: none is due"
    step = sweep_ms(limits)
    return -(-(ended_ms + limits.ended_run_retention_s * 1000) // step) * step


def _removal_timer(space_id: str, scope_id: str, due_ms: int) -> Timer:
    return Timer(due_ms, scope_actor(space_id, scope_id), (REMOVAL_TIMER, scope_id), None)


def on_removal(space: Any, scope_id: str, _: Any, now_ms: int) -> Outcome:
    """A run's retention ended: remove it and every other run due now (`RUNS_REMOVED_MAX` at most),
    except those something live still refers to, which are looked at again a sweep later."""
    scopes: ScopeTree = space.scopes
    limits = space.limits
    ended_ms = scopes.ended_roots.get(scope_id)
    due_ms = None if ended_ms is None else removal_due_ms(limits, ended_ms)
    if due_ms is None or now_ms < due_ms:
        return Outcome()  # removed already (with another run), or kept for good
    # The others due now, oldest first (the firing run first: its own timer is spent).
    due = sorted(
        (ended, root) for root, ended in scopes.ended_roots.items()
        if root != scope_id and _due_ms(limits, ended) <= now_ms
    )
    roots = [scope_id, *(root for _, root in due[: RUNS_REMOVED_MAX - 1])]
    trees = {root: scopes.subtree(root) for root in roots}
    kept = space.scopes_kept(frozenset(s for tree in trees.values() for s in tree))
    removed = [root for root in roots if kept.isdisjoint(trees[root])]
    outcome = Outcome()
    if removed:
        # Paired with `_apply_removed`: only ended runs, due, whole.
        assert all(not scopes.get(root).live and scopes.get(root).parent_id is None for root in removed)
        outcome = space.commit(outcome, {"type": RUN_REMOVED, "ids": removed, "at_ms": now_ms})
    later, gone = now_ms + sweep_ms(limits), set(removed)
    outcome.timers.extend(_removal_timer(space.id, root, later) for root in roots if root not in gone)
    return outcome


def _apply_removed(space: Any, record: Record) -> None:
    """`run.removed`: the runs, their child runs and what every primitive keeps of them leave."""
    scopes: ScopeTree = space.scopes
    removed: list[str] = []
    for root in record["ids"]:
        scope = scopes.get(root)
        assert scope.parent_id is None and root in scopes.ended_roots, f"run {root} is removed only once ended"
        if scope.name is not None:
            space.run_names.forget(scope.name, root)
        removed.extend(scopes.subtree(root))
    space.scopes_removed(frozenset(removed))


def _removed_events(space: Any, record: Record) -> list[tuple[str, str, str, str, dict[str, int]]]:
    """One `run.removed` event a run, with how many runs (itself and its child runs) left with it."""
    scopes = space.scopes
    return [("run.removed", root, "scope", root, {"scopes": len(scopes.subtree(root))}) for root in record["ids"]]


def _scope_ending(space: Any, subtree: list[str]) -> Callable[[Outcome, int], None] | None:
    """A run's end arms its removal (a child run leaves with its run)."""
    scope = space.scopes.get(subtree[0])
    if scope.parent_id is not None or not space.limits.ended_run_retention_s:
        return None

    def then(outcome: Outcome, at_ms: int) -> None:
        outcome.timers.append(_removal_timer(space.id, scope.id, _due_ms(space.limits, at_ms)))

    return then


def _deadlines(space: Any) -> Iterator[Timer]:
    limits = space.limits
    if not limits.ended_run_retention_s:
        return
    for root, ended_ms in space.scopes.ended_roots.items():
        yield _removal_timer(space.id, root, _due_ms(limits, ended_ms))


class PendingRemovalView(NamedTuple):
    """What retention will remove (`GET .../caps`): the ended runs kept, their child runs, the tasks
    and messages kept in them, when the next removal is due (None when nothing is), and how many
    runs are past their removal and kept because something live still refers to them (or the sweep
    is about to run). All 0 when `ended_run_retention_s` is 0: ended runs are then kept for good."""

    ended_run_retention_ms: DurationMs
    runs: int
    scopes: int
    tasks: int
    messages: int
    next_removal_ms: EpochMs | None
    overdue_runs: int



class SpaceCapsView(NamedTuple):
    """How full a space is (`GET .../caps`): each cap (`caps.held`), then what retention will
    remove, so an operator sees the entity count that is about to fall."""

    space_id: str
    caps: tuple[CapView, ...]
    pending_removal: PendingRemovalView

def pending_removal(space: Any, now_ms: int) -> PendingRemovalView:
    """What is pending removal: one pass over the tables, a read for an operator, not for a scrape."""
    limits = space.limits
    retention_s = limits.ended_run_retention_s
    scopes: ScopeTree = space.scopes
    inside: set[str] = set()
    next_ms = overdue = 0
    if retention_s:
        for root, ended_ms in scopes.ended_roots.items():
            inside.update(scopes.subtree(root))
            due_ms = _due_ms(limits, ended_ms)
            next_ms = due_ms if not next_ms else min(next_ms, due_ms)
            overdue += due_ms <= now_ms
    assert overdue <= len(scopes.ended_roots), "a run is overdue only once ended"
    return PendingRemovalView(
        retention_s * 1000,
        len(scopes.ended_roots) if retention_s else 0,
        len(inside),
        sum(1 for task in space.tasks.all() if task.scope_id in inside) if inside else 0,
        sum(1 for message in space.messages.all() if message.scope_id in inside) if inside else 0,
        next_ms or None,
        overdue,
    )


def _make(space: Space) -> None:
    space.run_names = RunNames()
    deadline = lambda scope_id, deadline_ms: deadline_timer(space.id, scope_id, deadline_ms)  # noqa: E731
    space.runs = RunCommands(space.id, space.scopes, space.run_names, space.commit, deadline)


RUNS = Primitive(
    "runs",
    make=_make,
    state=("run_names",),
    parts=("runs",),
    commands={EnsureRun: ("runs", RunCommands.ensure)},
    # `run.named` is written in the turn that writes the run's `scope.created`; its own image.
    records={RUN_NAMED: ("name", "scope_id", "at_ms"), RUN_REMOVED: ("ids", "at_ms")},
    apply={RUN_NAMED: ("run_names", "apply_named"), RUN_REMOVED: ("", _apply_removed)},
    # The run's `scope.created` is the operation; a removal is housekeeping (its events say what went).
    usage={RUN_NAMED: NOT_COUNTED, RUN_REMOVED: NOT_COUNTED},
    timers={REMOVAL_TIMER: ("", on_removal)},
    derive={RUN_REMOVED: _removed_events},
    events={"run.removed": None},
    deadlines=_deadlines,
    image=lambda space: space.run_names.image(),
    scope_ending=_scope_ending,
)
