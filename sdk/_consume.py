"""The worker loop behind `MailboxRef.consume()` and the run-bound `serve()`.

A `Consumer` takes deliveries one at a time (`take`: a `recv`, or an admission), runs each in its
own task with its lease kept alive (`runstate._renewal`), and hands it to `work`, which runs the
caller's handler and settles the delivery. Its rules:

- **intake**: while not stopped, and while fewer than `concurrency` deliveries are in flight, take
  the next one: a look without a wait, which neither a stop nor a cancellation cuts (what it
  leased after a cancellation is put back at once), then, for an empty queue, a long poll of
  `wait_ms`, abandoned within 100 ms of a stop;
- **a lost delivery is told**: when its lease is lost (the server refused a renewal, or its end by
  the local clock passed while the server could not be reached), a coroutine handler is cancelled,
  and a plain one (in a worker thread, which cannot be interrupted) finds `delivery.is_lost` true
  and `delivery.raise_if_lost()` raising. Nothing is sent for it; the loss goes to `on_error` and
  a warning on the `runstate` logger;
- **settlements ride through outages**: a completion, retry or reject that cannot reach the server
  is sent again (with the same idempotency key) until the delivery's lease ends by the local
  clock, while its renewal goes on; after that it goes to `on_error` and a warning;
- **the run ending stops it at once**: a `recv` refused with `SCOPE_CANCELLED`, a renewal or a
  settlement refused so, or (while every handler slot is busy and no `recv` is in flight) a look
  at the run every `RUN_CHECK_S` that finds it no longer active: every handler in flight is told
  as for a lost lease (their tasks ended with the run on the server, so nothing is sent for them),
  and `consume()` returns;
- **stop**: no new work, up to `shutdown_timeout` seconds for the running handlers, then whatever
  is still unfinished is put back (before its handler is cancelled);
- **cancelled** (Ctrl-C, an enclosing timeout, a failing sibling task): every delivery still held is
  put back at once, shielded and bounded, then the cancellation goes on;
- **errors from intake**: an error that the same request would get again (`errors.is_permanent`:
  validation, authentication, configuration, not found) stops `consume()` with that error; any
  other error (the server unreachable or busy, a rate limit) is waited out and the loop goes on,
  visibly: a warning on the `runstate` logger names the server's URL at the first failure and again
  when it answers, `on_error(err, None)` is called for each failed try, and the pause doubles from
  `poll_ms` up to 5 s. With `give_up_after_s`, an outage that lasts that long raises its last error.

The stop flag may be an `asyncio.Event`, a `trio.Event`, an `anyio.Event` or the blocking client's
thread-safe flag: it is read with `is_set()`, never awaited, so any of them works under either
library.
"""

from __future__ import annotations

import functools
import weakref
from collections import deque
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Protocol, Union

import anyio
import anyio.abc

from . import _runtime
from ._context import Context
from .errors import RunstateError, ScopeCancelledError, is_permanent

if TYPE_CHECKING:
    from .mailboxes import Delivery

__all__ = ["Consumer", "StopFlag", "ErrorHandler", "STOPPED", "report", "give_back", "report_lost", "NeverSet", "ReturnedValue"]

# While every handler slot is busy (no recv in flight to hear it), how often the run is looked at.
RUN_CHECK_S = 0.5
# An empty long-poll answer faster than this (or than wait_ms) is followed by a poll_ms pause.
EARLY_EMPTY_MS = 1000
# The longest pause between two tries of intake while the server cannot be reached or is busy.
OUTAGE_PAUSE_MAX_S = 5.0

# What `take` returns when the stop flag ended its long poll.
STOPPED: Any = object()


class StopFlag(Protocol):
    """Anything with `is_set()`: an asyncio, trio or anyio event, a `threading.Event`."""

    def is_set(self) -> bool:
        """True once the worker loop should stop taking work; read, never awaited."""
        ...


class NeverSet:
    def is_set(self) -> bool:
        return False


ErrorHandler = Callable[[BaseException, Union["Delivery", None]], Union[Awaitable[Any], Any]]
"""`on_error(err, delivery)` of `consume()`, plain or `async def`: `delivery` is None for an
error about no delivery (the server could not be reached)."""
# Takes the next delivery: (wait_ms, stop) -> a Delivery, None when there is none, or STOPPED.
Take = Callable[[int, StopFlag], Awaitable[Any]]
# Takes up to `count` deliveries: (count, wait_ms, stop) -> a non-empty list, None, or STOPPED.
TakeMany = Callable[[int, int, StopFlag], Awaitable[Any]]
# Runs the handler on one delivery and settles it; raises nothing but cancellation.
Work = Callable[["Delivery"], Awaitable[None]]


