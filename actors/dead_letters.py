"""Dead letters an operator can act on: listed page by page, filtered, requeued or deleted.

A dead letter is a message whose deliveries ended without a completion (rejected, or its attempts
used up); it keeps its payload for `retention_s`, then is forgotten (`messages.py`). An operator
reads them newest first, a page at a time, and acts on one set of them: those named by id, or
those a filter matches (`DeadLetterFilter`: a reason that contains some text, an age), or all.

**Requeue** puts a dead letter back at the end of its queue as a new message: a new id (drawn with
the command), the same run, payload, work key and deadline, and a fresh count of attempts. A new
message rather than the old one brought back, as SQS's redrive does: the old message's deliveries
stay what they were (their attempt numbers never repeat), and the answer maps each old id to its
new one. What cannot go back is skipped and counted by why: a task's message (the task ended
FAILED, and a task's outcome never changes: submit the work again under a new key), a message
whose run has ended, or whose deadline has passed.

**Delete** forgets dead letters at once, as retention would later (their payload bytes are given
back to the space at once). A task whose message is deleted keeps its FAILED outcome.

One request acts on at most `ACTION_MAX` dead letters, oldest first, so one turn stays short; the
answer says how many matched and how many remain, and a caller repeats until none does. With
`dry_run` nothing changes and the answer says what would.

**Purge** (`PurgeMailbox`) ends a mailbox's messages waiting to be delivered, in every run or in one:
a task's is CANCELLED (reason `purged`, or `purged: <reason>`), a plain message is dropped; one
`mailbox.purged` record says who purged and how many, for the event log. These actions change
queues that have actors of their own, so they run on the mailbox's own actor (`mailbox_ops_actor`)
and poke the queues' actors so parked receivers look again. The declaration is `DEAD_LETTERS`.

The cursor of a listing names the last dead letter of a page by when it died and its enqueue
number (`finished_ms`-`seq`): the order is newest first by that pair, so a page continues exactly
where the last one ended whatever died or was acted on in between.

Pure: no IO, no clock reads.
"""

from __future__ import annotations

import dataclasses
import heapq
from typing import Any, Iterable, NamedTuple

from .actor_keys import ActorKey, mailbox_ops_actor, queue_actor
from .errors import NOT_FOUND, VALIDATION_FAILED, KernelError, quote
from .fields import BOOLEAN, INTEGER, TEXT, TEXTS, body, caller, drawn, path
from .limits import Limits
from .messages import DEAD, DeadLetterView, Message, MessageTable
from .outcome import Outcome, Space, State
from .events import Change
from .primitive import Command, Primitive, command, operation, reason_field, record_type
from .scopes import ACTIVE, ScopeTree
from .task_commands import task_timers
from .tasks import CANCELLED, TASK_ENDED
from .shapes import Record

__all__ = [
    "DeadLetterFilter", "ACTION_MAX", "LIST_LIMIT_MAX", "LIST_LIMIT_DEFAULT", "AGE_S_MAX", "SKIP_REASONS", "page",
    "select", "parse_cursor", "requeue_skip", "DEAD_LETTERS_DELETED", "DEAD_LETTERS_REQUEUED", "MAILBOX_PURGED",
    "DeadLetterAction", "RequeueDeadLetters", "DeleteDeadLetters", "PurgeMailbox", "DEAD_LETTERS",
    "DeadLetterPage", "RequeueSkipped", "RequeuedView", "DeletedView", "PurgedView",
]

# The record types this module decides and applies (the journal's spelling of each).
DEAD_LETTERS_DELETED = record_type("dead_letters.deleted")
DEAD_LETTERS_REQUEUED = record_type("dead_letters.requeued")
MAILBOX_PURGED = record_type("mailbox.purged")

# The reason of what an operator's purge ended (then ": " and the reason the operator gave, if any).
REASON_PURGED = "purged"

# Dead letters one request requeues, deletes or purges at most (oldest first).
ACTION_MAX = 1000
# A listing's page: at most this many, this many when it names no limit.
LIST_LIMIT_MAX = 1000
LIST_LIMIT_DEFAULT = 100
# The largest age a filter may name, in seconds (ten years: past any retention).
AGE_S_MAX = 10 * 366 * 86400
# Why a dead letter matched by a requeue was not requeued (the fields of `RequeueSkipped`).
SKIP_REASONS = ("task", "run_ended", "deadline_passed")


