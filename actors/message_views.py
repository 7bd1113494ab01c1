"""A message's typed views (`messages.py`'s table answers with them): a leaf module beside it.

Frozen dataclasses (read by the console, the dead-letter listings and the tests, not on the path of
a delivery): each variant extends `MessageView` with what its state adds. The shell names and
formats them on the wire (`server/wire/messages.py`).
"""

from __future__ import annotations

import dataclasses
from typing import Literal

from .shapes import EpochMs, Json

__all__ = ["MessageState", "MessageView", "LeasedMessageView", "DelayedMessageView", "DeadLetterView"]

MessageState = Literal["QUEUED", "DELAYED", "LEASED", "COMPLETED", "DEAD", "DROPPED"]


@dataclasses.dataclass(frozen=True, slots=True)
class MessageView:
    """A message as a reader is shown it: where it is (`state`, `attempt`: deliveries so far), the
    task it carries (`task_id`, or None), its work key and deadline, when it was sent and ended,
    and why it ended where it did not complete (`reason`)."""

    id: str
    mailbox_id: str
    scope_id: str
    task_id: str | None
    state: MessageState
    attempt: int
    work_key: str | None
    deadline_ms: EpochMs | None
    created_ms: EpochMs
    finished_ms: EpochMs | None
    reason: str | None


@dataclasses.dataclass(frozen=True, slots=True)
class LeasedMessageView(MessageView):
    """A LEASED message: as `MessageView`, then its lease's end and who holds it."""

    expires_ms: EpochMs
    holder: str


@dataclasses.dataclass(frozen=True, slots=True)
class DelayedMessageView(MessageView):
    """A DELAYED message (retried after a backoff): as `MessageView`, then when it is visible again."""

    visible_ms: EpochMs


@dataclasses.dataclass(frozen=True, slots=True)
class DeadLetterView(MessageView):
    """A DEAD message as its mailbox's dead letters list it: as `MessageView`, then its payload."""

    payload: Json
