"""Scope handles. A scope (a "run") bounds everything created in it: cancelling it stops the
claims, tasks and deliveries of its whole subtree. The handle is local; each method is a request."""

from __future__ import annotations

from typing import Any, AsyncIterator, Awaitable, Callable, TypeVar

from ._checks import check_id
from . import _keys
from ._context import Context
from .capacity import BudgetRef, PoolRef, QuotaRef  # -- capacity --
from .claims import ClaimRef
from .coordination import BarriersAPI, GroupsAPI, TimersAPI
from .mailboxes import MailboxRef
from .errors import ValidationError
from .tasks import TaskTicket
from .types import ClaimsPage, HeldClaim, ScopeView, TasksPage, TaskView

__all__ = ["ScopeHandle", "LIST_LIMIT_DEFAULT", "LIST_LIMIT_MAX", "NAME_LEN_MAX"]

LIST_LIMIT_DEFAULT = 100
"""How many rows `run.claims()` and `run.tasks()` ask for unless told (the server's default)."""
LIST_LIMIT_MAX = 1000
"""The most rows one `run.claims()` or `run.tasks()` may ask for (the server's maximum)."""
NAME_LEN_MAX = _keys.NAME_LEN_MAX
"""The longest name of a run, in characters: the server's default limit of a name."""