# -- views -------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class DeadLetterPage:
    """A page of a mailbox's dead letters, newest first: `total` kept in the mailbox, `matched` by
    the filter (on every page), `truncated` when more pages follow, and `next_cursor` the cursor
    of the next page (None on the last)."""

    dead_letters: tuple[DeadLetterView, ...]
    total: int
    matched: int
    truncated: bool
    next_cursor: str | None


@dataclasses.dataclass(frozen=True, slots=True)
class RequeueSkipped:
    """How many dead letters a requeue matched but left, by why (`SKIP_REASONS`)."""

    task: int
    run_ended: int
    deadline_passed: int


@dataclasses.dataclass(frozen=True, slots=True)
class RequeuedView:
    """A requeue's answer: dead letters `matched`, `requeued` as new messages, `skipped` by why,
    `remaining` to act on, whether it was a `dry_run`, and each old id's new message id
    (`requeued_as`, empty on a dry run)."""

    matched: int
    requeued: int
    skipped: RequeueSkipped
    remaining: int
    dry_run: bool
    requeued_as: dict[str, str]


@dataclasses.dataclass(frozen=True, slots=True)
class DeletedView:
    """A delete's answer: dead letters `matched`, `deleted`, `remaining` to act on, whether it was a
    `dry_run`, and the ids it deleted (`deleted_ids`, empty on a dry run)."""

    matched: int
    deleted: int
    remaining: int
    dry_run: bool
    deleted_ids: tuple[str, ...]


@dataclasses.dataclass(frozen=True, slots=True)
class PurgedView:
    """A purge's answer: waiting messages `matched`, `purged`, `remaining` to purge, and whether it
    was a `dry_run`."""

    matched: int
    purged: int
    remaining: int
    dry_run: bool


class DeadLetterFilter(NamedTuple):
    """Which dead letters: their reason contains `reason`; they died at least `older_than_s` ago,
    and at most `newer_than_s` ago (None: no bound)."""

    reason: str | None = None
    older_than_s: int | None = None
    newer_than_s: int | None = None

    @property
    def empty(self) -> bool:
        return self.reason is None and self.older_than_s is None and self.newer_than_s is None

    def matches(self, message: Message, now_ms: int) -> bool:
        if self.reason is not None and (message.reason is None or self.reason not in message.reason):
            return False
        died_ms = message.finished_ms or 0
        if self.older_than_s is not None and died_ms > now_ms - self.older_than_s * 1000:
            return False
        if self.newer_than_s is not None and died_ms < now_ms - self.newer_than_s * 1000:
            return False
        return True


def _order(message: Message) -> tuple[int, int]:
    """A dead letter's place: when it died, then its enqueue number (unique)."""
    return (message.finished_ms or 0, message.seq)


def parse_cursor(text: str) -> tuple[int, int]:
    """A listing's cursor (`finished_ms`-`seq`, as `page` gives it out), or VALIDATION_FAILED."""
    died, dash, seq = text.partition("-")
    if not dash or not (died.isascii() and died.isdigit() and seq.isascii() and seq.isdigit()) or len(text) > 40:
        raise KernelError(VALIDATION_FAILED, f"cursor {quote(text)} is not a dead-letter cursor this server gave out")
    return int(died), int(seq)


def page(
    messages: MessageTable, mailbox_id: str, where: DeadLetterFilter, now_ms: int, cursor: str | None, limit: int
) -> DeadLetterPage:
    """A page of the mailbox's dead letters that match, newest first, with their payloads."""
    letters = messages.dead_letters(mailbox_id)
    after = None if cursor is None else parse_cursor(cursor)
    matched = [m for m in letters if where.matches(m, now_ms)] if not where.empty else letters
    candidates: Iterable[Message] = matched if after is None else (m for m in matched if _order(m) < after)
    shown = heapq.nlargest(limit + 1, candidates, key=_order)
    more = len(shown) > limit
    shown = shown[:limit]
    assert len(shown) <= limit and len(matched) <= len(letters)
    return DeadLetterPage(
        tuple(messages.dead_letter_view(message) for message in shown), len(letters), len(matched), more,
        "%d-%d" % _order(shown[-1]) if more else None,
    )


