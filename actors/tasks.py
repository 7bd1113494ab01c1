"""Tasks: one piece of work per (scope, task key), one recorded outcome, any number of readers.

Submitting a key creates the task, or returns the task that key already has in that scope, even a
finished or tombstoned one: the same work is never started twice under one name. The same key
with a different input (compared by a canonical hash: orjson with sorted keys) or for another
mailbox is IDEMPOTENCY_CONFLICT, because that would be two different pieces of work under one name.

A task is delivered through its mailbox as one message whose payload is the task's input, so its
state follows that message's deliveries:

    QUEUED <--> RUNNING --> SUCCEEDED | FAILED
      \\_________\\______--> CANCELLED (cancel, scope ended) | EXPIRED (deadline)

A terminal state, its `outcome` and `outcomeReason` never change again. `retention_s` after it
ended the task is tombstoned: the outcome is let go (`outcome: null`, `tombstoned: true`), state and
reason stay, and the key still returns the task. Subscribers are a record of interest: detaching the
last one does not cancel anything.

The table is here; the tasks' commands, transitions and declaration are `task_commands.py`.

Pure: no IO, no clock reads.
"""

from __future__ import annotations

import hashlib
from typing import Any, Final, Iterator, Literal, NamedTuple

import orjson

from .caps import full, value_bytes
from .errors import CONFLICT, IDEMPOTENCY_CONFLICT, NOT_FOUND, KernelError, quote
from .limits import Limits
from .primitive import record_type
from .shapes import EpochMs, Json, Record

__all__ = [
    "Task", "TaskTable", "TaskView", "RunTasksView", "SubmittedTaskView", "TaskState", "input_hash", "QUEUED", "RUNNING", "SUCCEEDED", "FAILED", "CANCELLED", "EXPIRED",
    "TERMINAL", "TASK_CREATED", "TASK_DETACHED", "TASK_ENDED", "TASK_IMAGE", "TASK_JOINED", "TASK_TOMBSTONED",
]

# The record types this module decides and applies (the journal's spelling of each).
TASK_CREATED = record_type("task.created")
TASK_DETACHED = record_type("task.detached")
TASK_ENDED = record_type("task.ended")
TASK_IMAGE = record_type("task.image")
TASK_JOINED = record_type("task.joined")
TASK_TOMBSTONED = record_type("task.tombstoned")

TaskState = Literal["QUEUED", "RUNNING", "SUCCEEDED", "FAILED", "CANCELLED", "EXPIRED"]
QUEUED: Final = "QUEUED"
RUNNING: Final = "RUNNING"
SUCCEEDED: Final = "SUCCEEDED"
FAILED: Final = "FAILED"
CANCELLED: Final = "CANCELLED"
EXPIRED: Final = "EXPIRED"
TERMINAL: frozenset[TaskState] = frozenset({SUCCEEDED, FAILED, CANCELLED, EXPIRED})


def input_hash(value: Any) -> str:
    """A canonical digest of a JSON value: key order does not matter, anything else does."""
    return hashlib.blake2b(orjson.dumps(value, option=orjson.OPT_SORT_KEYS), digest_size=16).hexdigest()


class Task:
    __slots__ = (
        "id",
        "key",
        "scope_id",
        "mailbox_id",
        "message_id",
        "input_hash",
        "state",
        "attempt",
        "outcome",
        "reason",
        "deadline_ms",
        "subscribers",
        "created_ms",
        "updated_ms",
        "finished_ms",
        "tombstoned",
    )

    def __init__(
        self,
        task_id: str,
        key: str,
        scope_id: str,
        mailbox_id: str,
        message_id: str,
        digest: str,
        deadline_ms: int | None,
        created_ms: int,
    ) -> None:
        self.id = task_id
        self.key = key
        self.scope_id = scope_id
        self.mailbox_id = mailbox_id
        self.message_id = message_id
        self.input_hash = digest
        self.state: TaskState = QUEUED
        self.attempt = 0
        self.outcome: Any = None
        self.reason: str | None = None
        self.deadline_ms = deadline_ms
        self.subscribers: dict[str, str] = {}  # subscriber id -> the scope it joined from
        self.created_ms = created_ms
        self.updated_ms = created_ms
        self.finished_ms: int | None = None
        self.tombstoned = False

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL


