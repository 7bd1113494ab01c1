"""`Runstate`: the blocking client, for code that is not async, and the run-bound API.

It has two faces. The handles of this SDK (`rs.scopes`, `rs.scope(id)`, `rs.mailboxes`...),
twins of `AsyncRunstate`'s; and the run-bound API of the official 0.3.0 client (`rs.once`,
`rs.queue`, `rs.stop()`..., `runstate._verbs`), with its options (`run=`, `worker=`, `timeout=`).
Nothing is checked or sent until the first call: a missing API key is a `ConfigError` then, so
making a client (and importing `runstate`, whose default client this is) never raises.

It runs an `AsyncRunstate` on an event loop of its own, in one daemon thread per client. Every
class here is a thin, explicitly typed twin of an async one (`BlockingScope` of `ScopeHandle`,
`BlockingLease` of `ClaimLease`...): each method runs its async twin on that loop and waits for it,
so a type checker and an editor see the real signatures. Lease renewal runs on the client's loop,
so a slow blocking caller never starves it.

Functions handed to the client (`run(fn)`, `consume(handler)`) are plain functions here; they run
in worker threads and receive the blocking twins, so `delivery.complete()` blocks as expected
inside a handler. Do not call blocking methods from a coroutine running on the client's own loop:
that would wait on itself, and raises instead.

Ctrl-C (`KeyboardInterrupt`) while a call blocks cancels that call on the client's loop and waits
(at most `INTERRUPT_WAIT_S`) for its clean-up, so a `consume()` gives back the deliveries it holds
and a `claim(...).run()` releases its claim before the interrupt goes on.
"""

from __future__ import annotations

import threading
from typing import Any, Iterator, Sequence

from ._blocking_work import (
    BlockingAcquireAttempt, BlockingClaim, BlockingDelivery, BlockingLease, BlockingMailbox, BlockingTicket,
)
from ._bound import RunSpec, Shared
from ._docs import twin_of
from ._loop import Loop
from ._units import Duration
from ._verbs import RunVerbs
from .client import AsyncRunstate, MailboxesAPI, ScopesAPI
from .scopes import LIST_LIMIT_DEFAULT, ScopeHandle
from .transport import Transport
from .types import ClaimsPage, DeadLetterPage, DeleteResult, MailboxRow, PurgeResult, RequeueResult, ScopeView, TasksPage

__all__ = [
    "Runstate",
    "BlockingScope",
    "BlockingClaim",
    "BlockingLease",
    "BlockingAcquireAttempt",
    "BlockingMailbox",
    "BlockingDelivery",
    "BlockingTicket",
    "BlockingScopes",
    "BlockingMailboxes",
]


@twin_of(ScopeHandle)
class BlockingScope:
    """A scope (a run) (see `ScopeHandle`): its `id`."""

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

    def claims(self, *, limit: int = LIST_LIMIT_DEFAULT) -> ClaimsPage:
        return self._loop.run(self._handle.claims(limit=limit))

    def tasks(self, *, limit: int = LIST_LIMIT_DEFAULT) -> TasksPage:
        return self._loop.run(self._handle.tasks(limit=limit))


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
    """The blocking client: `AsyncRunstate`'s scopes, claims, mailboxes and tasks without
    `await` (`scopes`, `scope(id)`, `mailboxes`, `with_space`, and `watch()` for its event watch),
    and the run-bound API (see the module docstring), which is how blocking code reaches capacity
    and coordination: the capacity handles (`pools`, `quotas`, `budgets`, `work_limits`), the
    coordination ones (a run's `barriers`, `timers`, `groups`), `diagnostics`, `admit()` and
    `with_holder()` are `AsyncRunstate`'s only. `worker=` is 0.3.0's name for `holder=` (default
    `{hostname}-{pid}`), `timeout=` its request timeout (seconds or `"30s"`), `run=` the run its
    run-bound calls work in (default `RUNSTATE_RUN`, else `"default"`). `scopes` and `mailboxes`
    are the blocking twins of `AsyncRunstate`'s."""

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

    def __repr__(self) -> str:
        try:
            settings = self._shared.settings()
        except Exception:
            return "Runstate(not configured yet)"
        return f"Runstate(space_id={self._view_of_space or settings.config.space_id!r}, holder={settings.config.holder!r})"

    # -- the handles (this SDK's) -------------------------------------------------------------------

    @property
    def _loop(self) -> Loop:
        return self._shared.loop()

    @property
    def _async(self) -> AsyncRunstate:
        """The async client on this client's loop (for a `with_space` view, its view)."""
        client = self._shared.blocking_client()
        return client if self._view_of_space is None else client.with_space(self._view_of_space)

    @property
    def scopes(self) -> BlockingScopes:
        return BlockingScopes(self._async, self._loop)

    @property
    def mailboxes(self) -> BlockingMailboxes:
        return BlockingMailboxes(self._async, self._loop)

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
        return view

    def new_event(self) -> threading.Event:
        """A thread-safe stop flag for `consume(stop_event=...)`: call `.set()` from any thread."""
        return threading.Event()

    def watch(self, **kwargs: Any) -> Iterator[dict[str, Any]]:
        """A blocking iterator over `events.watch(...)`; `stop_event=rs.new_event()` ends it."""
        stream = self._async.events.watch(**kwargs)
        try:
            while True:
                try:
                    yield self._loop.run(stream.__anext__())
                except StopAsyncIteration:
                    return
        finally:
            aclose = getattr(stream, "aclose", None)  # an async generator: let it clean up
            if aclose is not None:
                self._loop.run(aclose())

    def close(self) -> None:
        """Close the client (best effort, at most 5 s) and stop its loop thread. A `with_space`
        view closes nothing; a client made with `run()` or `child()` shares its parent's."""
        if self._view_of_space is not None:
            return
        self._shared.close()

    def __enter__(self) -> Runstate:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
