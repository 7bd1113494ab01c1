"""Tasks inside a space, declared: submit (held to its work limit, with its requirements), cancel,
join, detach and wait, the tasks' timers, and what a task's records do to its queue.

The table and its records are `tasks.py`. A task runs on its queue's actor (`("queue", space,
mailbox_id, scope_id)`) with the queue's messages: its creation puts its message on the queue, its
end drops it, and what it shares with its message (its delivery, the queue's checks and timers) is
the queue part's (`work.py`). The tasks' declaration (`TASKS`) is at the end of this module.

Timers (on the queue's actor):
    ("task-deadline", task_id)   -   a task's deadline: EXPIRED if not ended
    ("retention", task_id)       -   a finished task's retention ended: tombstone it

Pure: no IO, no clock reads, no awaits.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator

from . import work_limits
from .actor_keys import ActorKey, queue_actor
from .caps import value_bytes
from .fields import INTEGER, JSON, TIMESTAMP, body, caller, drawn, path, query
from .limits import Limits
from .events import Change
from .messages import COMPLETED
from .outcome import Outcome, Timer, Space, State, TimerMarker
from .primitive import EVENT, NOT_COUNTED, OPERATION, Command, Primitive, command, event, operation, reason_field, timer_kind
from .requirements import REQUIREMENTS, parse_requirements, requirements_record
from .scopes import SCOPE_END_REASONS, SCOPE_ENDED
from .tasks import (
    CANCELLED, EXPIRED, TASK_CREATED, TASK_DETACHED, TASK_ENDED, TASK_IMAGE, TASK_JOINED, TASK_TOMBSTONED, Task, TaskTable,
    input_hash,
)
from .shapes import Record

__all__ = [
    "SubmitTask", "CancelTask", "JoinTask", "DetachTask", "WaitTask", "TASKS", "submit", "task_timers",
    "REASON_CANCELLED", "REASON_DEADLINE",
]

DEADLINE_TIMER = timer_kind("task-deadline")
RETENTION_TIMER = timer_kind("retention")

# Reasons recorded as `outcomeReason` (0.3.0 understands `scope_cancelled`).
REASON_CANCELLED = "cancelled"
REASON_DEADLINE = "deadline_exceeded"


# -- commands ----------------------------------------------------------------------------------


def _task_queue(state: State, space: str, task_id: str) -> ActorKey:
    task = state.space(space).tasks.get(task_id)
    return queue_actor(space, task.mailbox_id, task.scope_id)


@command
class SubmitTask(Command):
    """Create the task of (scope, key), or return the one it has (joining the subscriber)."""

    space: str = path("space")
    scope_id: str = body("scopeId")
    mailbox_id: str = body("mailboxId")
    key: str = body("taskKey", length_max="task_key_len_max")
    task_input: Any = body("input", JSON, required=False)
    deadline_ms: int | None = body("deadline", TIMESTAMP, required=False)
    subscriber_id: str | None = body("subscriberId", required=False, length_max="holder_len_max")
    # What admission takes with the task (`admission.py`); recv never delivers it.
    requirements: Any = body(
        "requirements", JSON, required=False,
        description="an object of " + REQUIREMENTS,
    )
    # The work limit it counts on (`work_limits.py`).
    work_limit: str | None = body(
        "workLimit", required=False, length_max="name_len_max", description="the name (or id) of a work limit"
    )
    task_id: str = drawn("tk_")
    message_id: str = drawn("ms_")

    def actor(self, state: State) -> ActorKey:
        return queue_actor(self.space, self.mailbox_id, self.scope_id)

    def check(self, limits: Limits) -> None:
        if self.requirements is not None:
            parse_requirements(self.requirements)


@command
class CancelTask(Command):
    space: str = path("space")
    task_id: str = path("task_id")
    reason: str | None = reason_field("reason")
    by: str | None = caller()

    def actor(self, state: State) -> ActorKey:
        return _task_queue(state, self.space, self.task_id)


@command
class JoinTask(Command):
    space: str = path("space")
    task_id: str = path("task_id")
    subscriber_id: str = body("subscriberId", length_max="holder_len_max")
    scope_id: str = body("scopeId")

    def actor(self, state: State) -> ActorKey:
        return _task_queue(state, self.space, self.task_id)


@command
class DetachTask(Command):
    space: str = path("space")
    task_id: str = path("task_id")
    subscriber_id: str = body("subscriberId", length_max="holder_len_max")

    def actor(self, state: State) -> ActorKey:
        return _task_queue(state, self.space, self.task_id)


@command
class WaitTask(Command):
    """A task's view once it has ended, or when the wait ends (`GET /tasks/{id}?waitMs=`)."""

    space: str = path("space")
    task_id: str = path("task_id")
    wait_ms: int | None = query("waitMs", INTEGER, minimum=0, description="capped at {wait_ms_max}")

    def actor(self, state: State) -> ActorKey:
        return _task_queue(state, self.space, self.task_id)