class ScopeHandle:
    """A run (a scope) by id: `rs.scopes.create()`, `rs.scopes.ensure(name)` or `rs.scope(id)`.

    `id` is the run's id. Its keys, queues and capacity are reached through it: `claim(key)`,
    `mailbox(name)`, `pool(name)`, `quota(name)`, `budget(name)`, `task(task_id)`; and its
    coordination through `barriers`, `timers` and `groups`. Making a handle sends nothing.
    `claims()` and `tasks()` read what the whole run holds and does now."""

    def __init__(self, ctx: Context, scope_id: str) -> None:
        self._ctx = ctx
        self.id = check_id("scope_id", scope_id)
        self.barriers = BarriersAPI(ctx, scope_id)
        self.timers = TimersAPI(ctx, scope_id)
        self.groups = GroupsAPI(ctx)

    def __repr__(self) -> str:
        return f"ScopeHandle(id={self.id!r})"

    async def status(self) -> ScopeView:
        """The scope view (`storedState`, `effective`, `deadline`, ...)."""
        view: ScopeView = (await self._ctx.call("GET", f"/scopes/{self.id}")).body
        return view

    async def cancel(self) -> dict[str, Any]:
        """Cancel the scope and its subtree (a POST with no body)."""
        answer: dict[str, Any] = (await self._ctx.call("POST", f"/scopes/{self.id}/cancel")).body
        return answer

    async def complete(self) -> dict[str, Any]:
        """Mark the scope completed (a POST with no body)."""
        answer: dict[str, Any] = (await self._ctx.call("POST", f"/scopes/{self.id}/complete")).body
        return answer

    async def child(
        self, *, name: str | None = None, deadline: str | None = None, child_limit: int | None = None
    ) -> ScopeHandle:
        """Create a scope under this one."""
        return await create_scope(self._ctx, name=name, parent_id=self.id, deadline=deadline, child_limit=child_limit)

    def claim(self, key: str) -> ClaimRef:
        """The claim `key` in this run (`acquire()`, `try_acquire()`, `run(fn)`); sends nothing."""
        return ClaimRef(self._ctx, self.id, key)

    def mailbox(self, name: str) -> MailboxRef:
        """The queue `name`, for this run's tasks and messages; sends nothing. The name is looked
        up at the first call that needs it: a queue that does not exist then raises
        `NotFoundError`, saying to create it first with `rs.mailboxes.ensure(name, mode="WORK")`."""
        return MailboxRef.by_name(self._ctx, self.id, name)

    def mailbox_by_id(self, mailbox_id: str) -> MailboxRef:
        """The queue with this id (`MailboxRow["id"]`), for this run; sends nothing."""
        return MailboxRef.by_id(self._ctx, self.id, mailbox_id)

    # -- capacity --
    def pool(self, name: str) -> PoolRef:
        """The concurrency pool `name` (made with `rs.pools.ensure`), for this run; sends nothing."""
        return PoolRef(self._ctx, self.id, name=name)

    def pool_by_id(self, permit_id: str) -> PoolRef:
        """The pool with this id, for this run; sends nothing."""
        return PoolRef(self._ctx, self.id, id=permit_id)

    def quota(self, name: str) -> QuotaRef:
        """The quota `name` (N units per window, made with `rs.quotas.ensure`), for this run."""
        return QuotaRef(self._ctx, self.id, name=name)

    def quota_by_id(self, allowance_id: str) -> QuotaRef:
        """The quota with this id, for this run; sends nothing."""
        return QuotaRef(self._ctx, self.id, id=allowance_id)

    def budget(self, name: str) -> BudgetRef:
        """The budget `name` (made with `rs.budgets.ensure`), for this run's reservations."""
        return BudgetRef(self._ctx, self.id, name=name)

    def budget_by_id(self, budget_id: str) -> BudgetRef:
        """The budget with this id, for this run; sends nothing."""
        return BudgetRef(self._ctx, self.id, id=budget_id)

    def task(self, task_id: str) -> TaskTicket:
        """Re-attach to a task by id; sends nothing."""
        return TaskTicket(self._ctx, task_id, self.id)

    # -- reads of the whole run ---------------------------------------------------------------

    async def claims(self, *, limit: int = LIST_LIMIT_DEFAULT, cursor: str | None = None) -> ClaimsPage:
        """A page of the claims held in this run now, in the order of their keys, who holds each
        and until when (tokens are never listed): `{"scopeId", "claims": [HeldClaim, ...],
        "truncated", "nextCursor"}`. At most `limit` (1 to 1000, default 100); pass the page's
        `nextCursor` as `cursor` for the next one (None on the last page, and `truncated` says
        the same). `iter_claims()` reads every page. A snapshot for people and tooling: to own a
        key, acquire it (`claim(key)`)."""
        query = {"limit": _limit(limit), "cursor": cursor}
        page: ClaimsPage = (await self._ctx.call("GET", f"/scopes/{self.id}/claims", query=query)).body
        return page

    async def iter_claims(self, *, page_size: int = LIST_LIMIT_DEFAULT) -> AsyncIterator[HeldClaim]:
        """Every claim held in this run, in the order of their keys, a page at a time: one taken
        or released while it reads moves no other, so none is shown twice."""
        async for page in _pages(self.claims, page_size):
            for claim in page["claims"]:
                yield claim

    async def tasks(self, *, limit: int = LIST_LIMIT_DEFAULT, cursor: str | None = None) -> TasksPage:
        """A page of the tasks of this run, newest first, each as `ticket.status()` gives it
        (`taskKey`, `state`, `attempt`, `outcome`...): `{"scopeId", "tasks": [TaskView, ...],
        "truncated", "nextCursor"}`. At most `limit` (1 to 1000, default 100); pass the page's
        `nextCursor` as `cursor` for the next, older ones (None on the last page, and
        `truncated` says the same). `iter_tasks()` reads every page."""
        query = {"limit": _limit(limit), "cursor": cursor}
        page: TasksPage = (await self._ctx.call("GET", f"/scopes/{self.id}/tasks", query=query)).body
        return page

    async def iter_tasks(self, *, page_size: int = LIST_LIMIT_DEFAULT) -> AsyncIterator[TaskView]:
        """Every task of this run, newest first, a page at a time: a task submitted while it
        reads is newer than where it stands and left for the next reading; none is shown twice."""
        async for page in _pages(self.tasks, page_size):
            for task in page["tasks"]:
                yield task


Page = TypeVar("Page", ClaimsPage, TasksPage)


async def _pages(read: Callable[..., Awaitable[Page]], page_size: int) -> AsyncIterator[Page]:
    """Every page of a listing, `read(limit=, cursor=)` called with the last page's `nextCursor`
    until a page has none (a server without paging writes none: its one page is all)."""
    cursor = None
    while True:
        page = await read(limit=page_size, cursor=cursor)
        yield page
        cursor = page.get("nextCursor")
        if cursor is None:
            return


def _limit(limit: int) -> int:
    """A list's `limit`, checked as the server checks it."""
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= LIST_LIMIT_MAX:
        raise ValidationError("VALIDATION_FAILED", 400, f"limit must be an integer from 1 to {LIST_LIMIT_MAX}, got {limit!r}")
    return limit


async def create_scope(
    ctx: Context,
    *,
    name: str | None = None,
    parent_id: str | None = None,
    deadline: str | None = None,
    child_limit: int | None = None,
) -> ScopeHandle:
    body = {"name": name, "parentId": parent_id, "deadline": deadline, "childLimit": child_limit}
    reply = await ctx.call("POST", "/scopes", body=body)
    return ScopeHandle(ctx, reply.body["id"])
