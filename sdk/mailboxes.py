"""Mailboxes (work queues): submit tasks, send messages, receive and consume deliveries.

A `MailboxRef` is a queue name bound to a scope; the name is turned into an id with one
`GET /mailboxes` the first time it is needed, then cached. A `Delivery` is one leased message: the
lease belongs to this worker until it runs out, and the delivery settles at most once (`complete`,
`retry` or `reject`; a second settlement sends nothing).

`consume()` is the worker loop. Its rules, from the wire contract:

- intake: while not stopped, and while fewer than `concurrency` handlers run, long-poll `recv`
  (`wait_ms`); the stop flag is checked every 100 ms and a stop cancels the long poll;
- each delivery runs `handler(data, delivery)` with its lease renewed in the background; a return
  completes it (unless the handler settled it), a raise calls `on_error(err, delivery)` and puts
  it back (`nack` with `retry: true`); a delivery whose renewal failed is lost and gets neither;
- on stop: no new work, up to `shutdown_timeout` seconds for the running handlers, then whatever
  is still unfinished is put back (before its handler is cancelled);
- `ScopeCancelledError` from `recv` is a clean stop (with the drain); authentication,
  configuration and not-found errors are raised at once; any other `RunstateError` is waited out
  (`poll_ms`) and the loop goes on.

The stop flag may be an `asyncio.Event`, a `trio.Event`, an `anyio.Event` or the blocking client's
thread-safe flag: it is read with `is_set()`, never awaited, so any of them works under either
library.
"""

from __future__ import annotations

from typing import Any, Callable

import anyio
import anyio.abc

from . import _runtime
from ._context import Context
from ._renewal import renew_until_lost
from .errors import (
    AuthenticationError,
    ConfigError,
    LeaseLostError,
    NotFoundError,
    RunstateError,
    ScopeCancelledError,
)
from .tasks import TaskTicket

__all__ = ["MailboxRef", "Delivery", "DEFAULT_CONSUME_WAIT_MS"]

# How long an idle consume() asks the server to hold an empty recv.
DEFAULT_CONSUME_WAIT_MS = 20_000
# The lease of a delivery from receive(); it is not renewed for the caller.
RECEIVE_LEASE_SECONDS = 30
# How often a long poll looks at the stop flag.
STOP_CHECK_S = 0.1
# An empty long-poll answer faster than this (or than wait_ms) is followed by a poll_ms pause.
EARLY_EMPTY_MS = 1000

_STOPPED = object()


class Delivery:
    """One leased message: `id`, `data`, `attempt`, `scope_id`, and how it ends."""

    def __init__(self, ctx: Context, raw: dict) -> None:
        message = raw["message"]
        self._ctx = ctx
        self.id: str = message["id"]
        self.data: Any = message.get("payload")
        self.attempt: int = message["attempt"]
        self.scope_id: str = message["scopeId"]
        self.deadline: str | None = message.get("deadline")
        self.task_id: str | None = message.get("taskId")
        self._token: str = raw["token"]
        self._settled = False
        self._lost = False

    def __repr__(self) -> str:
        return f"Delivery(id={self.id!r}, attempt={self.attempt!r}, settled={self._settled})"

    @property
    def settled(self) -> bool:
        """True once `complete`, `retry` or `reject` has been sent (or tried)."""
        return self._settled

    @property
    def is_lost(self) -> bool:
        """True once a renewal failed: the lease may belong to another worker now."""
        return self._lost

    async def complete(self, result: Any = None) -> None:
        """The work is done: the task records `result["payload"]` (or the whole result)."""
        await self._settle("complete", {"token": self._token, "result": result})

    async def retry(self) -> None:
        """Put it back on the queue (with backoff); the next delivery has `attempt + 1`."""
        await self._settle("nack", {"token": self._token, "retry": True})

    async def reject(self) -> None:
        """Dead-letter it without retry; its task becomes `FAILED`."""
        await self._settle("nack", {"token": self._token, "retry": False})

    async def renew(self, lease_seconds: int | None = None) -> None:
        """Extend the lease; without `lease_seconds` by the lease's own length."""
        try:
            await self._ctx.call(
                "POST", f"/messages/{self.id}/renew", body={"token": self._token, "leaseSeconds": lease_seconds}
            )
        except LeaseLostError:
            self._lost = True
            raise

    async def _settle(self, action: str, body: dict) -> None:
        # Marked before sending: a settlement that is under way or failed is not sent twice.
        if self._settled:
            return
        self._settled = True
        await self._ctx.call("POST", f"/messages/{self.id}/{action}", body=body)

    def _mark_lost(self, _err: BaseException) -> None:
        self._lost = True


class _NeverSet:
    def is_set(self) -> bool:
        return False