# A task's views are named tuples: one allocation each, on the path of every submit and every
# read of a task (see `claims.py`). The submit's variant repeats `TaskView`'s fields first, in its
# order, then its own.


class TaskView(NamedTuple):
    """A task as a submitter, a subscriber or a reader is shown it.

    `outcome` is the recorded result (None until SUCCEEDED, and once tombstoned), `outcome_reason`
    why it ended otherwise; `deadline_ms` makes it EXPIRED when passed; `subscribers` the ids that
    joined it; `tombstoned` true once its retention has passed. The shell names and formats these
    on the wire (`server/wire/`)."""

    id: str
    task_key: str
    scope_id: str
    mailbox_id: str
    message_id: str
    state: TaskState
    attempt: int
    outcome: Json
    outcome_reason: str | None
    deadline_ms: EpochMs | None
    subscribers: tuple[str, ...]
    created_ms: EpochMs
    updated_ms: EpochMs
    finished_ms: EpochMs | None
    tombstoned: bool


class RunTasksView(NamedTuple):
    """A page of the tasks of a run, newest first, at most a listing's limit (`next_cursor` reads
    the next page, None on the last; `truncated` says the same as a boolean)."""

    scope_id: str
    tasks: tuple[TaskView, ...]
    truncated: bool
    next_cursor: str | None


class SubmittedTaskView(NamedTuple):
    """A submit's answer: the task as `TaskView` shows it, then whether this submit `created` it
    and whether it was a `replay` of the key's existing task (always the opposite)."""

    id: str
    task_key: str
    scope_id: str
    mailbox_id: str
    message_id: str
    state: TaskState
    attempt: int
    outcome: Json
    outcome_reason: str | None
    deadline_ms: EpochMs | None
    subscribers: tuple[str, ...]
    created_ms: EpochMs
    updated_ms: EpochMs
    finished_ms: EpochMs | None
    tombstoned: bool
    created: bool
    replay: bool


