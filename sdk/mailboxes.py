"""Mailboxes (work queues): submit tasks, send messages, receive and consume deliveries.

A `MailboxRef` is a queue name bound to a scope; the name is turned into an id with one
`GET /mailboxes` the first time it is needed, then cached. A `Delivery` is one leased message: the
lease belongs to this worker until it runs out, and the delivery settles once (`complete`, `retry`
or `reject`). It counts as settled only when the server accepted the settlement: a refused one
(a result over the size limit, a transport failure) raises and leaves it unsettled, so the next
call is sent. Once settled, further calls send nothing.

`consume()` is the worker loop. Its rules:

- arguments are checked before anything is sent (`lease_seconds` 5-600, `wait_ms` 0 or more, in
  the server's words);
- intake: while not stopped, and while fewer than `concurrency` handlers run, long-poll `recv`
  (`wait_ms`); the stop flag is checked every 100 ms and a stop cancels the long poll;
- each delivery runs `handler(data, delivery)` with its lease renewed in the background; a return
  completes it (unless the handler settled it), a raise calls `on_error(err, delivery)` and puts
  it back (`nack` with `retry: true`). A settlement the server refused counts as a raise: the
  delivery goes back at once, or is rejected when sending it again can never work (the refusal
  was a `ValidationError`, e.g. a result over the limit). A delivery whose renewal failed is lost
  and gets neither;
- on stop: no new work, up to `shutdown_timeout` seconds for the running handlers, then whatever
  is still unfinished is put back (before its handler is cancelled);
- cancelled (Ctrl-C, an enclosing timeout, a failing sibling task): every delivery still held is
  put back at once, shielded and bounded, then the cancellation goes on;
- errors from `recv`: `ScopeCancelledError` is a clean stop (with the drain); an error that the
  same request would get again (`errors.is_permanent`: validation, authentication, configuration,
  not found) stops `consume()` with that error; any other error (the server unreachable or busy, a
  rate limit) is waited out and the loop goes on, visibly: a warning on the `runstate` logger
  names the server's URL at the first failure and again when it answers, `on_error(err, None)` is
  called for each failed try, and the pause doubles from `poll_ms` up to 5 s. With
  `give_up_after_s`, an outage that lasts that long raises its last error instead.

The stop flag may be an `asyncio.Event`, a `trio.Event`, an `anyio.Event` or the blocking client's
thread-safe flag: it is read with `is_set()`, never awaited, so any of them works under either
library.
"""

from __future__ import annotations

from typing import Any, Awaitable, Callable, Mapping, Protocol, Union

import anyio
import anyio.abc

from . import _runtime
from ._checks import HOLDER_LEN_MAX, KEY_LEN_MAX, check_lease_seconds, check_positive, check_text, check_wait_ms
from ._context import Context
from ._renewal import renew_until_lost
from .errors import LeaseLostError, NotFoundError, RunstateError, ScopeCancelledError, is_permanent
from .tasks import TaskTicket
from .types import MailboxRow, MessageView

__all__ = ["MailboxRef", "Delivery", "StopFlag", "Handler", "ErrorHandler", "DEFAULT_CONSUME_WAIT_MS"]

# How long an idle consume() asks the server to hold an empty recv.
DEFAULT_CONSUME_WAIT_MS = 20_000
# The lease of a delivery from receive(); it is not renewed for the caller.
RECEIVE_LEASE_SECONDS = 30
# How often a long poll looks at the stop flag.
STOP_CHECK_S = 0.1
# An empty long-poll answer faster than this (or than wait_ms) is followed by a poll_ms pause.
EARLY_EMPTY_MS = 1000
# The longest pause between two tries of recv while the server cannot be reached or is busy.
OUTAGE_PAUSE_MAX_S = 5.0

_STOPPED = object()


class StopFlag(Protocol):
    """Anything with `is_set()`: an asyncio, trio or anyio event, a `threading.Event`."""

    def is_set(self) -> bool: ...


Handler = Callable[[Any, "Delivery"], Union[Awaitable[Any], Any]]
ErrorHandler = Callable[[BaseException, Union["Delivery", None]], Union[Awaitable[Any], Any]]


