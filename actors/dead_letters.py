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
`dryRun` nothing changes and the answer says what would.

The cursor of a listing names the last dead letter of a page by when it died and its enqueue
number (`finished_ms`-`seq`): the order is newest first by that pair, so a page continues exactly
where the last one ended whatever died or was acted on in between.

Pure: no IO, no clock reads.
"""

from __future__ import annotations

import heapq
from typing import TYPE_CHECKING, Iterable, NamedTuple

from .errors import NOT_FOUND, VALIDATION_FAILED, KernelError, quote
from .messages import DEAD, Message
from .scopes import ACTIVE

if TYPE_CHECKING:
    from .messages import MessageTable
    from .scopes import ScopeTree

__all__ = [
    "DeadLetterFilter", "ACTION_MAX", "LIST_LIMIT_MAX", "LIST_LIMIT_DEFAULT", "AGE_S_MAX", "SKIP_REASONS", "page",
    "select", "parse_cursor", "requeue_skip", "DEAD_LETTER_RECORDS", "DEAD_LETTERS_DELETED",
    "DEAD_LETTERS_REQUEUED",
]

# The record types this module decides and applies (the journal's spelling of each).
DEAD_LETTERS_DELETED = "dead_letters.deleted"
DEAD_LETTERS_REQUEUED = "dead_letters.requeued"

# Dead letters one request requeues, deletes or purges at most (oldest first).
ACTION_MAX = 1000
# A listing's page: at most this many, this many when it names no limit.
LIST_LIMIT_MAX = 1000
LIST_LIMIT_DEFAULT = 100
# The largest age a filter may name, in seconds (ten years: past any retention).
AGE_S_MAX = 10 * 366 * 86400
# Why a dead letter matched by a requeue was not requeued (the keys of the answer's `skipped`).
SKIP_REASONS = ("task", "runEnded", "deadlinePassed")

DEAD_LETTER_RECORDS: dict[str, tuple[str, ...]] = {
    # Old ids, in order, and the new message each became.
    DEAD_LETTERS_REQUEUED: ("mailbox_id", "message_ids", "new_ids", "at_ms", "by?"),
    DEAD_LETTERS_DELETED: ("mailbox_id", "message_ids", "at_ms", "by?"),
}


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
    messages: "MessageTable", mailbox_id: str, where: DeadLetterFilter, now_ms: int, cursor: str | None, limit: int
) -> dict:
    """A page of the mailbox's dead letters that match, newest first, with their payloads.

    `total`: dead letters kept in the mailbox; `matched`: those the filter matches (all pages);
    `nextCursor`: the cursor of the next page, or None when this one reached the end.
    """
    letters = messages.dead_letters(mailbox_id)
    after = None if cursor is None else parse_cursor(cursor)
    matched = [m for m in letters if where.matches(m, now_ms)] if not where.empty else letters
    candidates: Iterable[Message] = matched if after is None else (m for m in matched if _order(m) < after)
    shown = heapq.nlargest(limit + 1, candidates, key=_order)
    more = len(shown) > limit
    shown = shown[:limit]
    return {
        "deadLetters": [messages.view(message, payload=True) for message in shown],
        "total": len(letters),
        "matched": len(matched),
        "truncated": more,
        "nextCursor": "%d-%d" % _order(shown[-1]) if more else None,
    }


def select(
    messages: "MessageTable", mailbox_id: str, message_ids: list[str] | None, where: DeadLetterFilter, now_ms: int
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


def requeue_skip(message: Message, scopes: "ScopeTree", now_ms: int) -> str | None:
    """Why a dead letter cannot go back on its queue (a key of `SKIP_REASONS`), or None."""
    if message.task_id is not None:
        return "task"
    if message.scope_id not in scopes or scopes.effective(scopes.get(message.scope_id), now_ms) != ACTIVE:
        return "runEnded"
    if message.past_deadline(now_ms):
        return "deadlinePassed"
    return None

