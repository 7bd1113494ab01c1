"""Work limits: at most `max_outstanding` tasks not yet ended, among those submitted under a name.

A submit naming a work limit (by name, or by id as a fallback) that would take its outstanding
tasks over the limit is 409 BACKLOG_FULL. Outstanding means created and not yet terminal
(SUCCEEDED, FAILED, CANCELLED, EXPIRED), whatever mailbox or scope the task is in: the limit is the
caller's bound on work in flight, so it must count every task it let through. The scope the limit
was made for is recorded and shown; it does not narrow what is counted.

The tasks a limit let through are kept by id (recorded with the submit as `work_limit.counted`)
and judged by the task table when counted, so a task's end needs no record here; ended tasks are
dropped from the set when the next one is added (the same on replay, which sees the same tasks).
The commands run on the space's capacity actor (`capacity.py`); a submit is checked and counted by
the tasks' transition (`task_commands.submit`) with `check_room` and `count_task`. The work limits'
declaration (`WORK_LIMITS`) is at the end.

Pure: no IO, no clock reads.
"""

from __future__ import annotations

from typing import Iterator, NamedTuple

from .capacity import CapacityCommand, CapacityCommands
from .caps import full
from .errors import BACKLOG_FULL, CONFLICT, NOT_FOUND, KernelError
from .fields import INTEGER, body, drawn, path
from .outcome import Outcome, Space
from .primitive import NOT_COUNTED, Primitive, command, operation, record_type
from .tasks import TaskTable
from .shapes import EpochMs, Record

__all__ = [
    "WorkLimit", "WorkLimitTable", "WORK_LIMIT_COUNTED", "WORK_LIMIT_CREATED", "WORK_LIMIT_IMAGE", "CreateWorkLimit",
    "WORK_LIMITS", "check_room", "count_task", "WorkLimitView", "WorkLimitFullView",
]

# The record types this module decides and applies (the journal's spelling of each).
WORK_LIMIT_COUNTED = record_type("work_limit.counted")
WORK_LIMIT_CREATED = record_type("work_limit.created")
WORK_LIMIT_IMAGE = record_type("work_limit.image")

# BACKLOG_FULL's Retry-After: no moment is known when a task will end, so a short, fixed wait.
RETRY_AFTER_S = 1.0


def _open(tasks: TaskTable, task_id: str) -> bool:
    task = tasks.find(task_id)
    return task is not None and not task.terminal


# A work limit's views are named tuples, as a claim's are. The shell names and formats them on the
# wire (`server/wire/work_limits.py`).


class WorkLimitView(NamedTuple):
    """A work limit: at most `max_outstanding` of the tasks it let through not yet ended, and how
    many are now; `scope_id` the scope it was made for (shown, not a filter)."""

    id: str
    name: str
    scope_id: str
    max_outstanding: int
    outstanding: int
    created_ms: EpochMs


class WorkLimitFullView(NamedTuple):
    """BACKLOG_FULL's details for a work limit: its tasks outstanding, and its maximum."""

    outstanding: int
    max_outstanding: int


class WorkLimit:
    __slots__ = ("id", "name", "scope_id", "max_outstanding", "created_ms", "task_ids")

    def __init__(self, record: Record, created_ms: int) -> None:
        self.id: str = record["id"]
        self.name: str = record["name"]
        self.scope_id: str = record["scope_id"]
        self.max_outstanding: int = record["max_outstanding"]
        self.created_ms = created_ms
        self.task_ids: list[str] = []


