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
    "MailboxRequirements",
    "MailboxRow",
    "MessageView",
    "AcquireAttempt",
    "ClaimView",
    "HeldClaim",
    "ClaimsPage",
    "TasksPage",
    "DeadLetter",
    "DeadLetterPage",
    "RequeueResult",
    "DeleteResult",
    "PurgeResult",
]

TaskState = Literal["QUEUED", "RUNNING", "SUCCEEDED", "FAILED", "CANCELLED", "EXPIRED"]
"""A task's state: waiting, under way, or one of its four ends (`runstate.tasks.TERMINAL_STATES`)."""


class TaskView(TypedDict):
    """`ticket.status()`: one shared task.

    `id` and `taskId` are its id, `taskKey` the key it was submitted under, `scopeId` its run,
    `mailboxId` its queue and `messageId` the message that carries it; `state` and `attempt`
    (deliveries so far) say where it is; `outcome` is the recorded result once it `SUCCEEDED`,
    `outcomeReason` why it ended otherwise; `deadline` (ISO 8601) makes it `EXPIRED` when passed;
    `subscribers` are the callers interested in it; `createdAt`, `updatedAt` and `finishedAt` are
    ISO 8601 times; `tombstoned` is true once its result's retention ran out (`outcome` None)."""

    id: str
    taskId: str
    taskKey: str
    scopeId: str
    mailboxId: str
    messageId: str
    state: TaskState
    attempt: int
    outcome: Any
    outcomeReason: str | None
    deadline: str | None
    subscribers: list[str]
    createdAt: str
    updatedAt: str
    finishedAt: str | None
    tombstoned: bool


class TaskResult(TypedDict):
    """`ticket.result()`: how a task ended, its `state` (`outcome` is the recorded result,
    `reason` why not).

    `tombstoned` is there, true, once the result's retention ran out: `outcome` is then None
    because the result is no longer kept, not because the task recorded none."""

    state: TaskState
    outcome: Any
    reason: str | None
    tombstoned: NotRequired[bool]


class ScopeView(TypedDict):
    """`scope.status()`: a run.

    `id`, its `name` (None for an unnamed run), `parentId` (None for a root run), `deadline` (ISO
    8601, or None), `childLimit` (the most child runs it may have, None for the default) and
    `children` (how many it has); `storedState` is its own state (`ACTIVE`, `CANCELLED`,
    `COMPLETED`, `EXPIRED`) and `effective` the state it acts in, an ancestor's end included;
    `createdAt` and `endedAt` are ISO 8601 times."""

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
    """A queue's messages by state: `queued` (ready), `delayed` (backing off before another try),
    `leased` (held by a worker now) and `deadLetters` (ended without a completion)."""

    queued: int
    delayed: int
    leased: int
    deadLetters: int


class MailboxRequirements(TypedDict):
    """A queue's default requirements, by id, for its tasks that name none: `pools`
    (`{"permitId", "units"}`), `quotas` (`{"allowanceId", "units"}`) and `budgets`
    (`{"budgetId", "reserveMinor"}`, minor units as a string of digits)."""

    pools: list[dict[str, Any]]
    quotas: list[dict[str, Any]]
    budgets: list[dict[str, Any]]


class MailboxRow(TypedDict):
    """`rs.mailboxes.ensure()` and `rs.mailboxes.list()`: one queue of the space.

    `id`, `name`, `mode` (`WORK`, the one mode served), `backlogLimit` (the most messages
    waiting, None for the server's default), `maxAttempts` (deliveries before a task fails),
    `requirements` (its tasks' default requirements, None if it has none), `backlog` (messages
    not yet settled), `counts` (its messages by state) and `createdAt`."""

    id: str
    name: str
    mode: str
    backlogLimit: int | None
    maxAttempts: int
    requirements: MailboxRequirements | None
    backlog: int
    counts: MailboxCounts
    createdAt: str