# -- transitions (of the space: a task shares its queue with its message, `work.py`) --------------


def submit(state: State, command: SubmitTask, now_ms: int) -> Outcome:
    """A submit, held to its work limit: a task it creates is counted on the limit in the same
    turn, in the same batch of records, with its requirements resolved to ids, so no crash can
    count it without creating it or the reverse."""
    space = state.space(command.space)
    if (command.work_limit is None and command.requirements is None) or space.tasks.by_key(command.scope_id, command.key) is not None:
        return _submit(space, command, now_ms)
    limit = None if command.work_limit is None else work_limits.check_room(space.capacity, command.work_limit)
    needs = requirements_record(space, command, now_ms)
    outcome = _submit(space, command, now_ms)
    if outcome.reply.created:
        if needs is not None:
            space.commit(outcome, needs)
        if limit is not None:
            work_limits.count_task(space.capacity, outcome, limit, command.task_id, now_ms)
    return outcome


def _submit(space: Space, command: SubmitTask, now_ms: int) -> Outcome:
    """Create the task for (scope, key), or return the one it has (joining the subscriber)."""
    work, tasks = space.work, space.tasks
    task_id, message_id, key, task_input = command.task_id, command.message_id, command.key, command.task_input
    scope_id, mailbox_id, deadline_ms = command.scope_id, command.mailbox_id, command.deadline_ms
    subscriber_id = command.subscriber_id
    digest = input_hash(task_input)
    mailbox = space.mailboxes.get(mailbox_id)
    space.scopes.require_active(scope_id, now_ms)
    task = tasks.by_key(scope_id, key)
    if task is not None:
        tasks.check_replay(task, mailbox_id, digest)
        outcome = Outcome()
        if subscriber_id is not None:
            record = tasks.decide_join(task, subscriber_id, scope_id, now_ms)
            if record is not None:
                space.commit(outcome, record)
        outcome.reply = tasks.submitted_view(task, now_ms, created=False)
        return outcome
    work.check_deadline(deadline_ms, now_ms)
    work.check_backlog(mailbox)
    work.check_bytes(value_bytes(task_input), 0)
    work.check_entities(2)  # the task and its message
    space.messages.check_new_id(message_id)
    record = tasks.decide_create(task_id, key, scope_id, mailbox_id, message_id, task_input, digest, deadline_ms, subscriber_id, now_ms)
    outcome = space.commit(Outcome(), record)
    task = tasks.get(task_id)
    outcome.timers.extend(task_timers(space.id, tasks, task))
    outcome.reply = tasks.submitted_view(task, now_ms, created=True)
    return outcome


def wait(space: Space, command: WaitTask, now_ms: int) -> Outcome:
    """The task's view once it has ended; `empty` (a long poll parks) until then."""
    task = space.tasks.get(command.task_id)
    if not task.terminal:
        return Outcome(empty=True)
    return Outcome(reply=space.tasks.view(task, now_ms))


def cancel(space: Space, command: CancelTask, now_ms: int) -> Outcome:
    tasks: TaskTable = space.tasks
    task = tasks.get(command.task_id)
    record = tasks.decide_end(task, CANCELLED, command.reason or REASON_CANCELLED, now_ms)
    if record is not None and command.by is not None:
        record["by"] = command.by  # who cancelled it, for the event log
    outcome = Outcome() if record is None else space.commit(Outcome(), record)
    outcome.reply = tasks.view(task, now_ms)
    return outcome


