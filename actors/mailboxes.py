"""Mailboxes: the named work queues of a space.

A mailbox has a name unique in its space, a delivery `mode`, an optional `backlogLimit` and the
number of deliveries a message may have (`maxAttempts`). Only the `WORK` mode (competing
consumers: each message goes to one receiver at a time) is implemented; any other mode is refused
rather than silently given WORK semantics.

The mailbox also carries the counts its listing shows. They are kept by the message table at
every state change of a message (`messages.py`), so they are exact and replay keeps them exact.
Messages themselves live in one queue per (mailbox, scope): a mailbox is shared by every run of
the space, and each run sees only its own messages.

Pure: no IO, no clock reads.
"""

from __future__ import annotations

from typing import Iterator

from .errors import CONFLICT, NOT_FOUND, VALIDATION_FAILED, KernelError, quote
from .limits import Limits
from .timestamps import format_ms

__all__ = ["Mailbox", "MailboxTable", "WORK", "MODES"]

WORK = "WORK"
MODES = (WORK,)


class Mailbox:
    __slots__ = (
        "id",
        "name",
        "mode",
        "backlog_limit",
        "max_attempts",
        "created_ms",
        # Counts of this mailbox's messages, all scopes together.
        "queued",  # waiting to be delivered, visible now
        "delayed",  # waiting out a retry backoff
        "leased",  # delivered, lease not yet settled
        "dead",  # dead letters still kept
    )

    def __init__(
        self,
        mailbox_id: str,
        name: str,
        mode: str,
        backlog_limit: int | None,
        max_attempts: int,
        created_ms: int,
    ) -> None:
        self.id = mailbox_id
        self.name = name
        self.mode = mode
        self.backlog_limit = backlog_limit
        self.max_attempts = max_attempts
        self.created_ms = created_ms
        self.queued = 0
        self.delayed = 0
        self.leased = 0
        self.dead = 0

    @property
    def backlog(self) -> int:
        """Messages not yet settled: what `backlogLimit` bounds."""
        return self.queued + self.delayed + self.leased


class MailboxTable:
    """The mailboxes of one space, by id and by name."""

    __slots__ = ("_by_id", "_by_name", "_limits")

    def __init__(self, limits: Limits) -> None:
        self._by_id: dict[str, Mailbox] = {}
        self._by_name: dict[str, Mailbox] = {}
        self._limits = limits

    def __len__(self) -> int:
        return len(self._by_id)

    def get(self, mailbox_id: str) -> Mailbox:
        mailbox = self._by_id.get(mailbox_id)
        if mailbox is None:
            raise KernelError(NOT_FOUND, f"mailbox {quote(mailbox_id)} not found")
        return mailbox

    def find(self, mailbox_id: str) -> Mailbox | None:
        return self._by_id.get(mailbox_id)

    def by_name(self, name: str) -> Mailbox | None:
        return self._by_name.get(name)

    def all(self) -> Iterator[Mailbox]:
        """In creation order."""
        return iter(self._by_id.values())

    @staticmethod
    def view(mailbox: Mailbox) -> dict:
        return {
            "id": mailbox.id,
            "name": mailbox.name,
            "mode": mailbox.mode,
            "backlogLimit": mailbox.backlog_limit,
            "maxAttempts": mailbox.max_attempts,
            "backlog": mailbox.backlog,
            "counts": {
                "queued": mailbox.queued,
                "delayed": mailbox.delayed,
                "leased": mailbox.leased,
                "deadLetters": mailbox.dead,
            },
            "createdAt": format_ms(mailbox.created_ms),
        }

    # -- deciding -------------------------------------------------------------------------------

    def decide_create(
        self,
        mailbox_id: str,
        name: str,
        mode: str | None,
        backlog_limit: int | None,
        max_attempts: int | None,
        now_ms: int,
    ) -> dict:
        """The `mailbox.created` record, or a refusal.

        A name that exists is CONFLICT whatever the settings: the official client's `ensure` then
        lists the mailboxes and compares the mode itself.
        """
        limits = self._limits
        # The mode, backlogLimit and maxAttempts were checked with the command (`CreateMailbox`).
        stored_mode = WORK if mode is None else mode.upper()
        assert stored_mode in MODES, stored_mode
        attempts = limits.attempts_max_default if max_attempts is None else max_attempts
        if name in self._by_name:
            raise KernelError(CONFLICT, f"a mailbox named {quote(name)} already exists")
        if len(self._by_id) >= limits.mailboxes_max:
            raise KernelError(
                VALIDATION_FAILED, f"a space holds at most {limits.mailboxes_max} mailboxes"
            )
        if mailbox_id in self._by_id:  # an id source collision: the caller draws another id
            raise KernelError(CONFLICT, f"mailbox id {mailbox_id} is taken")
        return {
            "type": "mailbox.created",
            "id": mailbox_id,
            "name": name,
            "mode": stored_mode,
            "backlog_limit": backlog_limit,
            "max_attempts": attempts,
            "at_ms": now_ms,
        }

    # -- images ---------------------------------------------------------------------------------

    def image(self) -> Iterator[dict]:
        """Records that rebuild this table through `apply_created`, in creation order.

        The counts are not imaged: the message table rebuilds them as its messages come back.
        """
        for mailbox in self._by_id.values():
            yield {
                "type": "mailbox.image",
                "id": mailbox.id,
                "name": mailbox.name,
                "mode": mailbox.mode,
                "backlog_limit": mailbox.backlog_limit,
                "max_attempts": mailbox.max_attempts,
                "at_ms": mailbox.created_ms,
            }

    # -- applying -------------------------------------------------------------------------------

    def apply_created(self, record: dict) -> Mailbox:
        mailbox = Mailbox(
            record["id"],
            record["name"],
            record["mode"],
            record["backlog_limit"],
            record["max_attempts"],
            record["at_ms"],
        )
        self._by_id[mailbox.id] = mailbox
        self._by_name[mailbox.name] = mailbox
        return mailbox
