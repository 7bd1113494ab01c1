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

import datetime
import functools
import threading
from typing import Any, Callable, Iterator, Literal, NotRequired, Sequence, TypedDict, TypeVar

from ._bound import RunSpec, Shared
from ._docs import twin_of
from ._loop import Loop
from ._runtime import is_async_callable
from ._units import Duration
from ._verbs import RunVerbs
from .claims import DEFAULT_LEASE_SECONDS, DEFAULT_TIMEOUT_MS, ClaimLease, ClaimRef
from .client import AsyncRunstate, MailboxesAPI, ScopesAPI
from .mailboxes import DEFAULT_CONSUME_WAIT_MS, RECEIVE_LEASE_SECONDS, Delivery, MailboxRef, StopFlag
from .scopes import LIST_LIMIT_DEFAULT, ScopeHandle
from .tasks import DEFAULT_POLL_MS, TaskTicket
from .tasks import DEFAULT_TIMEOUT_MS as TASK_TIMEOUT_MS
from .transport import Transport
from .types import (
    ClaimsPage, ClaimView, DeadLetterPage, DeleteResult, MailboxRow, MessageView, PurgeResult, RequeueResult, ScopeView,
    TaskResult, TasksPage, TaskView,
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
    "BlockingScopes",
    "BlockingMailboxes",
]

T = TypeVar("T")

@twin_of(ClaimLease)
class BlockingLease:
    """A held claim (see `ClaimLease`): `key`, `generation`, `expires_at`, `lease_seconds`,
    `is_lost` and `lost_error` read as there; `lost_event` is a `threading.Event` here."""

    def __init__(self, lease: ClaimLease, loop: Loop) -> None:
        self._lease = lease
        self._loop = loop
        self.lost_event = threading.Event()
        loop.loop.call_soon_threadsafe(lease._when_lost, self.lost_event.set)

    def __repr__(self) -> str:
        return f"<blocking {self._lease!r}>"

    @property
    def key(self) -> str:
        return self._lease.key

    @property
    def generation(self) -> int:
        generation: int = self._lease.generation
        return generation

    @property
    def expires_at(self) -> datetime.datetime:
        return self._lease.expires_at

    @property
    def lease_seconds(self) -> int:
        return self._lease.lease_seconds

    @property
    def is_lost(self) -> bool:
        return self._lease.is_lost

    @property
    def lost_error(self) -> BaseException | None:
        return self._lease.lost_error

    def token(self) -> str:
        return self._lease.token()

    def raise_if_lost(self) -> None:
        self._lease.raise_if_lost()

    def renew(self, lease_seconds: int | None = None) -> None:
        self._loop.run(self._lease.renew(lease_seconds))

    def release(self, observation: Any = None) -> None:
        self._loop.run(self._lease.release(observation))

    def close(self) -> None:
        """Stop renewing without releasing (see `ClaimLease.aclose`)."""
        self._loop.run(self._lease.aclose())

    def __enter__(self) -> BlockingLease:
        return self

    def __exit__(self, *exc_info: object) -> None:
        # As `ClaimLease.__aexit__`: a block that ended normally learns at the release whether the
        # lease lasted, and a release refused as stale raises `LeaseLostError`.
        if exc_info[0] is not None:
            self._loop.run(self._lease._release_quietly())
            return
        self._loop.run(self._lease._release_checked())


class BlockingAcquireAttempt(TypedDict):
    """`claim.try_acquire()`: `{"kind": "acquired", "lease": lease}` or `{"kind": "busy"}`
    (`kind` says which; `lease`, a `BlockingLease`, is there when it is `acquired`)."""

    kind: Literal["acquired", "busy"]
    lease: NotRequired[BlockingLease]


