"""The shapes of what the server answers, as `TypedDict`s, so an editor completes `view["state"]`.

These describe JSON: reading a key is a dictionary lookup, nothing is converted. Keys the server
may leave out are `NotRequired`; a server newer than this SDK may send more keys than these.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal, NotRequired, TypedDict

if TYPE_CHECKING:
    from .claims import ClaimLease

__all__ = [
    "TaskState",
    "TaskView",
    "TaskResult",
    "ScopeView",
    "MailboxCounts",
    "MailboxRow",
    "MessageView",
    "AcquireAttempt",
    "ClaimView",
    "DeadLetter",
    "DeadLetterPage",
    "RequeueResult",
    "DeleteResult",
    "PurgeResult",
]

TaskState = Literal["QUEUED", "RUNNING", "SUCCEEDED", "FAILED", "CANCELLED", "EXPIRED"]


class TaskView(TypedDict):
    """`ticket.status()`: one shared task."""

    id: str
    taskId: str
    taskKey: str
    scopeId: str
    mailboxId: str
    messageId: NotRequired[str | None]
    state: TaskState
    attempt: int
    outcome: Any
    outcomeReason: str | None
    deadline: str | None
    subscribers: list[str]
    createdAt: str
    updatedAt: str
    finishedAt: str | None
    tombstoned: NotRequired[bool]


class TaskResult(TypedDict):
    """`ticket.result()`: how a task ended (`outcome` is the recorded result, `reason` why not).

    `tombstoned` is there, true, once the result's retention ran out: `outcome` is then None
    because the result is no longer kept, not because the task recorded none."""

    state: TaskState
    outcome: Any
    reason: str | None
    tombstoned: NotRequired[bool]


class ScopeView(TypedDict):
    """`scope.status()`: a run."""

    id: str
    name: str | None
    parentId: str | None
    deadline: str | None
    childLimit: int | None
    children: int
    storedState: str
    effective: str
    createdAt: str
    endedAt: str | None


class MailboxCounts(TypedDict):
    queued: int
    delayed: int
    leased: int
    deadLetters: int


class MailboxRow(TypedDict):
    """`rs.mailboxes.ensure()` and `rs.mailboxes.list()`: one queue of the space."""

    id: str
    name: str
    mode: str
    backlogLimit: int | None
    maxAttempts: int
    backlog: NotRequired[int]
    counts: NotRequired[MailboxCounts]
    createdAt: str


class MessageView(TypedDict):
    """`mailbox.send()`: the message, and `replay` true when `work_key` returned an earlier one."""

    id: str
    mailboxId: str
    scopeId: str
    taskId: str | None
    state: str
    attempt: int
    workKey: str | None
    deadline: str | None
    createdAt: str
    finishedAt: str | None
    reason: str | None
    replay: bool
    leaseExpiresAt: NotRequired[str]
    holder: NotRequired[str]
    visibleAt: NotRequired[str]


class AcquireAttempt(TypedDict):
    """`claim.try_acquire()`: `{"kind": "acquired", "lease": lease}` or `{"kind": "busy"}`."""

    kind: Literal["acquired", "busy"]
    lease: NotRequired["ClaimLease"]


class ClaimView(TypedDict):
    """`claim.force_release()`: the claim as it was, its token withheld."""

    key: str
    scopeId: str
    token: str | None
    generation: int
    holder: str | None
    holderSession: str | None
    leaseSeconds: int
    leaseExpiresAt: str
    acquiredAt: str
    released: NotRequired[bool]
    releasedAt: NotRequired[str]
    forced: NotRequired[bool]
    reason: NotRequired[str | None]
    by: NotRequired[str | None]


class DeadLetter(TypedDict):
    """One dead letter: a message whose deliveries ended without a completion, with its payload."""

    id: str
    mailboxId: str
    scopeId: str
    taskId: str | None
    state: str
    attempt: int
    workKey: str | None
    deadline: str | None
    createdAt: str
    finishedAt: str | None
    reason: str | None
    payload: Any


class DeadLetterPage(TypedDict):
    """`rs.mailboxes.dead_letters()`: a page, newest first; `nextCursor` None on the last page."""

    deadLetters: list[DeadLetter]
    total: int
    matched: int
    truncated: bool
    nextCursor: str | None


class RequeueResult(TypedDict):
    """`rs.mailboxes.requeue_dead_letters()`: counts, and each old id's new message id."""

    matched: int
    requeued: int
    skipped: dict[str, int]
    remaining: int
    dryRun: bool
    requeuedAs: dict[str, str]


class DeleteResult(TypedDict):
    """`rs.mailboxes.delete_dead_letters()`."""

    matched: int
    deleted: int
    remaining: int
    dryRun: bool
    deletedIds: list[str]


class PurgeResult(TypedDict):
    """`rs.mailboxes.purge()`."""

    matched: int
    purged: int
    remaining: int
    dryRun: bool