class WorkLimitTable:
    __slots__ = ("_limits", "_by_name", "_tasks", "work_limits_max")
    # (`_tasks` is the space's task table, compared there.)
    _DERIVED = ("_tasks",)

    def __init__(self, tasks: TaskTable, work_limits_max: int) -> None:
        self._limits: dict[str, WorkLimit] = {}
        self._by_name: dict[str, WorkLimit] = {}
        self._tasks = tasks
        self.work_limits_max = work_limits_max

    def __len__(self) -> int:
        return len(self._limits)

    def all(self) -> Iterator[WorkLimit]:
        return iter(self._limits.values())

    def find(self, name_or_id: str) -> WorkLimit:
        limit = self._by_name.get(name_or_id) or self._limits.get(name_or_id)
        if limit is None:
            raise KernelError(NOT_FOUND, f"work limit {name_or_id!r} not found")
        return limit

    def outstanding(self, limit: WorkLimit) -> int:
        tasks = self._tasks
        return sum(1 for task_id in limit.task_ids if _open(tasks, task_id))

    def view(self, limit: WorkLimit) -> WorkLimitView:
        outstanding = self.outstanding(limit)
        assert 0 <= outstanding <= len(limit.task_ids), "only tasks the limit let through are outstanding"
        return WorkLimitView(limit.id, limit.name, limit.scope_id, limit.max_outstanding, outstanding, limit.created_ms)

    def decide_create(self, limit_id: str, name: str, scope_id: str, max_outstanding: int, now_ms: int) -> Record:
        if name in self._by_name:
            raise KernelError(CONFLICT, f"a work limit named {name!r} exists already", details={"id": self._by_name[name].id})
        if len(self._limits) >= self.work_limits_max:
            raise full(f"space holds {len(self._limits)} work limits", "work_limits_max")
        assert max_outstanding > 0, "a work limit lets some tasks through"
        return {
            "type": WORK_LIMIT_CREATED, "id": limit_id, "name": name, "scope_id": scope_id,
            "max_outstanding": max_outstanding, "at_ms": now_ms,
        }

    def check_room(self, limit: WorkLimit) -> None:
        outstanding = self.outstanding(limit)
        if outstanding >= limit.max_outstanding:
            raise KernelError(
                BACKLOG_FULL,
                f"work limit {limit.name!r} has {outstanding} of {limit.max_outstanding} tasks outstanding",
                details=WorkLimitFullView(outstanding, limit.max_outstanding),
                retry_after_s=RETRY_AFTER_S,
            )

    def apply_created(self, record: Record) -> WorkLimit:
        limit = WorkLimit(record, record["at_ms"])
        assert limit.id not in self._limits and limit.name not in self._by_name
        self._limits[limit.id] = self._by_name[limit.name] = limit
        return limit

    def apply_counted(self, record: Record) -> None:
        limit = self._limits[record["id"]]
        tasks = self._tasks
        limit.task_ids = [task_id for task_id in limit.task_ids if _open(tasks, task_id)]
        limit.task_ids.append(record["task_id"])
        assert len(limit.task_ids) <= limit.max_outstanding, "a work limit never lets more through than its maximum"

    def image(self) -> Iterator[Record]:
        for limit in self._limits.values():
            yield {
                "type": WORK_LIMIT_IMAGE, "id": limit.id, "name": limit.name, "scope_id": limit.scope_id,
                "max_outstanding": limit.max_outstanding, "created_ms": limit.created_ms,
                "task_ids": list(limit.task_ids),  # as they stand: ended ones go when the next is counted
            }

    def apply_image(self, record: Record) -> None:
        limit = self.apply_created({**record, "at_ms": record["created_ms"]})
        limit.task_ids = list(record["task_ids"])


# -- commands ----------------------------------------------------------------------------------


@command
class CreateWorkLimit(CapacityCommand):
    space: str = path("space")
    name: str = body("name", length_max="name_len_max")
    scope_id: str = body(
        "scopeId", description="the run it is made for, shown with it; it does not narrow what is counted (tasks of every run are)"
    )
    max_outstanding: int = body("maxOutstanding", INTEGER, minimum=1, maximum="backlog_limit_max")
    work_limit_id: str = drawn("wl_")


def create(part: CapacityCommands, command: CreateWorkLimit, now_ms: int) -> Outcome:
    part.scopes.get(command.scope_id)
    limits: WorkLimitTable = part.work_limits
    record = limits.decide_create(command.work_limit_id, command.name, command.scope_id, command.max_outstanding, now_ms)
    outcome = part.commit(Outcome(), record)
    outcome.reply = limits.view(limits.find(command.work_limit_id))
    return outcome


def check_room(part: CapacityCommands, name_or_id: str) -> WorkLimit:
    """The work limit a submit names, if it has room for one more task (else BACKLOG_FULL)."""
    limit = part.work_limits.find(name_or_id)
    part.work_limits.check_room(limit)
    return limit


def count_task(part: CapacityCommands, outcome: Outcome, limit: WorkLimit, task_id: str, now_ms: int) -> None:
    """Count the task a submit created on its work limit, in the submit's own outcome."""
    part.commit(outcome, {"type": WORK_LIMIT_COUNTED, "id": limit.id, "task_id": task_id, "at_ms": now_ms})


def _make(space: Space) -> None:
    space.capacity.work_limits = WorkLimitTable(space.tasks, space.limits.work_limits_max)


_TABLE = "capacity.work_limits"

# After the tasks in a space's image: a work limit counts its tasks by id.
WORK_LIMITS = Primitive(
    "work limits",
    make=_make,
    commands={CreateWorkLimit: ("capacity", create)},
    records={
        WORK_LIMIT_CREATED: ("id", "name", "scope_id", "max_outstanding", "at_ms"),
        WORK_LIMIT_COUNTED: ("id", "task_id", "at_ms"),
        WORK_LIMIT_IMAGE: ("id", "name", "scope_id", "max_outstanding", "created_ms", "task_ids"),
    },
    apply={
        WORK_LIMIT_CREATED: (_TABLE, "apply_created"),
        WORK_LIMIT_COUNTED: (_TABLE, "apply_counted"),
        WORK_LIMIT_IMAGE: (_TABLE, "apply_image"),
    },
    # A task counted on its limit is counted with the submit it belongs to.
    usage={WORK_LIMIT_CREATED: operation("work_limits.create"), WORK_LIMIT_COUNTED: NOT_COUNTED, WORK_LIMIT_IMAGE: NOT_COUNTED},
    image=lambda space: space.capacity.work_limits.image(),
    is_empty=lambda space: not len(space.capacity.work_limits),
)