@twin_of(ClaimRef)
class BlockingClaim:
    """A claim key in a scope (see `ClaimRef`): its `key` and `scope_id`."""

    def __init__(self, ref: ClaimRef, loop: Loop) -> None:
        self._ref = ref
        self._loop = loop

    def __repr__(self) -> str:
        return f"<blocking {self._ref!r}>"

    @property
    def key(self) -> str:
        return self._ref.key

    @property
    def scope_id(self) -> str:
        return self._ref.scope_id

    def acquire(
        self, *, lease_seconds: int = DEFAULT_LEASE_SECONDS, wait: bool = False, timeout_ms: int = DEFAULT_TIMEOUT_MS
    ) -> BlockingLease:
        lease = self._loop.run(self._ref.acquire(lease_seconds=lease_seconds, wait=wait, timeout_ms=timeout_ms))
        return BlockingLease(lease, self._loop)

    def try_acquire(
        self, *, lease_seconds: int = DEFAULT_LEASE_SECONDS, wait: bool = False, timeout_ms: int = DEFAULT_TIMEOUT_MS
    ) -> BlockingAcquireAttempt:
        attempt = self._loop.run(self._ref.try_acquire(lease_seconds=lease_seconds, wait=wait, timeout_ms=timeout_ms))
        if "lease" in attempt:
            return BlockingAcquireAttempt(kind="acquired", lease=BlockingLease(attempt["lease"], self._loop))
        return BlockingAcquireAttempt(kind="busy")

    def force_release(self, reason: str | None = None) -> ClaimView:
        return self._loop.run(self._ref.force_release(reason))

    def run(
        self,
        fn: Callable[[BlockingLease], T],
        *,
        wait: bool = False,
        timeout_ms: int = DEFAULT_TIMEOUT_MS,
        lease_seconds: int = DEFAULT_LEASE_SECONDS,
    ) -> T:
        """Acquire, return `fn(lease)` (run in a worker thread) while renewed, release on the way out."""
        loop = self._loop

        def in_thread(lease: ClaimLease) -> T:
            return fn(BlockingLease(lease, loop))

        result: T = loop.run(self._ref.run(in_thread, wait=wait, timeout_ms=timeout_ms, lease_seconds=lease_seconds))
        return result


@twin_of(Delivery)
class BlockingDelivery:
    """One leased message (see `Delivery`): `id`, `data`, `attempt`, `scope_id`, `deadline`,
    `task_id`, `settled`, `is_lost` and `lost_error` read as there."""

    def __init__(self, delivery: Delivery, loop: Loop) -> None:
        self._delivery = delivery
        self._loop = loop

    def __repr__(self) -> str:
        return f"<blocking {self._delivery!r}>"

    @property
    def id(self) -> str:
        return self._delivery.id

    @property
    def data(self) -> Any:
        return self._delivery.data

    @property
    def attempt(self) -> int:
        return self._delivery.attempt

    @property
    def scope_id(self) -> str:
        return self._delivery.scope_id

    @property
    def deadline(self) -> str | None:
        return self._delivery.deadline

    @property
    def task_id(self) -> str | None:
        return self._delivery.task_id

    @property
    def settled(self) -> bool:
        return self._delivery.settled

    @property
    def is_lost(self) -> bool:
        return self._delivery.is_lost

    @property
    def lost_error(self) -> BaseException | None:
        return self._delivery.lost_error

    def raise_if_lost(self) -> None:
        self._delivery.raise_if_lost()

    def complete(self, result: Any = None) -> None:
        self._loop.run(self._delivery.complete(result))

    def retry(self, reason: str | None = None) -> None:
        self._loop.run(self._delivery.retry(reason))

    def reject(self, reason: str | None = None) -> None:
        self._loop.run(self._delivery.reject(reason))

    def renew(self, lease_seconds: int | None = None) -> None:
        self._loop.run(self._delivery.renew(lease_seconds))

    def keep_renewed(self) -> None:
        self._loop.run(_on_loop(self._delivery.keep_renewed))

    def stop_renewing(self) -> None:
        self._loop.run(_on_loop(self._delivery.stop_renewing))


async def _on_loop(action: Callable[[], None]) -> None:
    """A plain method of an async handle, run on the client's loop (where its lease's clock and
    renewals live)."""
    action()


