"""`Runstate`: the blocking client, for code that is not async, and the run-bound API.

It has two faces. The handles of this SDK (`rs.scopes`, `rs.scope(id)`, `rs.mailboxes`...),
twins of `AsyncRunstate`'s; and the run-bound API of the official 0.3.0 client (`rs.once`,
`rs.queue`, `rs.stop()`..., `runstate._verbs`), with its options (`run=`, `worker=`, `timeout=`).
Nothing is checked or sent until the first call: a missing API key is a `ConfigError` then, so
making a client (and importing `runstate`, whose default client this is) never raises.

It runs an `AsyncRunstate` on an event loop of its own, in one daemon thread per client. Every
class here is a thin, explicitly typed twin of an async one (`BlockingScope` of `ScopeHandle`,
`BlockingLease` of `ClaimLease`, `BlockingPool` of `PoolRef`, `BlockingBarrier` of
`BarrierHandle`...), for every handle of the async client: claims, mailboxes and tasks, the
capacity handles (pools, quotas, budgets, work limits) and the coordination ones (barriers,
timers, groups, the event log, diagnostics). Each method runs its async twin on that loop and
waits for it, so a type checker and an editor see the real signatures; an async context manager
is a context manager here (`with run.pool("gpu").acquire() as lease:`), an async iterator an
iterator. Lease renewal runs on the client's loop, so a slow blocking caller never starves it.

Functions handed to the client (`run(fn)`, `consume(handler)`) are plain functions here; they run
in worker threads and receive the blocking twins, so `delivery.complete()` blocks as expected
inside a handler. Do not call blocking methods from a coroutine running on the client's own loop:
that would wait on itself, and raises instead.

Ctrl-C (`KeyboardInterrupt`) while a call blocks cancels that call on the client's loop and waits
(at most `INTERRUPT_WAIT_S`) for its clean-up, so a `consume()` gives back the deliveries it holds
and a `claim(...).run()` or `pool(...).run()` gives back its claim or its units before the
interrupt goes on; a wait (`barrier.wait()`, `quota.take()`...) is cancelled where it runs.
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Iterator, Sequence, TypeVar

from ._blocking_capacity import (
    BlockingBudget, BlockingBudgetReservation, BlockingBudgets, BlockingPool, BlockingPoolAttempt, BlockingPoolLease,
    BlockingPools, BlockingQuota, BlockingQuotas, BlockingWorkLimits,
)
from ._blocking_coordination import (
    BlockingBarrier, BlockingBarriers, BlockingDiagnostics, BlockingEvents, BlockingGroup, BlockingGroups, BlockingTimer,
    BlockingTimers,
)
from ._blocking_work import (
    BlockingAcquireAttempt, BlockingAdmittedWork, BlockingClaim, BlockingDelivery, BlockingLease, BlockingMailbox,
    BlockingTicket,
)
from ._bound import RunSpec, Shared
from ._checks import check_text
from ._docs import twin_of
from ._loop import Loop
from ._units import Duration
from ._verbs import RunVerbs
from .client import HOLDER_LEN_MAX, AsyncRunstate, MailboxesAPI, ScopesAPI
from .scopes import LIST_LIMIT_DEFAULT, ScopeHandle
from .transport import Transport
from .types import (
    ClaimsPage, DeadLetter, DeadLetterPage, DeleteResult, HeldClaim, MailboxRow, PurgeResult, RequeueResult, ScopeView, TasksPage, TaskView,
)

__all__ = [
    "Runstate",
    "BlockingScope",
    "BlockingClaim",
    "BlockingLease",
    "BlockingAcquireAttempt",
    "BlockingMailbox",
    "BlockingDelivery",
    "BlockingTicket",
    "BlockingAdmittedWork",
    "BlockingScopes",
    "BlockingMailboxes",
    # capacity
    "BlockingPools",
    "BlockingQuotas",
    "BlockingWorkLimits",
    "BlockingBudgets",
    "BlockingPool",
    "BlockingPoolLease",
    "BlockingPoolAttempt",
    "BlockingQuota",
    "BlockingBudget",
    "BlockingBudgetReservation",
    # coordination, the event log, diagnostics
    "BlockingBarriers",
    "BlockingBarrier",
    "BlockingTimers",
    "BlockingTimer",
    "BlockingGroups",
    "BlockingGroup",
    "BlockingEvents",
    "BlockingDiagnostics",
]


@twin_of(ScopeHandle)
class BlockingScope:
    """A scope (a run) (see `ScopeHandle`): its `id`. Its keys, queues and capacity are reached
    through it (`claim(key)`, `mailbox(name)`, `pool(name)`, `quota(name)`, `budget(name)`,
    `task(task_id)`), and its coordination through `barriers`, `timers` and `groups`."""

    def __init__(self, handle: ScopeHandle, loop: Loop) -> None:
        self._handle = handle
        self._loop = loop

    def __repr__(self) -> str:
        return f"<blocking {self._handle!r}>"

    @property
    def id(self) -> str:
        return self._handle.id

    def status(self) -> ScopeView:
        return self._loop.run(self._handle.status())

    def cancel(self) -> dict[str, Any]:
        return self._loop.run(self._handle.cancel())

    def complete(self) -> dict[str, Any]:
        return self._loop.run(self._handle.complete())

    def child(self, *, name: str | None = None, deadline: str | None = None, child_limit: int | None = None) -> BlockingScope:
        handle = self._loop.run(self._handle.child(name=name, deadline=deadline, child_limit=child_limit))
        return BlockingScope(handle, self._loop)

    def claim(self, key: str) -> BlockingClaim:
        return BlockingClaim(self._handle.claim(key), self._loop)

    def mailbox(self, name: str) -> BlockingMailbox:
        return BlockingMailbox(self._handle.mailbox(name), self._loop)

    def mailbox_by_id(self, mailbox_id: str) -> BlockingMailbox:
        return BlockingMailbox(self._handle.mailbox_by_id(mailbox_id), self._loop)

    def task(self, task_id: str) -> BlockingTicket:
        return BlockingTicket(self._handle.task(task_id), self._loop)

    # -- capacity and coordination --

    def pool(self, name: str) -> BlockingPool:
        return BlockingPool(self._handle.pool(name), self._loop)

    def pool_by_id(self, permit_id: str) -> BlockingPool:
        return BlockingPool(self._handle.pool_by_id(permit_id), self._loop)

    def quota(self, name: str) -> BlockingQuota:
        return BlockingQuota(self._handle.quota(name), self._loop)

    def quota_by_id(self, allowance_id: str) -> BlockingQuota:
        return BlockingQuota(self._handle.quota_by_id(allowance_id), self._loop)

    def budget(self, name: str) -> BlockingBudget:
        return BlockingBudget(self._handle.budget(name), self._loop)

    def budget_by_id(self, budget_id: str) -> BlockingBudget:
        return BlockingBudget(self._handle.budget_by_id(budget_id), self._loop)

    @property
    def barriers(self) -> BlockingBarriers:
        """Make barriers in this run (`create(target=)`), or reach one by id (`get`)."""
        return BlockingBarriers(self._handle.barriers, self._loop)

    @property
    def timers(self) -> BlockingTimers:
        """Arm durable timers in this run (`create(after_seconds=)`), or reach one by id (`get`)."""
        return BlockingTimers(self._handle.timers, self._loop)

    @property
    def groups(self) -> BlockingGroups:
        """Make task groups (`create(mailbox=, condition=)`), or reach one by id (`by_id`)."""
        return BlockingGroups(self._handle.groups, self._loop)

    def claims(self, *, limit: int = LIST_LIMIT_DEFAULT, cursor: str | None = None) -> ClaimsPage:
        return self._loop.run(self._handle.claims(limit=limit, cursor=cursor))

    def iter_claims(self, *, page_size: int = LIST_LIMIT_DEFAULT) -> Iterator[HeldClaim]:
        """Every claim held in this run, in the order of their keys, a page at a time (see
        `ScopeHandle.iter_claims`): each page is read on the client's loop."""
        for page in _pages(self.claims, page_size):
            yield from page["claims"]

    def tasks(self, *, limit: int = LIST_LIMIT_DEFAULT, cursor: str | None = None) -> TasksPage:
        return self._loop.run(self._handle.tasks(limit=limit, cursor=cursor))

    def iter_tasks(self, *, page_size: int = LIST_LIMIT_DEFAULT) -> Iterator[TaskView]:
        """Every task of this run, newest first, a page at a time (see `ScopeHandle.iter_tasks`):
        each page is read on the client's loop."""
        for page in _pages(self.tasks, page_size):
            yield from page["tasks"]