def join(space: Space, command: JoinTask, now_ms: int) -> Outcome:
    tasks: TaskTable = space.tasks
    task = tasks.get(command.task_id)
    space.scopes.get(command.scope_id)
    record = tasks.decide_join(task, command.subscriber_id, command.scope_id, now_ms)
    outcome = Outcome() if record is None else space.commit(Outcome(), record)
    outcome.reply = tasks.view(task, now_ms)
    return outcome


def detach(space: Space, command: DetachTask, now_ms: int) -> Outcome:
    tasks: TaskTable = space.tasks
    task = tasks.get(command.task_id)
    record = tasks.decide_detach(task, command.subscriber_id, now_ms)
    outcome = Outcome() if record is None else space.commit(Outcome(), record)
    outcome.reply = tasks.view(task, now_ms)
    return outcome


# -- timers ------------------------------------------------------------------------------------


def task_timers(space_id: str, tasks: TaskTable, task: Task) -> Iterator[Timer]:
    """A task's deadline while it runs; its retention once it has ended (until tombstoned)."""
    actor = queue_actor(space_id, task.mailbox_id, task.scope_id)
    if not task.terminal:
        if task.deadline_ms is not None:
            yield Timer(task.deadline_ms, actor, (DEADLINE_TIMER, task.id), None)
    elif not task.tombstoned:
        due_ms = tasks.tombstone_due_ms(task)
        assert due_ms is not None
        yield Timer(due_ms, actor, (RETENTION_TIMER, task.id), None)


def on_deadline(space: Space, task_id: str, _: TimerMarker, now_ms: int) -> Outcome:
    """A task's deadline passed before it ended: EXPIRED."""
    task = space.tasks.find(task_id)
    if task is None or task.terminal or task.deadline_ms is None or now_ms < task.deadline_ms:
        return Outcome()
    return space.work.timer_commit(space.tasks.decide_end(task, EXPIRED, REASON_DEADLINE, now_ms), None, task)


def on_retention(space: Space, task_id: str, _: TimerMarker, now_ms: int) -> Outcome:
    """A finished task's retention ended: tombstone it."""
    task = space.tasks.find(task_id)
    if task is None:
        return Outcome()
    record = space.tasks.decide_tombstone(task, now_ms)
    return Outcome() if record is None else space.work.timer_commit(record, None, task)


# -- applying (a task's creation puts its message on the queue; its end drops it) -----------------


def _apply_created(space: Space, record: Record) -> None:
    task = space.tasks.apply_created(record)
    space.messages.apply_enqueued(
        task.message_id, task.mailbox_id, task.scope_id, record["input"], None, None, task.deadline_ms, task.id, record["at_ms"]
    )


def _apply_ended(space: Space, record: Record) -> None:
    task = space.tasks.apply_ended(record["task_id"], record["state"], None, record["reason"], record["at_ms"])
    message = space.messages.find(task.message_id)
    if message is not None and message.state in ("QUEUED", "DELAYED", "LEASED"):
        space.messages.apply_finished(message.id, "DROPPED", record["reason"], record["at_ms"])


def _apply_tombstoned(space: Space, record: Record) -> None:
    """The task lets its outcome go, and its input kept beside it (`deliveries.complete`)."""
    task = space.tasks.apply_tombstoned(record)
    message = space.messages.find(task.message_id)
    if message is not None and message.state == COMPLETED and message.payload is not None:
        space.messages.let_payload_go(message)


# -- how usage counts, and the events -------------------------------------------------------------

# The reasons the queue records when the server, not a caller, ends a task (`work.py`).
_SERVER_TASK_ENDS = frozenset({REASON_DEADLINE, *SCOPE_END_REASONS.values()})


def _usage_of_end(record: Record) -> tuple[int, str]:
    """Judged by the record alone: a task cancelled with a reason the server itself uses for a
    run's end counts as that event."""
    if record["state"] == EXPIRED:
        return EVENT, "tasks.expire"
    if record.get("reason") in _SERVER_TASK_ENDS:
        return EVENT, "tasks.end_with_run"
    return OPERATION, "tasks.cancel"


