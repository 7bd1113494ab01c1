"""Reads: views straight from the state, without a turn.

A view may include a change whose record is not yet durable: the route that answers it first waits
for the records appended when it was made (`Kernel.settled`, wrapped around every read route in
`server/api.py`), so nobody is shown a change a crash could take back. A space nobody wrote to
reads as an empty one (`Kernel.space_view`): reading never makes a space.
"""

from __future__ import annotations

from .claims import ClaimView
from .mailboxes import MailboxView
from .tasks import TaskView
from .dead_letters import DeadLetterFilter, DeadLetterPage
from .dead_letters import page as dead_letter_page
from .scopes import ScopeView
from .kernel_reads import KernelReads

__all__ = ["scope", "claims_in_scope", "mailboxes", "mailbox", "dead_letters", "task"]


def scope(kernel: KernelReads, space: str, scope_id: str) -> ScopeView:
    state = kernel.space_view(space)
    return state.scopes.view(state.scopes.get(scope_id), kernel.clock.now_ms())


def claims_in_scope(kernel: KernelReads, space: str, scope_id: str) -> list[ClaimView]:
    """The claims of a scope whose leases have not ended (for inspection)."""
    state = kernel.space_view(space)
    state.scopes.get(scope_id)
    now_ms = kernel.clock.now_ms()
    return [state.claims.view(c) for c in state.claims.in_scope(scope_id) if c.held_at(now_ms)]


def mailboxes(kernel: KernelReads, space: str) -> list[MailboxView]:
    """Every mailbox of the space, in creation order (the client reads the list as complete)."""
    state = kernel.space_view(space)
    return [state.mailboxes.view(mailbox) for mailbox in state.mailboxes.all()]


def mailbox(kernel: KernelReads, space: str, mailbox_id: str) -> MailboxView:
    state = kernel.space_view(space)
    return state.mailboxes.view(state.mailboxes.get(mailbox_id))


def dead_letters(
    kernel: KernelReads, space: str, mailbox_id: str, limit: int, cursor: str | None = None, where: DeadLetterFilter = DeadLetterFilter()
) -> DeadLetterPage:
    """A page of the mailbox's dead letters (newest first, with their payloads) that `where`
    matches, after `cursor` (`dead_letters.page`)."""
    state = kernel.space_view(space)
    state.mailboxes.get(mailbox_id)
    return dead_letter_page(state.messages, mailbox_id, where, kernel.clock.now_ms(), cursor, limit)


def task(kernel: KernelReads, space: str, task_id: str) -> TaskView:
    state = kernel.space_view(space)
    return state.tasks.view(state.tasks.get(task_id), kernel.clock.now_ms())