class TaskTable:
    """The tasks of one space, by id and by (scope, key).

    Two counts are kept as records are applied, for the space's caps (`caps.py`): `live`, the
    tasks not ended, and `outcome_bytes`, the bytes of the outcomes kept (until tombstoned).
    """

    __slots__ = ("_by_id", "_by_key", "_limits", "live", "outcome_bytes")

    def __init__(self, limits: Limits) -> None:
        self._by_id: dict[str, Task] = {}
        self._by_key: dict[tuple[str, str], Task] = {}
        self._limits = limits
        self.live = 0
        self.outcome_bytes = 0

    def __len__(self) -> int:
        return len(self._by_id)

    # -- reading --------------------------------------------------------------------------------

    def get(self, task_id: str) -> Task:
        task = self._by_id.get(task_id)
        if task is None:
            raise KernelError(NOT_FOUND, f"task {quote(task_id)} not found")
        return task

    def find(self, task_id: str) -> Task | None:
        return self._by_id.get(task_id)

    def by_key(self, scope_id: str, key: str) -> Task | None:
        return self._by_key.get((scope_id, key))

    def all(self) -> Iterator[Task]:
        return iter(self._by_id.values())

    def tombstone_due_ms(self, task: Task) -> int | None:
        """When a finished task is tombstoned; None while it runs."""
        if task.finished_ms is None:
            return None
        return task.finished_ms + self._limits.retention_s * 1000

    def view(self, task: Task, now_ms: int) -> TaskView:
        """The task view.

        A task past its retention is shown tombstoned even before the tombstone is recorded, so
        what a reader sees does not depend on when the supervisor got to it.
        """
        due_ms = self.tombstone_due_ms(task)
        tombstoned = task.tombstoned or (due_ms is not None and now_ms >= due_ms)
        assert not tombstoned or task.terminal, "only an ended task is tombstoned"
        return TaskView(
            task.id, task.key, task.scope_id, task.mailbox_id, task.message_id, task.state, task.attempt,
            None if tombstoned else task.outcome, task.reason, task.deadline_ms, tuple(task.subscribers),
            task.created_ms, task.updated_ms, task.finished_ms, tombstoned,
        )

    def submitted_view(self, task: Task, now_ms: int, created: bool) -> SubmittedTaskView:
        """A submit's answer: the task's view, and whether this submit created it."""
        return SubmittedTaskView(*self.view(task, now_ms), created, not created)

    # -- deciding -------------------------------------------------------------------------------

    @staticmethod
    def check_replay(task: Task, mailbox_id: str, digest: str) -> None:
        """A second submit of a key must be the same work: same mailbox, same input."""
        if task.mailbox_id != mailbox_id:
            raise KernelError(
                IDEMPOTENCY_CONFLICT,
                f"task key {quote(task.key)} is already used in this scope by task {task.id} "
                f"of another mailbox ({task.mailbox_id})",
            )
        if task.input_hash != digest:
            raise KernelError(
                IDEMPOTENCY_CONFLICT,
                f"task key {quote(task.key)} is already used in this scope by task {task.id} "
                "with a different input; use a new key for different work",
            )

    def decide_create(
        self,
        task_id: str,
        key: str,
        scope_id: str,
        mailbox_id: str,
        message_id: str,
        task_input: Any,
        digest: str,
        deadline_ms: int | None,
        subscriber_id: str | None,
        now_ms: int,
    ) -> Record:
        if self.live >= self._limits.space_tasks_max:
            raise full(f"space holds {self.live} tasks not ended", "space_tasks_max")
        if task_id in self._by_id:  # an id source collision: the caller draws another id
            raise KernelError(CONFLICT, f"task id {task_id} is taken")
        assert (scope_id, key) not in self._by_key, "one task per (scope, key): a submit of a known key answers its task"
        return {
            "type": TASK_CREATED,
            "id": task_id,
            "task_key": key,
            "scope_id": scope_id,
            "mailbox_id": mailbox_id,
            "message_id": message_id,
            "input": task_input,
            "input_hash": digest,
            "deadline_ms": deadline_ms,
            "subscriber_id": subscriber_id,
            "at_ms": now_ms,
        }

    def decide_join(self, task: Task, subscriber_id: str, scope_id: str, now_ms: int) -> Record | None:
        """Subscribing twice is harmless: None when `subscriber_id` is already there."""
        if subscriber_id in task.subscribers:
            return None
        if len(task.subscribers) >= self._limits.subscribers_max:
            raise full(f"task {task.id} has {len(task.subscribers)} subscribers", "subscribers_max")
        assert task.id in self._by_id, "a subscriber joins a task the table holds"
        return {
            "type": TASK_JOINED,
            "task_id": task.id,
            "subscriber_id": subscriber_id,
            "scope_id": scope_id,
            "at_ms": now_ms,
        }

    @staticmethod
    def decide_detach(task: Task, subscriber_id: str, now_ms: int) -> Record | None:
        if subscriber_id not in task.subscribers:
            return None
        assert task.subscribers, "a detach leaves a subscriber that is there"
        return {"type": TASK_DETACHED, "task_id": task.id, "subscriber_id": subscriber_id, "at_ms": now_ms}

    @staticmethod
    def decide_end(task: Task, state: str, reason: str, now_ms: int) -> Record | None:
        """End a task that has not ended: CANCELLED or EXPIRED. Cancelling again is harmless.

        Cancelling a task that ended another way is CONFLICT: its one outcome is recorded.
        """
        if task.state == state:
            return None
        if task.terminal:
            raise KernelError(
                CONFLICT, f"task {task.id} already ended {task.state.lower()}; its outcome does not change"
            )
        # Paired with `apply_ended`: one recorded result; the server ends a task only this way.
        assert state in (CANCELLED, EXPIRED) and not task.terminal, "a task ends once"
        return {"type": TASK_ENDED, "task_id": task.id, "state": state, "reason": reason, "at_ms": now_ms}

    def decide_tombstone(self, task: Task, now_ms: int) -> Record | None:
        due_ms = self.tombstone_due_ms(task)
        if task.tombstoned or due_ms is None or now_ms < due_ms:
            return None
        assert task.terminal, "only an ended task is tombstoned (its outcome is let go)"
        return {"type": TASK_TOMBSTONED, "task_id": task.id, "at_ms": now_ms}

    # -- images ---------------------------------------------------------------------------------

    def image(self) -> Iterator[Record]:
        """Records that rebuild this table exactly through `apply_image` (inputs live with the messages)."""
        for task in self._by_id.values():
            yield {
                "type": TASK_IMAGE,
                "id": task.id,
                "task_key": task.key,
                "scope_id": task.scope_id,
                "mailbox_id": task.mailbox_id,
                "message_id": task.message_id,
                "input_hash": task.input_hash,
                "state": task.state,
                "attempt": task.attempt,
                "outcome": task.outcome,
                "reason": task.reason,
                "deadline_ms": task.deadline_ms,
                "subscribers": [[subscriber, scope] for subscriber, scope in task.subscribers.items()],
                "created_ms": task.created_ms,
                "updated_ms": task.updated_ms,
                "finished_ms": task.finished_ms,
                "tombstoned": task.tombstoned,
                "at_ms": task.updated_ms,
            }

    def apply_image(self, record: Record) -> Task:
        task = self._add(record, record["created_ms"])
        task.state = record["state"]
        task.attempt = record["attempt"]
        task.outcome = record["outcome"]
        task.reason = record["reason"]
        task.subscribers = {subscriber: scope for subscriber, scope in record["subscribers"]}
        task.updated_ms = record["updated_ms"]
        task.finished_ms = record["finished_ms"]
        task.tombstoned = record["tombstoned"]
        if task.terminal:
            self.live -= 1
        self.outcome_bytes += value_bytes(task.outcome)
        return task

    def _add(self, record: Record, created_ms: int) -> Task:
        """A new task from a `task.created` or `task.image` record, indexed by id and by key."""
        task = Task(
            record["id"],
            record["task_key"],
            record["scope_id"],
            record["mailbox_id"],
            record["message_id"],
            record["input_hash"],
            record["deadline_ms"],
            created_ms,
        )
        self._by_id[task.id] = task
        self._by_key[(task.scope_id, task.key)] = task
        self.live += 1
        return task

    # -- applying -------------------------------------------------------------------------------

    def apply_created(self, record: Record) -> Task:
        task = self._add(record, record["at_ms"])
        if record["subscriber_id"] is not None:
            task.subscribers[record["subscriber_id"]] = record["scope_id"]
        return task

    def apply_joined(self, record: Record) -> Task:
        task = self._by_id[record["task_id"]]
        task.subscribers[record["subscriber_id"]] = record["scope_id"]
        task.updated_ms = record["at_ms"]
        return task

    def apply_detached(self, record: Record) -> Task:
        task = self._by_id[record["task_id"]]
        task.subscribers.pop(record["subscriber_id"], None)
        task.updated_ms = record["at_ms"]
        return task

    def apply_running(self, task_id: str, attempt: int, at_ms: int) -> Task:
        task = self._by_id[task_id]
        assert not task.terminal, f"task {task_id} delivered after it ended"
        task.state = RUNNING
        task.attempt = attempt
        task.updated_ms = at_ms
        return task

    def apply_queued(self, task_id: str, at_ms: int) -> Task:
        task = self._by_id[task_id]
        assert not task.terminal, f"task {task_id} requeued after it ended"
        task.state = QUEUED
        task.updated_ms = at_ms
        return task

    def apply_ended(self, task_id: str, state: str, outcome: Any, reason: str | None, at_ms: int) -> Task:
        """The one terminal change of a task."""
        task = self._by_id[task_id]
        assert not task.terminal, f"task {task_id} ended twice"
        assert state in TERMINAL
        task.state = state
        task.outcome = outcome
        task.reason = reason
        task.updated_ms = at_ms
        task.finished_ms = at_ms
        self.live -= 1
        self.outcome_bytes += value_bytes(outcome)
        return task

    def drop_scopes(self, scope_ids: frozenset[str]) -> None:
        """Ended runs removed (`runs.py`): their tasks, all ended, leave with them (one pass)."""
        gone = [task for task in self._by_id.values() if task.scope_id in scope_ids]
        for task in gone:
            assert task.terminal, f"task {task.id} of a removed run has not ended"
            del self._by_id[task.id]
            del self._by_key[(task.scope_id, task.key)]
            self.outcome_bytes -= value_bytes(task.outcome)

    def apply_tombstoned(self, record: Record) -> Task:
        task = self._by_id[record["task_id"]]
        task.tombstoned = True
        self.outcome_bytes -= value_bytes(task.outcome)
        task.outcome = None
        return task