class Delivery:
    """One leased message: `id`, `data`, `attempt`, `scope_id`, and how it ends."""

    def __init__(self, ctx: Context, raw: Mapping[str, Any]) -> None:
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
        self._crashed = False
        # The last settlement the server refused, so consume() knows whether to retry or reject.
        self._refusal: BaseException | None = None
        self._lock = anyio.Lock()
        # Set by consume() while a handler works on it: stops the handler and its renewal.
        self._cancel: Callable[[], None] | None = None

    def __repr__(self) -> str:
        return f"Delivery(id={self.id!r}, attempt={self.attempt!r}, settled={self._settled})"

    @property
    def settled(self) -> bool:
        """True once the server accepted `complete`, `retry` or `reject`."""
        return self._settled

    @property
    def is_lost(self) -> bool:
        """True once a renewal or a settlement was refused as stale: the lease may belong to
        another worker now."""
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
        if lease_seconds is not None:
            check_lease_seconds(lease_seconds)
        if self._crashed:
            return
        try:
            await self._ctx.call(
                "POST", f"/messages/{self.id}/renew", body={"token": self._token, "leaseSeconds": lease_seconds}
            )
        except LeaseLostError:
            self._lost = True
            raise

    async def _settle(self, action: str, body: dict[str, Any]) -> None:
        # One settlement in flight at a time; it counts only once the server has accepted it.
        async with self._lock:
            if self._settled or self._crashed:
                return
            try:
                await self._ctx.call("POST", f"/messages/{self.id}/{action}", body=body)
            except LeaseLostError as err:
                self._lost = True
                self._refusal = err
                raise
            except Exception as err:
                self._refusal = err
                raise
            self._settled = True
            self._refusal = None

    @property
    def _open(self) -> bool:
        """Still ours to settle: not settled, not lost, not crashed."""
        return not (self._settled or self._lost or self._crashed)

    def _mark_lost(self, _err: BaseException) -> None:
        self._lost = True

    def _crash(self) -> None:
        """Stop renewing and never settle, as a process that died would (`runstate.testing.crash`)."""
        self._crashed = True
        if self._cancel is not None:
            self._cancel()


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