Page = TypeVar("Page", ClaimsPage, TasksPage)


def _pages(read: Callable[..., Page], page_size: int) -> Iterator[Page]:
    """Every page of a listing, `read(limit=, cursor=)` called with the last page's `nextCursor`
    until a page has none (a server without paging writes none: its one page is all)."""
    cursor = None
    while True:
        page = read(limit=page_size, cursor=cursor)
        yield page
        cursor = page.get("nextCursor")
        if cursor is None:
            return


@twin_of(ScopesAPI)
class BlockingScopes:
    """`rs.scopes` of the blocking client (see `ScopesAPI`)."""

    def __init__(self, client: AsyncRunstate, loop: Loop) -> None:
        self._client = client
        self._loop = loop

    def create(
        self,
        *,
        name: str | None = None,
        parent_id: str | None = None,
        deadline: str | None = None,
        child_limit: int | None = None,
    ) -> BlockingScope:
        handle = self._loop.run(
            self._client.scopes.create(name=name, parent_id=parent_id, deadline=deadline, child_limit=child_limit)
        )
        return BlockingScope(handle, self._loop)

    def ensure(self, name: str, *, deadline: str | None = None) -> BlockingScope:
        """The run named `name`, made by the first caller and the same for every later one."""
        return BlockingScope(self._loop.run(self._client.scopes.ensure(name, deadline=deadline)), self._loop)