class _Running:
    """The handlers in flight of one consume() call."""

    def __init__(self) -> None:
        self.scopes: dict[Delivery, anyio.CancelScope] = {}
        self.changed = anyio.Event()

    def finished(self, delivery: Delivery) -> None:
        self.scopes.pop(delivery, None)
        self.changed.set()

    async def wait_all(self) -> None:
        while self.scopes:
            self.changed = anyio.Event()
            await self.changed.wait()


class MailboxRef:
    """A queue bound to a scope, by name (resolved once) or by id."""

    def __init__(self, ctx: Context, scope_id: str, name: str | None = None, mailbox_id: str | None = None) -> None:
        if name is None and mailbox_id is None:
            raise ValueError("a mailbox needs a name or an id")
        self._ctx = ctx
        self.scope_id = scope_id
        self.name = name
        self._id = mailbox_id

    @classmethod
    def by_name(cls, ctx: Context, scope_id: str, name: str) -> "MailboxRef":
        return cls(ctx, scope_id, name=name)

    @classmethod
    def by_id(cls, ctx: Context, scope_id: str, mailbox_id: str) -> "MailboxRef":
        return cls(ctx, scope_id, mailbox_id=mailbox_id)

    def __repr__(self) -> str:
        return f"MailboxRef(scope_id={self.scope_id!r}, name={self.name!r}, id={self._id!r})"

    async def resolve_id(self) -> str:
        """The mailbox id; the first call lists the mailboxes, later calls use the cached id."""
        if self._id is not None:
            return self._id
        rows = (await self._ctx.call("GET", "/mailboxes")).body["mailboxes"]
        for row in rows:
            if row["name"] == self.name:
                self._id = row["id"]
                return self._id
        raise NotFoundError("NOT_FOUND", 404, f"mailbox {self.name!r} not found in space {self._ctx.space_id}")

    # -- producers ------------------------------------------------------------------------------

    async def submit(
        self,
        input: Any,
        *,
        key: str,
        subscriber_id: str | None = None,
        deadline: str | None = None,
        requirements: dict | None = None,
        work_limit: str | None = None,
    ) -> TaskTicket:
        """Create the task `key` in this scope, or get the existing one (same input)."""
        body = {
            "scopeId": self.scope_id,
            "mailboxId": await self.resolve_id(),
            "taskKey": key,
            "input": input,
            "deadline": deadline,
            "subscriberId": subscriber_id,
            "requirements": requirements,
            "workLimit": work_limit,
        }
        reply = await self._ctx.call("POST", "/tasks", body=body)
        return TaskTicket(self._ctx, reply.body["taskId"], self.scope_id)

    async def send(self, data: Any, *, work_key: str | None = None, deadline: str | None = None) -> dict:
        """Put a plain message on the queue; a repeated `work_key` returns the original (`replay`)."""
        mailbox_id = await self.resolve_id()
        body = {"scopeId": self.scope_id, "payload": data, "workKey": work_key, "deadline": deadline}
        return (await self._ctx.call("POST", f"/mailboxes/{mailbox_id}/messages", body=body)).body

    # -- workers --------------------------------------------------------------------------------

    async def admit(self, *, lease_seconds: int = 30, wait_ms: int = 0) -> Any:  # -- capacity --
        """The oldest task delivery whose requirements all fit, taken with them (`runstate.capacity.admit`)."""
        from .capacity import admit

        return await admit(self, lease_seconds=lease_seconds, wait_ms=wait_ms)

    async def receive(self, *, wait_ms: int = 0) -> Delivery | None:
        """One delivery leased for 30 s (not renewed for you), or None if there is none.
        With `wait_ms` the server holds the request until a message comes or the wait ends."""
        raw = await self._recv(RECEIVE_LEASE_SECONDS, wait_ms)
        return None if raw is None else Delivery(self._ctx, raw)

    async def _recv(self, lease_seconds: int, wait_ms: int) -> dict | None:
        mailbox_id = await self.resolve_id()
        body = {
            "scopeId": self.scope_id,
            "holder": self._ctx.holder,
            "holderSession": self._ctx.session,
            "leaseSeconds": lease_seconds,
            "waitMs": wait_ms if wait_ms > 0 else None,
        }
        reply = await self._ctx.call("POST", f"/mailboxes/{mailbox_id}/recv", body=body, wait_ms=max(wait_ms, 0))
        return None if reply.status == 204 else reply.body

    async def _recv_until_stopped(self, lease_seconds: int, wait_ms: int, stop: Any) -> Any:
        """A long-poll recv that is abandoned (the request cancelled) as soon as `stop` is set."""
        outcome: dict[str, Any] = {}

        async def watch_stop(scope: anyio.CancelScope) -> None:
            while not stop.is_set():
                await anyio.sleep(STOP_CHECK_S)
            scope.cancel()

        async with anyio.create_task_group() as group:
            group.start_soon(watch_stop, group.cancel_scope)
            try:
                outcome["raw"] = await self._recv(lease_seconds, wait_ms)
            except Exception as err:  # raised below, outside the group, unwrapped
                outcome["error"] = err
            group.cancel_scope.cancel()
        if "error" in outcome:
            raise outcome["error"]
        return outcome.get("raw", _STOPPED)

    async def consume(
        self,
        handler: Callable[[Any, Delivery], Any],
        *,
        concurrency: int = 1,
        lease_seconds: int = 30,
        poll_ms: int = 250,
        wait_ms: int = DEFAULT_CONSUME_WAIT_MS,
        shutdown_timeout: float = 30.0,
        stop_event: Any = None,
        on_error: Callable[[BaseException, Delivery], Any] | None = None,
    ) -> None:
        """Run `handler(data, delivery)` for each delivery until stopped (see the module docstring).

        `handler` and `on_error` may be coroutine functions or plain functions; a plain handler
        runs in a worker thread so it cannot stall lease renewal.
        """
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        stop = stop_event if stop_event is not None else _NeverSet()
        running = _Running()
        failure: BaseException | None = None
        async with anyio.create_task_group() as group:
            failure = await self._intake(group, running, handler, stop, on_error, concurrency, lease_seconds, poll_ms, wait_ms)
            if failure is None:
                await self._drain(running, shutdown_timeout)
            # After a failure the handlers are not drained: they are cancelled, their leases expire.
            group.cancel_scope.cancel()
        if failure is not None:
            raise failure

    async def _intake(
        self,
        group: anyio.abc.TaskGroup,
        running: _Running,
        handler: Callable[[Any, Delivery], Any],
        stop: Any,
        on_error: Callable[[BaseException, Delivery], Any] | None,
        concurrency: int,
        lease_seconds: int,
        poll_ms: int,
        wait_ms: int,
    ) -> BaseException | None:
        """Take deliveries until stopped; returns the error consume() must raise, if any."""
        poll_s = poll_ms / 1000
        while not stop.is_set():
            if len(running.scopes) >= concurrency:
                await anyio.sleep(poll_s)
                continue
            started = anyio.current_time()
            try:
                if wait_ms > 0:
                    raw = await self._recv_until_stopped(lease_seconds, wait_ms, stop)
                    if raw is _STOPPED:
                        return None
                else:
                    raw = await self._recv(lease_seconds, 0)
            except (AuthenticationError, ConfigError, NotFoundError) as err:
                return err
            except ScopeCancelledError:
                return None
            except RunstateError:
                await anyio.sleep(poll_s)
                continue
            except Exception as err:  # a malformed answer: not ours to hide
                return err
            if raw is None:
                # After a real long poll, ask again at once; an early empty answer gets a pause.
                if wait_ms <= 0 or (anyio.current_time() - started) * 1000 < min(wait_ms, EARLY_EMPTY_MS):
                    await anyio.sleep(poll_s)
                continue
            try:
                delivery = Delivery(self._ctx, raw)
            except (KeyError, TypeError) as err:
                return err
            scope = anyio.CancelScope()
            running.scopes[delivery] = scope
            group.start_soon(self._handle, delivery, scope, running, handler, on_error, lease_seconds)
        return None

    async def _drain(self, running: _Running, shutdown_timeout: float) -> None:
        with anyio.move_on_after(shutdown_timeout):
            await running.wait_all()
        for delivery, scope in list(running.scopes.items()):
            if not delivery.settled and not delivery.is_lost:
                try:
                    await delivery.retry()  # put it back before its handler is cancelled
                except Exception:
                    pass
            scope.cancel()

    async def _handle(
        self,
        delivery: Delivery,
        scope: anyio.CancelScope,
        running: _Running,
        handler: Callable[[Any, Delivery], Any],
        on_error: Callable[[BaseException, Delivery], Any] | None,
        lease_seconds: int,
    ) -> None:
        try:
            with scope:
                async with anyio.create_task_group() as renewal:
                    renewal.start_soon(renew_until_lost, delivery.renew, lease_seconds, delivery._mark_lost)
                    try:
                        await _run_handler(delivery, handler, on_error)
                    finally:
                        renewal.cancel_scope.cancel()
        finally:
            running.finished(delivery)


async def _run_handler(
    delivery: Delivery,
    handler: Callable[[Any, Delivery], Any],
    on_error: Callable[[BaseException, Delivery], Any] | None,
) -> None:
    """Run one handler and settle its delivery; raises nothing but cancellation."""
    try:
        await _runtime.invoke(handler, delivery.data, delivery)
    except Exception as err:
        if on_error is not None:
            try:
                if _runtime.is_async_callable(on_error):
                    await on_error(err, delivery)
                else:
                    on_error(err, delivery)
            except Exception:
                _runtime.log.exception("on_error failed for delivery %s", delivery.id)
        if not delivery.settled and not delivery.is_lost:
            try:
                await delivery.retry()
            except Exception:
                pass
        return
    if not delivery.settled and not delivery.is_lost:
        try:
            await delivery.complete()
        except Exception:
            pass