def select(
    messages: MessageTable, mailbox_id: str, message_ids: list[str] | None, where: DeadLetterFilter, now_ms: int
) -> list[Message]:
    """The dead letters an action names, oldest first: by id (each must be a dead letter kept in
    this mailbox, else NOT_FOUND and nothing changes), or those `where` matches (all when empty)."""
    if message_ids is None:
        letters = messages.dead_letters(mailbox_id)
        return letters if where.empty else [m for m in letters if where.matches(m, now_ms)]
    chosen: dict[str, Message] = {}
    for message_id in message_ids:
        message = messages.find(message_id)
        if message is None or message.state != DEAD or message.mailbox_id != mailbox_id:
            raise KernelError(NOT_FOUND, f"message {quote(message_id)} is not a dead letter of mailbox {quote(mailbox_id)}")
        chosen[message_id] = message
    return sorted(chosen.values(), key=_order)


def requeue_skip(message: Message, scopes: ScopeTree, now_ms: int) -> str | None:
    """Why a dead letter cannot go back on its queue (a key of `SKIP_REASONS`), or None."""
    if message.task_id is not None:
        return "task"
    if message.scope_id not in scopes or scopes.effective(scopes.get(message.scope_id), now_ms) != ACTIVE:
        return "run_ended"
    if message.past_deadline(now_ms):
        return "deadline_passed"
    return None



# -- commands ----------------------------------------------------------------------------------


@command(base=True)
class DeadLetterAction(Command):
    """Act on a mailbox's dead letters: those named by `messageIds`, or those a filter matches
    (`reason`, `olderThanSeconds`, `newerThanSeconds`), or `all` of them; with `dryRun`, only say
    how many it would act on."""

    space: str = path("space")
    mailbox_id: str = path("mailbox_id")
    message_ids: list[str] | None = body("messageIds", TEXTS, required=False, items_max=ACTION_MAX)
    reason: str | None = body(
        "reason", TEXT, required=False, length_max="reason_len_max", description="dead letters whose reason contains this text"
    )
    older_than_s: int | None = body(
        "olderThanSeconds", INTEGER, required=False, minimum=0, maximum=AGE_S_MAX,
        description="dead letters that died at least this many seconds ago",
    )
    newer_than_s: int | None = body(
        "newerThanSeconds", INTEGER, required=False, minimum=0, maximum=AGE_S_MAX,
        description="dead letters that died at most this many seconds ago",
    )
    every: bool | None = body("all", BOOLEAN, required=False, description="every dead letter of the mailbox")
    dry_run: bool | None = body("dryRun", BOOLEAN, required=False, description="change nothing; answer what would change")
    by: str | None = caller()

    @property
    def where(self) -> DeadLetterFilter:
        return DeadLetterFilter(self.reason, self.older_than_s, self.newer_than_s)

    def actor(self, state: State) -> ActorKey:
        return mailbox_ops_actor(self.space, self.mailbox_id)

    def check(self, limits: Limits) -> None:
        chosen = [self.message_ids is not None, not self.where.empty, bool(self.every)]
        if sum(chosen) != 1:
            raise KernelError(
                VALIDATION_FAILED,
                "name the dead letters one way: messageIds, or a filter (reason, olderThanSeconds, newerThanSeconds), "
                "or all: true",
            )


@command
class RequeueDeadLetters(DeadLetterAction):
    # The new messages' ids: this, then "_" and their place in the request (0, 1, ...).
    id_base: str = drawn("ms_")


@command
class DeleteDeadLetters(DeadLetterAction):
    pass