@twin_of(MailboxesAPI)
class BlockingMailboxes:
    """`rs.mailboxes` of the blocking client (see `MailboxesAPI`)."""

    def __init__(self, client: AsyncRunstate, loop: Loop) -> None:
        self._client = client
        self._loop = loop

    def ensure(self, name: str, *, mode: str | None = None, backlog_limit: int | None = None) -> MailboxRow:
        return self._loop.run(self._client.mailboxes.ensure(name, mode=mode, backlog_limit=backlog_limit))

    def list(self) -> list[MailboxRow]:
        return self._loop.run(self._client.mailboxes.list())

    def dead_letters(
        self, mailbox_id: str, *, limit: int | None = None, cursor: str | None = None, reason: str | None = None,
        older_than_s: int | None = None, newer_than_s: int | None = None,
    ) -> DeadLetterPage:
        return self._loop.run(self._client.mailboxes.dead_letters(
            mailbox_id, limit=limit, cursor=cursor, reason=reason, older_than_s=older_than_s, newer_than_s=newer_than_s
        ))

    def iter_dead_letters(
        self, mailbox_id: str, *, reason: str | None = None, older_than_s: int | None = None,
        newer_than_s: int | None = None, page_size: int = 100,
    ) -> Iterator[DeadLetter]:
        """Every dead letter that matches, newest first, a page at a time (see
        `MailboxesAPI.iter_dead_letters`): each page is read on the client's loop."""
        cursor = None
        while True:
            page = self.dead_letters(
                mailbox_id, limit=page_size, cursor=cursor, reason=reason, older_than_s=older_than_s, newer_than_s=newer_than_s
            )
            yield from page["deadLetters"]
            cursor = page["nextCursor"]
            if cursor is None:
                return

    def requeue_dead_letters(
        self, mailbox_id: str, *, message_ids: Sequence[str] | None = None, reason: str | None = None,
        older_than_s: int | None = None, newer_than_s: int | None = None, all: bool = False, dry_run: bool = False,
    ) -> RequeueResult:
        return self._loop.run(self._client.mailboxes.requeue_dead_letters(
            mailbox_id, message_ids=message_ids, reason=reason, older_than_s=older_than_s, newer_than_s=newer_than_s,
            all=all, dry_run=dry_run,
        ))

    def delete_dead_letters(
        self, mailbox_id: str, *, message_ids: Sequence[str] | None = None, reason: str | None = None,
        older_than_s: int | None = None, newer_than_s: int | None = None, all: bool = False, dry_run: bool = False,
    ) -> DeleteResult:
        return self._loop.run(self._client.mailboxes.delete_dead_letters(
            mailbox_id, message_ids=message_ids, reason=reason, older_than_s=older_than_s, newer_than_s=newer_than_s,
            all=all, dry_run=dry_run,
        ))

    def purge(self, mailbox_id: str, *, scope_id: str | None = None, reason: str | None = None, dry_run: bool = False) -> PurgeResult:
        return self._loop.run(self._client.mailboxes.purge(mailbox_id, scope_id=scope_id, reason=reason, dry_run=dry_run))


