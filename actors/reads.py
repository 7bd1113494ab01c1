"""Reads: views straight from the state, without a turn.

A view may include a change whose record is not yet durable: the route that answers it first waits
for the records appended when it was made (`Kernel.settled`, wrapped around every read route in
`server/api.py`), so nobody is shown a change a crash could take back. A space nobody wrote to
reads as an empty one (`Kernel.space_view`): reading never makes a space.
"""

from __future__ import annotations

from . import paging
from .claims import Claim, ClaimView, RunClaimsView
from .mailboxes import MailboxView
from .tasks import RunTasksView, Task, TaskView
from .dead_letters import DeadLetterFilter, DeadLetterPage
from .dead_letters import page as dead_letter_page
from .scopes import Scope, ScopesView, ScopeView
from .kernel_reads import KernelReads

__all__ = ["scope", "scopes_page", "claims_in_scope", "claims_page", "tasks_page", "mailboxes", "mailbox", "dead_letters", "task"]


def scope(kernel: KernelReads, space: str, scope_id: str) -> ScopeView:
    state = kernel.space_view(space)
    return state.scopes.view(state.scopes.get(scope_id), kernel.clock.now_ms())


def _made(row: Scope | Task) -> tuple[int, str]:
    """A run's or a task's place in a newest-first listing (`paging.py`)."""
    return (row.created_ms, row.id)


def _claim_key(claim: Claim) -> str:
    return claim.key


def scopes_page(kernel: KernelReads, space: str, limit: int, cursor: str | None = None) -> ScopesView:
    """A page of the space's runs (every scope), newest first, past `cursor` (a page's `next_cursor`)."""
    after = None if cursor is None else paging.parse_created(cursor)
    state = kernel.space_view(space)
    now_ms = kernel.clock.now_ms()
    shown, place = paging.newest_first(state.scopes.all(), _made, after, limit)
    return ScopesView(
        tuple(state.scopes.view(scope, now_ms) for scope in shown), place is not None,
        None if place is None else paging.created_cursor(place),
    )


def claims_page(kernel: KernelReads, space: str, scope_id: str, limit: int, cursor: str | None = None) -> RunClaimsView:
    """A page of the claims held in a run, in the order of their keys, past `cursor`: a claim's
    key is its lasting place (its holder and acquisition change with each lease)."""
    after = None if cursor is None else paging.parse_key(cursor)
    state = kernel.space_view(space)
    state.scopes.get(scope_id)  # 404 for a run that does not exist
    now_ms = kernel.clock.now_ms()
    held = (claim for claim in state.claims.in_scope(scope_id) if claim.held_at(now_ms))
    shown, place = paging.by_key(held, _claim_key, after, limit)
    return RunClaimsView(
        scope_id, tuple(state.claims.view(claim) for claim in shown), place is not None,
        None if place is None else paging.key_cursor(place),
    )


def tasks_page(kernel: KernelReads, space: str, scope_id: str, limit: int, cursor: str | None = None) -> RunTasksView:
    """A page of a run's tasks, newest first, past `cursor` (a page's `next_cursor`)."""
    after = None if cursor is None else paging.parse_created(cursor)
    state = kernel.space_view(space)
    state.scopes.get(scope_id)  # 404 for a run that does not exist
    now_ms = kernel.clock.now_ms()
    shown, place = paging.newest_first((task for task in state.tasks.all() if task.scope_id == scope_id), _made, after, limit)
    return RunTasksView(
        scope_id, tuple(state.tasks.view(task, now_ms) for task in shown), place is not None,
        None if place is None else paging.created_cursor(place),
    )


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