@command
class PurgeMailbox(Command):
    """An operator's purge: the mailbox's messages waiting to be delivered (queued, or waiting out
    a retry's backoff) end now, in every run or in `scopeId`'s alone; a task's is CANCELLED, a
    plain message is dropped. Deliveries under way are left to finish. With `dryRun`, only say how
    many it would end."""

    space: str = path("space")
    mailbox_id: str = path("mailbox_id")
    scope_id: str | None = body("scopeId", required=False, description="only this run's messages")
    reason: str | None = reason_field("reason")
    dry_run: bool | None = body("dryRun", BOOLEAN, required=False, description="change nothing; answer what would change")
    by: str | None = caller()

    def actor(self, state: State) -> ActorKey:
        return mailbox_ops_actor(self.space, self.mailbox_id)


# -- transitions (of the space, on the queue part's helpers) ---------------------------------------


def requeue(space: Space, command: RequeueDeadLetters, now_ms: int) -> Outcome:
    """Put dead letters back on their queues as new messages, oldest first, as many as one
    request may and the mailbox's backlog takes; say how many matched, were skipped and remain."""
    work, messages = space.work, space.messages
    mailbox = space.mailboxes.get(command.mailbox_id)
    chosen = select(messages, mailbox.id, command.message_ids, command.where, now_ms)
    skipped = dict.fromkeys(SKIP_REASONS, 0)
    eligible = []
    for message in chosen:
        why = requeue_skip(message, space.scopes, now_ms)
        if why is None:
            eligible.append(message)
        else:
            skipped[why] += 1
    taken = eligible[: min(ACTION_MAX, work.backlog_room(mailbox))]
    assert len(chosen) == len(eligible) + sum(skipped.values())

    def answer(requeued_as: dict[str, str]) -> RequeuedView:
        return RequeuedView(
            len(chosen), len(taken), RequeueSkipped(**skipped), len(eligible) - len(taken), bool(command.dry_run), requeued_as
        )

    if eligible and not taken and not command.dry_run:
        work.check_backlog(mailbox)  # full: BACKLOG_FULL, as a send would be refused
    if command.dry_run or not taken:
        return Outcome(reply=answer({}))
    new_ids = [f"{command.id_base}_{index}" for index in range(len(taken))]
    for message_id in new_ids:
        messages.check_new_id(message_id)
    record: Record = {
        "type": DEAD_LETTERS_REQUEUED, "mailbox_id": mailbox.id, "message_ids": [m.id for m in taken],
        "new_ids": new_ids, "at_ms": now_ms,
    }
    if command.by is not None:
        record["by"] = command.by
    outcome = space.commit(Outcome(), record)
    scopes: dict[str, None] = {}
    for message_id in new_ids:
        message = messages.get(message_id)
        outcome.timers.extend(work.message_timers(message))
        scopes[message.scope_id] = None
    # Receivers parked on those queues look again (the new messages are deliverable now).
    outcome.pokes.extend(queue_actor(space.id, mailbox.id, scope_id) for scope_id in scopes)
    outcome.reply = answer(dict(zip(record["message_ids"], new_ids)))
    return outcome


def delete(space: Space, command: DeleteDeadLetters, now_ms: int) -> Outcome:
    """Forget dead letters at once, oldest first, as many as one request may."""
    mailbox = space.mailboxes.get(command.mailbox_id)
    chosen = select(space.messages, mailbox.id, command.message_ids, command.where, now_ms)
    taken = chosen[:ACTION_MAX]
    if command.dry_run or not taken:
        return Outcome(reply=DeletedView(len(chosen), len(taken), len(chosen) - len(taken), bool(command.dry_run), ()))
    record = {"type": DEAD_LETTERS_DELETED, "mailbox_id": mailbox.id, "message_ids": [m.id for m in taken], "at_ms": now_ms}
    if command.by is not None:
        record["by"] = command.by
    outcome = space.commit(Outcome(), record)
    outcome.reply = DeletedView(len(chosen), len(taken), len(chosen) - len(taken), False, tuple(m.id for m in taken))
    return outcome