@twin_of(TaskTicket)
class BlockingTicket:
    """A handle on one shared task (see `TaskTicket`): its `id` and `scope_id`."""

    def __init__(self, ticket: TaskTicket, loop: Loop) -> None:
        self._ticket = ticket
        self._loop = loop

    def __repr__(self) -> str:
        return f"<blocking {self._ticket!r}>"

    @property
    def id(self) -> str:
        return self._ticket.id

    @property
    def scope_id(self) -> str | None:
        return self._ticket.scope_id

    def status(self) -> TaskView:
        return self._loop.run(self._ticket.status())

    def result(self, *, timeout_ms: int = TASK_TIMEOUT_MS, poll_ms: int = DEFAULT_POLL_MS) -> TaskResult:
        return self._loop.run(self._ticket.result(timeout_ms=timeout_ms, poll_ms=poll_ms))

    def await_admission(self, *, timeout_ms: int = TASK_TIMEOUT_MS, poll_ms: int = DEFAULT_POLL_MS) -> TaskView:
        return self._loop.run(self._ticket.await_admission(timeout_ms=timeout_ms, poll_ms=poll_ms))

    def cancel(self, reason: str | None = None) -> dict[str, Any]:
        return self._loop.run(self._ticket.cancel(reason))

    def join(self, subscriber_id: str, scope_id: str | None = None) -> dict[str, Any]:
        return self._loop.run(self._ticket.join(subscriber_id, scope_id))

    def detach(self, subscriber_id: str) -> dict[str, Any]:
        return self._loop.run(self._ticket.detach(subscriber_id))


@twin_of(MailboxRef)
class BlockingMailbox:
    """A queue bound to a scope (see `MailboxRef`): its `scope_id` and `name`."""

    def __init__(self, ref: MailboxRef, loop: Loop) -> None:
        self._ref = ref
        self._loop = loop

    def __repr__(self) -> str:
        return f"<blocking {self._ref!r}>"

    @property
    def scope_id(self) -> str:
        return self._ref.scope_id

    @property
    def name(self) -> str | None:
        return self._ref.name

    def resolve_id(self) -> str:
        return self._loop.run(self._ref.resolve_id())

    def submit(
        self,
        input: Any,
        *,
        key: str,
        subscriber_id: str | None = None,
        deadline: str | None = None,
        requirements: dict[str, Any] | None = None,
        work_limit: str | None = None,
    ) -> BlockingTicket:
        ticket = self._loop.run(
            self._ref.submit(
                input, key=key, subscriber_id=subscriber_id, deadline=deadline,
                requirements=requirements, work_limit=work_limit,
            )
        )
        return BlockingTicket(ticket, self._loop)

    def send(self, data: Any, *, work_key: str | None = None, deadline: str | None = None) -> MessageView:
        return self._loop.run(self._ref.send(data, work_key=work_key, deadline=deadline))

    def receive(self, *, wait_ms: int = 0, lease_seconds: int = RECEIVE_LEASE_SECONDS) -> BlockingDelivery | None:
        delivery = self._loop.run(self._ref.receive(wait_ms=wait_ms, lease_seconds=lease_seconds))
        return None if delivery is None else BlockingDelivery(delivery, self._loop)

    def consume(
        self,
        handler: Callable[[Any, BlockingDelivery], Any],
        *,
        concurrency: int = 1,
        lease_seconds: int = 30,
        poll_ms: int = 250,
        wait_ms: int = DEFAULT_CONSUME_WAIT_MS,
        shutdown_timeout: float = 30.0,
        stop_event: StopFlag | None = None,
        on_error: Callable[[BaseException, BlockingDelivery | None], Any] | None = None,
        give_up_after_s: float | None = None,
        prefetch: int = 1,
    ) -> None:
        """Run `handler(data, delivery)` in worker threads until stopped (see `MailboxRef.consume`)."""
        loop = self._loop

        @functools.wraps(handler)  # consume() knows the handler by what it wraps (its warnings)
        def in_thread(data: Any, delivery: Delivery) -> Any:
            return handler(data, BlockingDelivery(delivery, loop))

        def report(err: BaseException, delivery: Delivery | None) -> Any:
            # Called on the client's loop: it may log or count, not make blocking calls.
            return on_error(err, None if delivery is None else BlockingDelivery(delivery, loop)) if on_error else None

        if is_async_callable(handler):
            raise TypeError("the blocking client's consume() takes a plain function; use AsyncRunstate for async handlers")
        loop.run(
            self._ref.consume(
                in_thread, concurrency=concurrency, lease_seconds=lease_seconds, poll_ms=poll_ms, wait_ms=wait_ms,
                shutdown_timeout=shutdown_timeout, stop_event=stop_event,
                on_error=report if on_error is not None else None, give_up_after_s=give_up_after_s,
                prefetch=prefetch,
            )
        )


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