class _Outage:
    """A run of failed recv calls: it is logged when it starts and when it ends, never silently."""

    def __init__(self, where: str, base_url: str, poll_s: float, give_up_after_s: float | None) -> None:
        self.where = where
        self.base_url = base_url
        self.poll_s = poll_s
        self.give_up_after_s = give_up_after_s
        self.started: float | None = None
        self.failures = 0

    def failed(self, err: BaseException) -> bool:
        """Record a failure; True when the outage has lasted `give_up_after_s`."""
        now = anyio.current_time()
        self.failures += 1
        if self.started is None:
            self.started = now
            _runtime.log.warning(
                "%s: the runstate server at %s failed to answer (%s); polling again until it does",
                self.where, self.base_url, err,
            )
        return self.give_up_after_s is not None and now - self.started >= self.give_up_after_s

    def pause_s(self) -> float:
        pause: float = min(self.poll_s * 2.0 ** (self.failures - 1), OUTAGE_PAUSE_MAX_S)
        if self.give_up_after_s is not None and self.started is not None:
            # Never sleep past the moment to give up: the last try comes when the time is up.
            left = self.started + self.give_up_after_s - anyio.current_time()
            pause = max(0.0, min(pause, left))
        return pause

    def answered(self) -> None:
        if self.started is None:
            return
        _runtime.log.warning(
            "%s: the runstate server at %s answers again, after %.1f s and %d failed tries",
            self.where, self.base_url, anyio.current_time() - self.started, self.failures,
        )
        self.started = None
        self.failures = 0


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
    def by_name(cls, ctx: Context, scope_id: str, name: str) -> MailboxRef:
        return cls(ctx, scope_id, name=name)

    @classmethod
    def by_id(cls, ctx: Context, scope_id: str, mailbox_id: str) -> MailboxRef:
        return cls(ctx, scope_id, mailbox_id=mailbox_id)

    def __repr__(self) -> str:
        return f"MailboxRef(scope_id={self.scope_id!r}, name={self.name!r}, id={self._id!r})"

    async def resolve_id(self) -> str:
        """The mailbox id; the first call lists the mailboxes, later calls use the cached id."""
        if self._id is not None:
            return self._id
        rows: list[MailboxRow] = (await self._ctx.call("GET", "/mailboxes")).body["mailboxes"]
        for row in rows:
            if row["name"] == self.name:
                self._id = row["id"]
                return row["id"]
        raise NotFoundError("NOT_FOUND", 404, f"mailbox {self.name!r} not found in space {self._ctx.space_id}")

    # -- producers ------------------------------------------------------------------------------

    async def submit(
        self,
        input: Any,
        *,
        key: str,
        subscriber_id: str | None = None,
        deadline: str | None = None,
        requirements: dict[str, Any] | None = None,
        work_limit: str | None = None,
    ) -> TaskTicket:
        """Create the task `key` in this scope, or get the existing one (same input)."""
        check_text("taskKey", key, KEY_LEN_MAX)
        if subscriber_id is not None:
            check_text("subscriberId", subscriber_id, HOLDER_LEN_MAX)
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

    async def send(self, data: Any, *, work_key: str | None = None, deadline: str | None = None) -> MessageView:
        """Put a plain message on the queue; a repeated `work_key` returns the original (`replay`)."""
        if work_key is not None:
            check_text("workKey", work_key, KEY_LEN_MAX)
        mailbox_id = await self.resolve_id()
        body = {"scopeId": self.scope_id, "payload": data, "workKey": work_key, "deadline": deadline}
        view: MessageView = (await self._ctx.call("POST", f"/mailboxes/{mailbox_id}/messages", body=body)).body
        return view

    # -- workers --------------------------------------------------------------------------------

    async def admit(self, *, lease_seconds: int = 30, wait_ms: int = 0) -> Any:  # -- capacity --
        """The oldest task delivery whose requirements all fit, taken with them (`runstate.capacity.admit`)."""
        from .capacity import admit

        return await admit(self, lease_seconds=lease_seconds, wait_ms=wait_ms)

    async def receive(self, *, wait_ms: int = 0) -> Delivery | None:
        """One delivery leased for 30 s (not renewed for you), or None if there is none.
        With `wait_ms` the server holds the request until a message comes or the wait ends."""
        raw = await self._recv(RECEIVE_LEASE_SECONDS, check_wait_ms(wait_ms))
        return None if raw is None else Delivery(self._ctx, raw)

    async def _recv(self, lease_seconds: int, wait_ms: int) -> dict[str, Any] | None:
        mailbox_id = await self.resolve_id()
        body = {
            "scopeId": self.scope_id,
            "holder": self._ctx.holder,
            "holderSession": self._ctx.session,
            "leaseSeconds": lease_seconds,
            "waitMs": wait_ms if wait_ms > 0 else None,
        }
        reply = await self._ctx.call("POST", f"/mailboxes/{mailbox_id}/recv", body=body, wait_ms=max(wait_ms, 0))
        if reply.status == 204:
            return None
        raw: dict[str, Any] = reply.body
        return raw

    async def _recv_until_stopped(self, lease_seconds: int, wait_ms: int, stop: StopFlag) -> Any:
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
        handler: Handler,
        *,
        concurrency: int = 1,
        lease_seconds: int = 30,
        poll_ms: int = 250,
        wait_ms: int = DEFAULT_CONSUME_WAIT_MS,
        shutdown_timeout: float = 30.0,
        stop_event: StopFlag | None = None,
        on_error: ErrorHandler | None = None,
        give_up_after_s: float | None = None,
    ) -> None:
        """Run `handler(data, delivery)` for each delivery until stopped (see the module docstring).

        `handler` and `on_error` may be coroutine functions or plain functions; a plain handler
        runs in a worker thread so it cannot stall lease renewal. `on_error(err, delivery)` gets
        `delivery=None` for an error that is about no delivery (the server could not be reached).
        `give_up_after_s`: raise the last error once the server has failed to answer for this
        long without a break (default: keep trying for as long as it takes).
        """
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise ValueError(f"concurrency must be an integer of at least 1, got {concurrency!r}")
        check_lease_seconds(lease_seconds)
        check_wait_ms(wait_ms)
        check_positive("poll_ms", poll_ms)
        check_positive("shutdown_timeout", shutdown_timeout, allow_zero=True)
        if give_up_after_s is not None:
            check_positive("give_up_after_s", give_up_after_s, allow_zero=True)
        stop: StopFlag = stop_event if stop_event is not None else _NeverSet()
        outage = _Outage(
            f"consume({self.name or self._id!r})", self._ctx.requester.base_url, poll_ms / 1000, give_up_after_s
        )
        running = _Running()
        failure: BaseException | None = None
        holdings = self._ctx.holdings
        with anyio.CancelScope() as consumer:  # cancelled only by runstate.testing.crash()
            holdings.consumers.add(consumer)
            try:
                async with anyio.create_task_group() as group:
                    failure = await self._intake(
                        group, running, handler, stop, on_error, concurrency, lease_seconds, poll_ms, wait_ms, outage
                    )
                    if failure is None:
                        await self._drain(running, shutdown_timeout)
                    # After a failure the handlers are cancelled; each puts its delivery back.
                    group.cancel_scope.cancel()
            except BaseExceptionGroup as errors:
                # A KeyboardInterrupt (or another BaseException) from inside a handler comes out
                # as itself, not wrapped in a group: `except KeyboardInterrupt` must catch it.
                single = _runtime.single_error(errors)
                if single is errors:
                    raise
                raise single from None
            finally:
                holdings.consumers.discard(consumer)
        if failure is not None:
            raise failure

    async def _intake(
        self,
        group: anyio.abc.TaskGroup,
        running: _Running,
        handler: Handler,
        stop: StopFlag,
        on_error: ErrorHandler | None,
        concurrency: int,
        lease_seconds: int,
        poll_ms: int,
        wait_ms: int,
        outage: _Outage,
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
            except ScopeCancelledError:
                return None
            except RunstateError as err:
                if is_permanent(err):
                    return err
                give_up = outage.failed(err)
                await _report(on_error, err, None)
                if give_up:
                    return err
                await anyio.sleep(outage.pause_s())
                continue
            except Exception as err:  # a malformed answer, a crashed client: not ours to hide
                return err
            outage.answered()
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
            await _give_back(delivery, retry=True)  # put it back before its handler is cancelled
            scope.cancel()

    async def _handle(
        self,
        delivery: Delivery,
        scope: anyio.CancelScope,
        running: _Running,
        handler: Handler,
        on_error: ErrorHandler | None,
        lease_seconds: int,
    ) -> None:
        holdings = self._ctx.holdings
        holdings.deliveries.add(delivery)
        delivery._cancel = scope.cancel
        ended = False
        try:
            with scope:
                async with anyio.create_task_group() as renewal:
                    renewal.start_soon(renew_until_lost, delivery.renew, lease_seconds, delivery._mark_lost)
                    try:
                        await _run_handler(delivery, handler, on_error)
                        ended = True
                    finally:
                        renewal.cancel_scope.cancel()
        finally:
            delivery._cancel = None
            holdings.deliveries.discard(delivery)
            running.finished(delivery)
            if not ended and delivery._open and not holdings.crashed:
                # Cancelled before the handler finished (Ctrl-C, an enclosing timeout, a failure
                # elsewhere in consume): hand the delivery back now rather than at lease expiry.
                with anyio.move_on_after(self._ctx.cleanup_bound_s(), shield=True):
                    await _give_back(delivery, retry=True)


async def _report(on_error: ErrorHandler | None, err: BaseException, delivery: Delivery | None) -> None:
    """Tell the caller's `on_error`; an `on_error` that raises is logged, never propagated."""
    if on_error is None:
        return
    try:
        if _runtime.is_async_callable(on_error):
            await on_error(err, delivery)
        else:
            on_error(err, delivery)
    except Exception:
        what = "consume()" if delivery is None else f"delivery {delivery.id}"
        _runtime.log.exception("on_error failed for %s", what)


async def _give_back(delivery: Delivery, *, retry: bool) -> None:
    """Put a delivery back (or reject it), and say so if that fails too: its lease then runs out."""
    if not delivery._open:
        return
    try:
        await (delivery.retry() if retry else delivery.reject())
    except Exception as err:
        _runtime.log.warning(
            "could not %s delivery %s (%s); it goes back when its lease runs out",
            "put back" if retry else "reject", delivery.id, err,
        )


async def _run_handler(delivery: Delivery, handler: Handler, on_error: ErrorHandler | None) -> None:
    """Run one handler and settle its delivery; raises nothing but cancellation."""
    try:
        await _runtime.invoke(handler, delivery.data, delivery)
        if delivery._open:
            await delivery.complete()
    except Exception as err:
        await _report(on_error, err, delivery)
        # A settlement refused as a bad request would be refused again after any number of
        # retries (the handler would make the same result): reject it rather than loop.
        refusal = delivery._refusal
        await _give_back(delivery, retry=refusal is None or not is_permanent(refusal))