def purge(space: Space, command: PurgeMailbox, now_ms: int) -> Outcome:
    """End the mailbox's waiting messages, oldest first, as many as one request may: a task's
    message CANCELS the task (reason `purged`, or `purged: <reason>`), a plain one is dropped."""
    tasks = space.tasks
    mailbox = space.mailboxes.get(command.mailbox_id)
    if command.scope_id is not None:
        space.scopes.get(command.scope_id)
    waiting = space.messages.waiting_in_mailbox(mailbox.id, command.scope_id)
    taken = waiting[:ACTION_MAX]
    reply = PurgedView(len(waiting), len(taken), len(waiting) - len(taken), bool(command.dry_run))
    if command.dry_run or not taken:
        return Outcome(reply=reply)
    reason = REASON_PURGED if not command.reason else f"{REASON_PURGED}: {command.reason}"
    marker = {"type": MAILBOX_PURGED, "mailbox_id": mailbox.id, "scope_id": command.scope_id, "count": len(taken), "at_ms": now_ms}
    if command.reason:
        marker["reason"] = command.reason
    ends = []
    for message in taken:
        if message.task_id is None:
            ends.append(space.messages.decide_drop(message, reason, now_ms))
            continue
        record = tasks.decide_end(tasks.get(message.task_id), CANCELLED, reason, now_ms)
        assert record is not None, "a task whose message waits has not ended"
        ends.append(record)
    if command.by is not None:
        marker["by"] = command.by
        for record in ends:
            if record["type"] == TASK_ENDED:
                record["by"] = command.by
    outcome = space.commit(Outcome(), marker, *ends)
    scopes: dict[str, None] = {}
    for message in taken:
        scopes[message.scope_id] = None
        if message.task_id is not None:
            outcome.timers.extend(task_timers(space.id, tasks, tasks.get(message.task_id)))
    # Callers waiting on those tasks (their queues' actors) look again.
    outcome.pokes.extend(queue_actor(space.id, mailbox.id, scope_id) for scope_id in scopes)
    outcome.reply = reply
    return outcome


def _action_event(kind: str) -> Any:
    """An operator's action on a mailbox's dead letters: one event for the whole set."""

    def derive(space: Space, record: Record) -> Change:
        ids = record["message_ids"]
        payload = {"mailboxId": record["mailbox_id"], "count": len(ids), "messageIds": list(ids)}
        if "new_ids" in record:
            payload["newIds"] = list(record["new_ids"])
        payload["by"] = record.get("by")
        return (kind, None, "mailbox", record["mailbox_id"], payload)

    return derive


def _purged_event(space: Space, r: Record) -> Change:
    payload = {"mailboxId": r["mailbox_id"], "scopeId": r["scope_id"], "count": r["count"], "reason": r.get("reason"), "by": r.get("by")}
    return ("mailbox.purged", r["scope_id"], "mailbox", r["mailbox_id"], payload)


DEAD_LETTERS = Primitive(
    "dead letters",
    commands={RequeueDeadLetters: ("", requeue), DeleteDeadLetters: ("", delete), PurgeMailbox: ("", purge)},
    records={
        # Old ids, in order, and the new message each became.
        DEAD_LETTERS_REQUEUED: ("mailbox_id", "message_ids", "new_ids", "at_ms", "by?"),
        DEAD_LETTERS_DELETED: ("mailbox_id", "message_ids", "at_ms", "by?"),
        # An operator's purge: who, how many; the ends it made follow it.
        MAILBOX_PURGED: ("mailbox_id", "scope_id", "count", "at_ms", "reason?", "by?"),
    },
    apply={
        DEAD_LETTERS_REQUEUED: ("messages", "apply_dead_requeued"),
        DEAD_LETTERS_DELETED: ("messages", "apply_dead_deleted"),
        # What a purge ended is in the records after this one; this one says who purged, for the log.
        MAILBOX_PURGED: ("", lambda space, record: None),
    },
    usage={
        DEAD_LETTERS_REQUEUED: operation("dead_letters.requeue"),
        DEAD_LETTERS_DELETED: operation("dead_letters.delete"),
        MAILBOX_PURGED: operation("mailboxes.purge"),
    },
    derive={
        DEAD_LETTERS_REQUEUED: _action_event("dead_letters.requeued"),
        DEAD_LETTERS_DELETED: _action_event("dead_letters.deleted"),
        MAILBOX_PURGED: _purged_event,
    },
    events={"dead_letters.requeued": None, "dead_letters.deleted": None, "mailbox.purged": None},
)