@twin_of(AsyncRunstate)
class Runstate(RunVerbs):
    """The blocking client: `AsyncRunstate`'s handles without `await` (`scopes`, `scope(id)`,
    `mailboxes`; the capacity handles `pools`, `quotas`, `work_limits` and `budgets`; the space's
    event log as `event_log`, and `watch()` for its watch; `diagnostics`; `with_space` and
    `with_holder`), each the blocking twin of `AsyncRunstate`'s, and the run-bound API (see the
    module docstring), whose `events(...)` are a run's. `worker=` is 0.3.0's name for `holder=`
    (default `{hostname}-{pid}`), `timeout=` its request timeout (seconds or `"30s"`), `run=` the
    run its run-bound calls work in (default `RUNSTATE_RUN`, else `"default"`)."""

    def __init__(
        self,
        *,
        api_key: str | None = None,
        space_id: str | None = None,
        base_url: str | None = None,
        run: str | None = None,
        worker: str | None = None,
        timeout: Duration | None = None,
        retries: int | None = None,
        request_timeout_ms: int | None = None,
        holder: str | None = None,
        transport: Transport | None = None,
        ca_bundle: str | None = None,
    ) -> None:
        options = {
            "api_key": api_key, "space_id": space_id, "base_url": base_url, "run": run, "worker": worker,
            "timeout": timeout, "retries": retries, "request_timeout_ms": request_timeout_ms, "holder": holder,
            "transport": transport, "ca_bundle": ca_bundle,
        }
        self._init_bound(Shared(options), RunSpec(kind="named"))

    def _init_bound(self, shared: Shared, spec: RunSpec) -> None:
        super()._init_bound(shared, spec)
        self._view_of_space: str | None = None
        self._view_of_holder: _HolderView | None = None

    def __repr__(self) -> str:
        try:
            settings = self._shared.settings()
        except Exception:
            return "Runstate(not configured yet)"
        holder = settings.config.holder if self._view_of_holder is None else self._view_of_holder.holder
        return f"Runstate(space_id={self._view_of_space or settings.config.space_id!r}, holder={holder!r})"

    # -- the handles (this SDK's) -------------------------------------------------------------------

    @property
    def _loop(self) -> Loop:
        return self._shared.loop()

    @property
    def _async(self) -> AsyncRunstate:
        """The async client on this client's loop (for a `with_space` or `with_holder` view, its view)."""
        client = self._shared.blocking_client()
        if self._view_of_holder is not None:
            client = self._view_of_holder.of(client)
        return client if self._view_of_space is None else client.with_space(self._view_of_space)

    @property
    def scopes(self) -> BlockingScopes:
        return BlockingScopes(self._async, self._loop)

    @property
    def mailboxes(self) -> BlockingMailboxes:
        return BlockingMailboxes(self._async, self._loop)

    @property
    def pools(self) -> BlockingPools:
        """The space's concurrency pools: `ensure(name, capacity=)`, `list()`; a run takes units
        with `pool(name)`."""
        return BlockingPools(self._async.pools, self._loop)

    @property
    def quotas(self) -> BlockingQuotas:
        """The space's quotas: `ensure(name, units_per_window=, window_seconds=)`, `list()`; a run
        takes units with `quota(name)`."""
        return BlockingQuotas(self._async.quotas, self._loop)

    @property
    def work_limits(self) -> BlockingWorkLimits:
        """Caps on a run's outstanding tasks: `ensure(name, scope_id=, max_outstanding=)`."""
        return BlockingWorkLimits(self._async.work_limits, self._loop)

    @property
    def budgets(self) -> BlockingBudgets:
        """The space's money budgets: `ensure(name, currency=, scale=, limit=)`; a run reserves with
        `budget(name)`."""
        return BlockingBudgets(self._async.budgets, self._loop)

    @property
    def event_log(self) -> BlockingEvents:
        """The space's event log (`AsyncRunstate.events`): `list()` a page, `watch()` follow it.
        Not `events`: `rs.events(...)` is the run-bound API's, the events of this client's run."""
        return BlockingEvents(self._async.events, self._loop)

    @property
    def diagnostics(self) -> BlockingDiagnostics:
        """Read-only views for people and tooling: `run(scope_id)`, `workers(scope_id)`, `waits()`."""
        return BlockingDiagnostics(self._async.diagnostics, self._loop)

    @property
    def space_id(self) -> str:
        return self._async.space_id

    @property
    def holder(self) -> str:
        return self._async.holder

    @property
    def session(self) -> str:
        return self._async.session

    @property
    def transport(self) -> Transport:
        return self._async.transport

    def scope(self, scope_id: str) -> BlockingScope:
        """A handle on an existing scope; sends nothing."""
        return BlockingScope(self._async.scope(scope_id), self._loop)

    def with_space(self, space_id: str) -> Runstate:
        """A view bound to another space, sharing the loop, transport, holder and session."""
        view = self._bound_to(self._binding.spec)
        view._view_of_space = space_id
        view._view_of_holder = self._view_of_holder  # a holder view's holder and session stay
        return view

    def with_holder(self, holder: str) -> Runstate:
        """A view for another worker of this process (see `AsyncRunstate.with_holder`): its own
        `holder` and a fresh `session`, so the claims, grants and deliveries taken through its
        handles are its own, sharing the loop, the transport, the batching of calls and the
        renewal loop. Closing the client closes its views; closing a view closes nothing. The
        run-bound calls of a view (`once`, `queue`...) go as the client's own `worker`."""
        check_text("holder", holder, HOLDER_LEN_MAX)
        view = self._bound_to(self._binding.spec)
        view._view_of_space = self._view_of_space
        view._view_of_holder = _HolderView(holder)
        return view

    def new_event(self) -> threading.Event:
        """A thread-safe stop flag for `consume(stop_event=...)`: call `.set()` from any thread."""
        return threading.Event()

    def watch(self, **kwargs: Any) -> Iterator[dict[str, Any]]:
        """`event_log.watch(...)` (a blocking iterator over the space's events, the same options);
        `stop_event=rs.new_event()` ends it."""
        yield from self.event_log.watch(**kwargs)

    def close(self) -> None:
        """Close the client (best effort, at most 5 s) and stop its loop thread. A `with_space` or
        `with_holder` view closes nothing; a client made with `run()` or `child()` shares its parent's."""
        if self._view_of_space is not None or self._view_of_holder is not None:
            return
        self._shared.close()

    def __enter__(self) -> Runstate:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class _HolderView:
    """A `with_holder` view's holder, and the async view made for it on the client's loop: made
    once per client (the same session for every call of the view), again after `configure()`
    makes a new client."""

    def __init__(self, holder: str) -> None:
        self.holder = holder
        self._lock = threading.Lock()
        self._made: tuple[AsyncRunstate, AsyncRunstate] | None = None

    def of(self, client: AsyncRunstate) -> AsyncRunstate:
        with self._lock:
            if self._made is None or self._made[0] is not client:
                self._made = (client, client.with_holder(self.holder))
            return self._made[1]