async def report(on_error: ErrorHandler | None, err: BaseException, delivery: Delivery | None) -> None:
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


async def report_lost(on_error: ErrorHandler | None, delivery: Delivery) -> None:
    """A delivery lost while its handler ran: say so, unless its run ended (that is a stop)."""
    error = delivery.lost_error
    if error is None or isinstance(error, ScopeCancelledError):
        return
    _runtime.log.warning(
        "delivery %s (attempt %s) was lost: %s; nothing was sent for it, and the server hands it on "
        "once its lease runs out there", delivery.id, delivery.attempt, error,
    )
    await report(on_error, error, delivery)


# Handlers already told that a value they return is not recorded, held weakly: one warning per
# handler for the life of the process, however many consume() calls run it.
_TOLD_RETURNS: weakref.WeakKeyDictionary[Any, None] = weakref.WeakKeyDictionary()


class ReturnedValue:
    """Says once per handler, on the `runstate` logger, that a value it returned is not recorded.

    `consume()` completes a delivery whose handler returned without settling it, with no payload,
    as the product page says; a handler written as `return report` would otherwise see its tasks
    end `SUCCEEDED` with `outcome` None and no word. A handler that settles its delivery itself
    (`delivery.complete(result=...)`, `retry()`, `reject()`) is never warned about. The handler is
    known by what it wraps (`__wrapped__`, as the blocking client's thread wrapper sets) and by the
    function under a bound method, so a method or a wrapped function is told about once too."""

    def __init__(self, handler: Callable[..., Any], where: str) -> None:
        key = getattr(handler, "__wrapped__", handler)
        self.key = getattr(key, "__func__", key)
        self.where = where
        self.told = False

    def returned(self, value: Any) -> None:
        """The handler returned `value` and its delivery is about to be completed with no payload."""
        if value is None or self.told:
            return
        self.told = True
        try:
            if self.key in _TOLD_RETURNS:
                return
            _TOLD_RETURNS[self.key] = None
        except TypeError:
            pass  # not weakly referable: told once per consume() call instead
        name = getattr(self.key, "__qualname__", None) or repr(self.key)
        _runtime.log.warning(
            "%s: handler %s returned a value (%s), which is not recorded: consume() completes the "
            "delivery with no payload, so its task's outcome is None. To record a result, call "
            "`await delivery.complete(result={\"payload\": value})` in the handler (and return nothing). "
            "This is said once per handler.",
            self.where, name, type(value).__name__,
        )


async def give_back(delivery: Delivery, *, retry: bool, error: str | None = None, unhandled: bool = False) -> None:
    """Put a delivery back (or reject it), and say so if that fails too: its lease then runs out.
    One `unhandled` (never handed to a handler: taken ahead, or as its taker was cancelled) is
    returned without counting its attempt (`Delivery._return`); one a handler saw is retried, the
    attempt counted (a handler that dies on it every time must not get it forever)."""
    if not delivery._open:
        return
    assert retry or not unhandled, "work no handler saw is put back, never rejected"
    try:
        if unhandled:
            await delivery._return()
        else:
            await delivery._nack(retry=retry, error=error)
    except Exception as err:
        if isinstance(err, ScopeCancelledError):
            return  # its run ended: the server ended its task with it
        _runtime.log.warning(
            "could not %s delivery %s (%s); it goes back when its lease runs out",
            "put back" if retry else "reject", delivery.id, err,
        )


class _Running:
    """The deliveries in flight of one consumer, each with the cancel scope of its task."""

    def __init__(self) -> None:
        self.scopes: dict[Delivery, anyio.CancelScope] = {}
        self.changed = anyio.Event()

    def finished(self, delivery: Delivery) -> None:
        self.scopes.pop(delivery, None)
        self.changed.set()

    async def wait_change(self) -> None:
        self.changed = anyio.Event()
        await self.changed.wait()

    async def wait_all(self) -> None:
        while self.scopes:
            await self.wait_change()


class _Outage:
    """A run of failed intake calls: it is logged when it starts and when it ends, never silently."""

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