class MessageView(TypedDict):
    """`mailbox.send()`: the message sent, and `replay` true when `work_key` returned an earlier one.

    `id` and `messageId` are its id, `mailboxId` and `scopeId` where it went, `workKey` the key it
    was sent under (or None); `state` where it is now (None once it is no longer kept);
    `deduplicated` is `replay` again, under the name the official client reads."""

    id: str
    messageId: str
    mailboxId: str
    scopeId: str
    workKey: str | None
    state: str | None
    replay: bool
    deduplicated: bool


class AcquireAttempt(TypedDict):
    """`claim.try_acquire()`: `{"kind": "acquired", "lease": lease}` or `{"kind": "busy"}`.

    `kind` says which; `lease` (a `ClaimLease`) is there when it is `acquired`."""

    kind: Literal["acquired", "busy"]
    lease: NotRequired["ClaimLease"]


class ClaimView(TypedDict):
    """`claim.force_release()`: the claim as it was, its token withheld.

    `key`, `scopeId`, `token` (None here), `generation`, `holder` and `holderSession` (who held
    it), `leaseSeconds`, `leaseExpiresAt`, `acquiredAt`; `released`, `releasedAt`, `forced` (true
    for an operator's release), its `reason` and `by` (the key that forced it)."""

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


class HeldClaim(TypedDict):
    """One claim held in a run, as `run.claims()` lists it (its token is never listed).

    `key`, `scopeId`, `generation`, who holds it (`holder`, `holderSession`), `leaseSeconds`,
    when its lease ends unless renewed (`leaseExpiresAt`) and when it was taken (`acquiredAt`)."""

    key: str
    scopeId: str
    generation: int
    holder: str | None
    holderSession: str | None
    leaseSeconds: int
    leaseExpiresAt: str
    acquiredAt: str


class ClaimsPage(TypedDict):
    """`run.claims()`: a page of the `claims` held in the run `scopeId` now, in the order of their
    keys, at most the `limit` asked; `nextCursor` reads the next page (None on the last), and
    `truncated` is true exactly when it is not None."""

    scopeId: str
    claims: list[HeldClaim]
    truncated: bool
    nextCursor: str | None


class TasksPage(TypedDict):
    """`run.tasks()`: a page of the `tasks` of the run `scopeId`, newest first, at most the
    `limit` asked; `nextCursor` reads the next, older ones (None on the last page), and
    `truncated` is true exactly when it is not None."""

    scopeId: str
    tasks: list[TaskView]
    truncated: bool
    nextCursor: str | None


class DeadLetter(TypedDict):
    """One dead letter: a message whose deliveries ended without a completion, with its payload.

    The fields of `MessageView` (`id`, `mailboxId`, `scopeId`, `taskId`, `state`, `attempt`,
    `workKey`, `deadline`, `createdAt`, `finishedAt`, `reason`: why it was dead-lettered) and its
    `payload`."""

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
    """`rs.mailboxes.dead_letters()`: a page, newest first; `nextCursor` None on the last page.

    `deadLetters` on this page, `total` in the mailbox, `matched` by the filters, `truncated` when
    the server stopped counting at its limit."""

    deadLetters: list[DeadLetter]
    total: int
    matched: int
    truncated: bool
    nextCursor: str | None


class RequeueResult(TypedDict):
    """`rs.mailboxes.requeue_dead_letters()`: counts, and each old id's new message id.

    `matched` by the request, `requeued` as new messages, `skipped` by reason, `remaining` dead
    letters after it, `dryRun` as asked, and `requeuedAs` (old id -> new message id)."""

    matched: int
    requeued: int
    skipped: dict[str, int]
    remaining: int
    dryRun: bool
    requeuedAs: dict[str, str]


class DeleteResult(TypedDict):
    """`rs.mailboxes.delete_dead_letters()`: `matched` by the request, `deleted`, `remaining`
    after it, `dryRun` as asked, and the `deletedIds`."""

    matched: int
    deleted: int
    remaining: int
    dryRun: bool
    deletedIds: list[str]


class PurgeResult(TypedDict):
    """`rs.mailboxes.purge()`: messages `matched`, `purged` (their tasks end `CANCELLED`),
    `remaining` after it, and `dryRun` as asked."""

    matched: int
    purged: int
    remaining: int
    dryRun: bool