def _ended_events(space: Space, record: Record) -> list[Change]:
    task = space.tasks.find(record["task_id"])
    scope_id = None if task is None else task.scope_id
    payload = {"reason": record.get("reason"), "by": record.get("by")}
    return [("task." + record["state"].lower(), scope_id, "task", record["task_id"], payload)]


def _cancelled_with_scope(space: Space, record: Record) -> list[Change]:
    """The end of every task that waited in an ended scope's subtree (they end with it)."""
    by = record.get("by")
    reason = SCOPE_END_REASONS[record["state"]]
    return [
        ("task.cancelled", message.scope_id, "task", message.task_id, {"reason": reason, "by": by})
        for message in space.messages.waiting_in_scopes(space.scopes.subtree(record["id"]))
        if message.task_id is not None
    ]


def _scope_ending(space: Space, subtree: list[str]) -> Callable[[Outcome, int], None]:
    """The tasks waiting in an ending scope end with it: their retention timers, once they have."""
    waiting = [m.task_id for m in space.messages.waiting_in_scopes(subtree) if m.task_id is not None]

    def then(outcome: Outcome, at_ms: int) -> None:
        for task_id in waiting:
            outcome.timers.extend(task_timers(space.id, space.tasks, space.tasks.get(task_id)))

    return then


def _deadlines(space: Space) -> Iterator[Timer]:
    for task in space.tasks.all():
        yield from task_timers(space.id, space.tasks, task)


def _make(space: Space) -> None:
    space.tasks = TaskTable(space.limits)


TASKS = Primitive(
    "tasks",
    make=_make,
    state=("tasks",),
    commands={
        SubmitTask: submit,
        CancelTask: ("", cancel),
        JoinTask: ("", join),
        DetachTask: ("", detach),
        WaitTask: ("", wait),
    },
    records={
        TASK_CREATED: (
            "id", "task_key", "scope_id", "mailbox_id", "message_id", "input", "input_hash", "deadline_ms", "subscriber_id", "at_ms",
        ),
        TASK_JOINED: ("task_id", "subscriber_id", "scope_id", "at_ms"),
        TASK_DETACHED: ("task_id", "subscriber_id", "at_ms"),
        TASK_ENDED: ("task_id", "state", "reason", "at_ms", "by?"),
        TASK_TOMBSTONED: ("task_id", "at_ms"),
        TASK_IMAGE: (
            "id", "task_key", "scope_id", "mailbox_id", "message_id", "input_hash", "state", "attempt", "outcome", "reason",
            "deadline_ms", "subscribers", "created_ms", "updated_ms", "finished_ms", "tombstoned", "at_ms",
        ),
    },
    apply={
        TASK_CREATED: ("", _apply_created),
        TASK_JOINED: ("tasks", "apply_joined"),
        TASK_DETACHED: ("tasks", "apply_detached"),
        TASK_ENDED: ("", _apply_ended),
        TASK_TOMBSTONED: ("", _apply_tombstoned),
        TASK_IMAGE: ("tasks", "apply_image"),
    },
    usage={
        TASK_CREATED: operation("tasks.submit"),
        TASK_JOINED: operation("tasks.join"),
        TASK_DETACHED: operation("tasks.detach"),
        TASK_ENDED: _usage_of_end,
        TASK_TOMBSTONED: event("tasks.tombstone"),
        TASK_IMAGE: NOT_COUNTED,
    },
    timers={DEADLINE_TIMER: ("", on_deadline), RETENTION_TIMER: ("", on_retention)},
    derive={
        TASK_CREATED: lambda space, r: ("task.created", r["scope_id"], "task", r["id"], (r["task_key"], r["mailbox_id"])),
        TASK_ENDED: _ended_events,
        SCOPE_ENDED: _cancelled_with_scope,
    },
    events={"task.created": ("taskKey", "mailboxId"), "task.cancelled": None, "task.expired": None},
    deadlines=_deadlines,
    image=lambda space: space.tasks.image(),
    is_empty=lambda space: not len(space.tasks),
    entities=lambda space: len(space.tasks),
    values_bytes=lambda space: space.tasks.outcome_bytes,
    scope_ending=_scope_ending,
    scopes_removed=lambda space, scope_ids: space.tasks.drop_scopes(scope_ids),
)