class Consumer:
    """One `consume()` (or `serve()`) call: intake, handlers in flight, and how it ends."""

    def __init__(
        self,
        ctx: Context,
        where: str,
        scope_id: str,
        take: Take,
        work: Work,
        *,
        concurrency: int,
        lease_seconds: int,
        poll_ms: int,
        wait_ms: int,
        shutdown_timeout: float,
        stop: StopFlag,
        on_error: ErrorHandler | None,
        give_up_after_s: float | None,
        prefetch: int = 1,
        take_many: TakeMany | None = None,
    ) -> None:
        self._ctx = ctx
        self.where = where
        self.scope_id = scope_id
        self._take = take
        self._take_many = take_many
        self._work = work
        self.concurrency = concurrency
        self.prefetch = prefetch
        # Deliveries held at once: those in handlers, and those received ahead of a free slot.
        self.capacity = max(concurrency, prefetch)
        # Deliveries received (their leases renewed) and not handed to a handler yet, oldest first.
        self._ahead: deque[Delivery] = deque()
        self.lease_seconds = lease_seconds
        self.poll_s = poll_ms / 1000
        self.wait_ms = wait_ms
        self.shutdown_timeout = shutdown_timeout
        self.stop = stop
        self.on_error = on_error
        self.outage = _Outage(where, ctx.requester.base_url, self.poll_s, give_up_after_s)
        self.running = _Running()
        # Set once the run is seen to have ended (by any of the ways in the module docstring).
        self.run_ended: ScopeCancelledError | None = None
        self._checked_at = -float("inf")
        # Cancelled when the run is seen to end elsewhere: a take in flight is abandoned.
        self._intake_scope = anyio.CancelScope()

    async def run(self) -> None:
        failure: BaseException | None = None
        holdings = self._ctx.holdings
        with anyio.CancelScope() as consumer:  # cancelled only by runstate.testing.crash()
            holdings.consumers.add(consumer)
            try:
                async with anyio.create_task_group() as group:
                    try:
                        with self._intake_scope:
                            failure = await self._intake(group)
                    finally:
                        await self._give_back_ahead()
                    if self.run_ended is not None:
                        self._tell_run_ended()
                    elif failure is None:
                        await self._drain()
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

    # -- intake -----------------------------------------------------------------------------------

    async def _intake(self, group: anyio.abc.TaskGroup) -> BaseException | None:
        """Take deliveries until stopped; returns the error the call must raise, if any."""
        outage, running, ahead = self.outage, self.running, self._ahead
        while not self.stop.is_set() and self.run_ended is None:
            in_handlers = len(running.scopes)
            if ahead and in_handlers < self.concurrency:
                self._start(group, ahead.popleft())
                continue
            if ahead or in_handlers >= self.capacity:
                await self._while_full()
                continue
            started = anyio.current_time()
            try:
                count = min(self.prefetch, self.capacity - in_handlers)
                if count > 1 and self._take_many is not None:
                    delivery = await self._take_many(count, self.wait_ms, self.stop)
                else:
                    delivery = await self._take(self.wait_ms, self.stop)
            except ScopeCancelledError as err:
                self._ended(err)
                return None
            except RunstateError as err:
                if is_permanent(err):
                    return err
                give_up = outage.failed(err)
                await report(self.on_error, err, None)
                if give_up:
                    return err
                await anyio.sleep(outage.pause_s())
                continue
            except Exception as err:  # a malformed answer, a crashed client: not ours to hide
                return err
            outage.answered()
            if delivery is STOPPED:
                return None
            if delivery is None:
                # After a real long poll, ask again at once; an early empty answer gets a pause.
                if self.wait_ms <= 0 or (anyio.current_time() - started) * 1000 < min(self.wait_ms, EARLY_EMPTY_MS):
                    await anyio.sleep(self.poll_s)
                continue
            if isinstance(delivery, list):
                for one in delivery:
                    self._keep(one)
                ahead.extend(delivery)
                continue
            self._keep(delivery)
            self._start(group, delivery)
        return None

    def _keep(self, delivery: Delivery) -> None:
        """Renew `delivery`'s lease from its receipt to its settlement (or its return)."""
        assert delivery._clock is not None, "a consumed delivery knows its lease"
        delivery.keep_renewed()
        delivery._when_lost(lambda: self._lost(delivery))

    def _start(self, group: anyio.abc.TaskGroup, delivery: Delivery) -> None:
        scope = anyio.CancelScope()
        self.running.scopes[delivery] = scope
        group.start_soon(self._handle, delivery, scope)

    async def _give_back_ahead(self) -> None:
        """The deliveries received ahead and never handed to a handler: put back at once (a stop,
        a failure, a cancellation), their attempts not counted, told as lost when the run ended,
        left alone after a crash."""
        ahead, self._ahead = list(self._ahead), deque()
        holdings = self._ctx.holdings
        for delivery in ahead:
            delivery.stop_renewing()
        if holdings.crashed or not ahead:
            return
        if self.run_ended is not None:
            for delivery in ahead:
                delivery._mark_lost(self.run_ended)
            return
        with anyio.move_on_after(self._ctx.cleanup_bound_s(), shield=True):
            async with anyio.create_task_group() as group:
                for delivery in ahead:
                    group.start_soon(functools.partial(give_back, delivery, retry=True, unhandled=True))

    async def _while_full(self) -> None:
        """Every slot is busy: wait for one to free (or a stop), and look at the run now and then,
        since no recv is in flight to hear that it ended."""
        with anyio.move_on_after(self.poll_s):
            await self.running.wait_change()
        now = anyio.current_time()
        if len(self.running.scopes) < self.concurrency or now - self._checked_at < RUN_CHECK_S:
            return
        self._checked_at = now
        try:
            view = (await self._ctx.call("GET", f"/scopes/{self.scope_id}")).body
        except ScopeCancelledError as err:
            self._ended(err)
            return
        except Exception as err:  # the handlers' own renewals ride out an outage; say it once
            if isinstance(err, RunstateError) and not is_permanent(err):
                self.outage.failed(err)
            else:
                _runtime.log.warning("%s: could not look at run %s: %s", self.where, self.scope_id, err)
            return
        self.outage.answered()
        effective = str(view.get("effective", "ACTIVE"))
        if effective != "ACTIVE":
            self._ended(ScopeCancelledError("SCOPE_CANCELLED", 409, f"scope {self.scope_id} is {effective.lower()}"))

    def end_run(self, error: ScopeCancelledError) -> None:
        """The run has ended (seen elsewhere): stop taking work and tell the handlers in flight."""
        self._ended(error)
        self._intake_scope.cancel()

    def _ended(self, error: ScopeCancelledError) -> None:
        if self.run_ended is None:
            self.run_ended = error
            self.running.changed.set()

    def _lost(self, delivery: Delivery) -> None:
        if not isinstance(delivery.lost_error, ScopeCancelledError):
            return
        if delivery.scope_id == self.scope_id:
            self._ended(delivery.lost_error)
        else:  # a child scope of the run ended (a gather's group, say): is the run itself still on?
            self._checked_at = -float("inf")

    def _tell_run_ended(self) -> None:
        error = self.run_ended
        assert error is not None
        in_flight = list(self.running.scopes)
        if in_flight:
            _runtime.log.info(
                "%s: the run ended (%s); stopping %d handler(s) in flight, whose tasks ended with it",
                self.where, error, len(in_flight),
            )
        for delivery in in_flight:
            delivery._mark_lost(error)

    async def _drain(self) -> None:
        with anyio.move_on_after(self.shutdown_timeout):
            await self.running.wait_all()
        for delivery, scope in list(self.running.scopes.items()):
            with anyio.move_on_after(self._ctx.cleanup_bound_s()):
                await give_back(delivery, retry=True)  # put it back before its handler is cancelled
            scope.cancel()

    # -- one delivery -----------------------------------------------------------------------------

    async def _handle(self, delivery: Delivery, scope: anyio.CancelScope) -> None:
        holdings = self._ctx.holdings
        holdings.deliveries.add(delivery)
        delivery._cancel = scope.cancel
        ended = False
        try:
            with scope:
                try:
                    if delivery._open:  # (lost while it waited for a slot: its handler is not run)
                        await self._work(delivery)
                    else:
                        await report_lost(self.on_error, delivery)
                    ended = True
                finally:
                    delivery.stop_renewing()
        finally:
            delivery._cancel = None
            holdings.deliveries.discard(delivery)
            self.running.finished(delivery)
            if not ended and delivery._open and not holdings.crashed:
                # Cancelled before the handler finished (Ctrl-C, an enclosing timeout, a failure
                # elsewhere in consume): hand the delivery back now rather than at lease expiry.
                with anyio.move_on_after(self._ctx.cleanup_bound_s(), shield=True):
                    await give_back(delivery, retry=True)
