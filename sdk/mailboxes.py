"""Mailboxes (work queues): submit tasks, send messages, receive and consume deliveries.

A `MailboxRef` is a queue name bound to a scope; the name is turned into an id with one
`GET /mailboxes` the first time it is needed, then cached. A `Delivery` is one leased message: the
lease belongs to this worker until it runs out, and the delivery settles once (`complete`, `retry`
or `reject`). It counts as settled only when the server accepted the settlement: a refused one
(a result over the size limit, a transport failure) raises and leaves it unsettled, so the next
call is sent. Once settled, further calls send nothing.

`consume()` is the worker loop (`runstate._consume` has its rules): each delivery runs
`handler(data, delivery)` with its lease renewed in the background; a return completes it (unless
the handler settled it), a raise calls `on_error(err, delivery)` and puts it back (`nack` with
`retry: true`). A settlement the server refused counts as a raise: the delivery goes back at once,
or is rejected when sending it again can never work (the refusal was a `ValidationError`, e.g. a
result over the limit). A settlement that cannot reach the server is sent again until the
delivery's lease ends. A lost delivery (its lease lost, or its run ended) is told: a coroutine
handler is cancelled, a plain one sees `delivery.is_lost`; nothing is sent for it.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Awaitable, Callable, Mapping, Union

import anyio

from . import _runtime
from . import _checks, _keys
from ._checks import HOLDER_LEN_MAX, KEY_LEN_MAX, check_id, check_lease_seconds, check_positive, check_text, check_wait_ms
from ._consume import STOPPED, Consumer, ErrorHandler, NeverSet, ReturnedValue, StopFlag, give_back, report, report_lost
from ._context import Context
from ._grace import let_finish
from ._renewal import Kept, LeaseClock, send_through
from .claims import parse_timestamp
from .errors import LeaseLostError, NotFoundError, ScopeCancelledError, is_permanent
from .tasks import TaskTicket
from .types import MailboxRow, MessageView

__all__ = ["MailboxRef", "Delivery", "StopFlag", "Handler", "ErrorHandler", "DEFAULT_CONSUME_WAIT_MS", "REASON_LEN_MAX", "NAME_LEN_MAX"]

REASON_LEN_MAX = _checks.REASON_LEN_MAX
"""The longest reason of a delivery's `retry()` or `reject()` (kept as its task's `outcomeReason`),
in characters."""
NAME_LEN_MAX = _keys.NAME_LEN_MAX
"""The longest name of a mailbox (a queue), in characters: the server's default limit of a name."""
# How long an idle consume() asks the server to hold an empty recv.
DEFAULT_CONSUME_WAIT_MS = 20_000
"""How long an idle `consume()` asks the server to hold an empty receive (`wait_ms`)."""
# The lease of a delivery from receive() unless it asks for another; it is not renewed for the
# caller unless asked (`keep_renewed()`).
RECEIVE_LEASE_SECONDS = 30
# The longest a server holds one recv (its wait_ms_max, 30 s by default): receive() asks again for
# the rest of a longer wait.
RECV_WAIT_MS_MAX = 30_000
# How often a long poll looks at the stop flag.
STOP_CHECK_S = 0.1
# The most deliveries one consume() takes in one request (the server's receive_count_max is 100).
PREFETCH_MAX = 100

Handler = Callable[[Any, "Delivery"], Union[Awaitable[Any], Any]]
"""A `consume()` handler: `handler(data, delivery)`, plain (run in a worker thread) or `async
def`. What it returns is not recorded: record a result with `delivery.complete(result=...)`."""


class Delivery:
    """One leased message: `id`, `data` (its payload), `attempt` (1 on the first delivery),
    `scope_id`, `task_id` (None for a plain message), `deadline`, `expires_at` (the lease's end as
    the server last said it), and how it ends: `complete(result)`, `retry()` or `reject()`, once.
    `lost_error` says why the lease was lost.

    `is_lost` turns true when the lease is lost: the server refused a renewal or a settlement as
    stale, the run ended, or the lease's end by this process's clock passed without a renewal
    (`runstate._renewal`). A settlement that cannot reach the server is sent again, with the same
    idempotency key, until then; after that it raises its last error.

    A delivery from `receive()` or `admit()` is renewed only when asked: `renew()` once, or
    `keep_renewed()` in the background until it is settled (as `consume()` keeps its handlers').
    """

    def __init__(
        self, ctx: Context, raw: Mapping[str, Any], *, lease_seconds: int | None = None, sent_at: float | None = None
    ) -> None:
        message = raw["message"]
        self._ctx = ctx
        self.id: str = message["id"]
        self.data: Any = message.get("payload")
        self.attempt: int = message["attempt"]
        self.scope_id: str = message["scopeId"]
        self.deadline: str | None = message.get("deadline")
        self.task_id: str | None = message.get("taskId")
        self._token: str = raw["token"]
        expires = raw.get("leaseExpiresAt")
        self.expires_at: datetime | None = None if expires is None else parse_timestamp(expires)
        self._settled = False
        self._lost = False
        self._crashed = False
        self.lost_error: BaseException | None = None
        # The last settlement the server refused, so consume() knows whether to retry or reject.
        self._refusal: BaseException | None = None
        self._lock = anyio.Lock()
        # Set by consume() while a handler works on it: stops the handler and its renewal.
        self._cancel: Callable[[], None] | None = None
        # Its place among the leases the client renews together, while it is kept renewed.
        self._kept: Kept | None = None
        self._lost_callbacks: list[Callable[[], None]] = []
        # When the lease ends by this process's clock, if the caller said when it was asked for.
        self._clock = None if lease_seconds is None or sent_at is None else LeaseClock(lease_seconds, sent_at)

    def __repr__(self) -> str:
        return f"Delivery(id={self.id!r}, attempt={self.attempt!r}, settled={self._settled})"

    @property
    def settled(self) -> bool:
        """True once the server accepted `complete`, `retry` or `reject`."""
        return self._settled

    @property
    def is_lost(self) -> bool:
        """True once the lease is lost: refused as stale, its run ended, or its end by this
        process's clock passed without a renewal. The lease may belong to another worker now."""
        if self._lost:
            return True
        clock = self._clock
        return clock is not None and not self._crashed and not self._settled and clock.expired()

    def raise_if_lost(self) -> None:
        """Raise `LeaseLostError` (or the `ScopeCancelledError` that ended its run) if it is lost."""
        if not self.is_lost:
            return
        if isinstance(self.lost_error, ScopeCancelledError):
            raise self.lost_error
        raise LeaseLostError("STALE_CLAIM", 409, f"the lease on delivery {self.id} was lost") from self.lost_error

    async def complete(self, result: Any = None) -> None:
        """The work is done: the task records `result` (`result["payload"]` when `payload` is its only field)."""
        await self._settle("complete", {"token": self._token, "result": result})

    async def retry(self, reason: str | None = None) -> None:
        """Put it back on the queue (with backoff); the next delivery has `attempt + 1`.

        `reason` (at most 2000 characters) says why. It is kept with the task: if this was its
        last attempt, the task ends `FAILED` with `outcomeReason` `handler_error: <reason>` and
        the attempts used."""
        await self._nack(retry=True, error=_reason(reason))

    async def reject(self, reason: str | None = None) -> None:
        """Dead-letter it without retry; its task becomes `FAILED`, with `outcomeReason`
        `handler_error: <reason>` when `reason` (at most 2000 characters) is given."""
        await self._nack(retry=False, error=_reason(reason))

    def keep_renewed(self) -> None:
        """Renew the lease in the background from now on, as `consume()` renews a handler's.

        It is renewed with the client's other leases (every third of its length, all due at once
        in one request), riding through an outage until its end by this process's clock, until
        it is settled (`complete`, `retry`, `reject`), lost, `stop_renewing()` is called or the
        client closes (which counts it lost). A renewal the server refuses (the lease went
        stale, the run ended), or the lease's end passing without one, loses it: `is_lost` turns
        true and `lost_error` says why. A second call does nothing; nor does a call on a delivery
        already settled or lost."""
        if self._kept is not None or not self._open:
            return
        clock = self._clock
        if clock is None:
            raise ValueError(f"delivery {self.id} was made without its lease's length: it cannot be kept renewed")
        self._kept = Kept(self._ctx, clock, self._renewal_request, self._renewal_reply, self._mark_lost, f"delivery {self.id}")
        self._ctx.holdings.renewals.add(self._kept)
        self._ctx.holdings.deliveries.add(self)

    def stop_renewing(self) -> None:
        """Stop the background renewal of `keep_renewed()` without settling: the delivery stays
        leased until its lease runs out, and then the server hands it to another worker (as
        the next attempt). Settling it stops the renewal by itself."""
        kept, self._kept = self._kept, None
        if kept is not None:
            self._ctx.holdings.renewals.remove(kept)
        self._ctx.holdings.deliveries.discard(self)

    async def _nack(self, *, retry: bool, error: str | None = None) -> None:
        await self._settle("nack", {"token": self._token, "retry": retry, "error": error})

    async def _return(self) -> None:
        """Give it back unhandled (`/return`): queued again at once, in its place, the attempt not
        counted against the mailbox's `maxAttempts`, so that work taken and never handed to a
        handler (a cancelled receive, a stopped `consume()`'s work taken ahead) cannot use up a
        message's attempts. A server without that route (404) is asked to retry it instead, the
        attempt then counted."""
        try:
            await self._settle("return", {"token": self._token})
        except NotFoundError:
            await self._nack(retry=True)

    async def renew(self, lease_seconds: int | None = None) -> None:
        """Extend the lease; without `lease_seconds` by the lease's own length."""
        if lease_seconds is not None:
            check_lease_seconds(lease_seconds)
        if self._crashed:
            return
        sent = anyio.current_time()
        try:
            await self._renew_request(lease_seconds)
        except (LeaseLostError, ScopeCancelledError) as err:
            self._mark_lost(err)
            raise
        if self._clock is not None:
            self._clock.renewed(sent, lease_seconds)

    async def _renew_request(self, lease_seconds: int | None) -> None:
        suffix, body = self._renewal_request(lease_seconds)
        self._renewal_reply((await self._ctx.call("POST", suffix, body=body)).body)

    def _renewal_request(self, lease_seconds: int | None) -> tuple[str, dict[str, Any]]:
        """The renewal's path and body (sent alone, or with the client's other renewals)."""
        return f"/messages/{self.id}/renew", {"token": self._token, "leaseSeconds": lease_seconds}

    def _renewal_reply(self, body: Any) -> None:
        """A renewal's answer: the lease's new end."""
        if isinstance(body, Mapping) and body.get("leaseExpiresAt"):
            self.expires_at = parse_timestamp(body["leaseExpiresAt"])

    async def _settle(self, action: str, body: dict[str, Any]) -> None:
        # One settlement in flight at a time; it counts only once the server has accepted it.
        async with self._lock:
            if self._settled or self._crashed:
                return
            path = f"/messages/{self.id}/{action}"

            async def send(key: str) -> None:
                await self._ctx.call("POST", path, body=body, idempotency_key=key, batch=True)

            try:
                await send_through(send, self._clock, f"delivery {self.id}: {action}", self._ctx.requester.rng)
            except (LeaseLostError, ScopeCancelledError) as err:
                self._refusal = err
                self._mark_lost(err)
                raise
            except Exception as err:
                self._refusal = err
                raise
            self._settled = True
            self._refusal = None
            self.stop_renewing()  # (kept renewed until now: an outage ridden through needed it)

    @property
    def _open(self) -> bool:
        """Still ours to settle: not settled, not lost, not crashed."""
        return not (self._settled or self.is_lost or self._crashed)

    def _mark_lost(self, err: BaseException) -> None:
        if self._lost:
            return
        self._lost = True
        self.lost_error = err
        self.stop_renewing()
        callbacks, self._lost_callbacks = self._lost_callbacks, []
        for callback in callbacks:
            callback()

    def _when_lost(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call `callback` when the delivery is lost (now, if it already is); returns an unsubscribe."""
        if self._lost:
            callback()
            return lambda: None
        self._lost_callbacks.append(callback)

        def unsubscribe() -> None:
            if callback in self._lost_callbacks:
                self._lost_callbacks.remove(callback)

        return unsubscribe

    def _crash(self) -> None:
        """Stop renewing and never settle, as a process that died would (`runstate.testing.crash`)."""
        self._crashed = True
        self.stop_renewing()
        if self._cancel is not None:
            self._cancel()


def _reason(reason: str | None) -> str | None:
    """A retry's or a reject's reason, checked as the server would (None: no reason)."""
    return None if reason is None else check_text("reason", reason, REASON_LEN_MAX)


class MailboxRef:
    """A queue bound to a run (`run.mailbox(name)`), by name (resolved once) or by id: its
    `scope_id` and `name` (None when made by id).

    Producers `submit()` tasks and `send()` messages; workers `consume()`, `receive()` or
    `admit()` deliveries. The queue must exist first: `rs.mailboxes.ensure(name, mode="WORK")`."""

    def __init__(self, ctx: Context, scope_id: str, name: str | None = None, mailbox_id: str | None = None) -> None:
        if name is None and mailbox_id is None:
            raise ValueError("a mailbox needs a name or an id")
        self._ctx = ctx
        self.scope_id = scope_id
        self.name = name
        self._id = None if mailbox_id is None else check_id("mailbox_id", mailbox_id)

    @classmethod
    def by_name(cls, ctx: Context, scope_id: str, name: str) -> MailboxRef:
        """The queue `name` in the run `scope_id` (`run.mailbox(name)` is the usual way)."""
        return cls(ctx, scope_id, name=name)

    @classmethod
    def by_id(cls, ctx: Context, scope_id: str, mailbox_id: str) -> MailboxRef:
        """The queue with this id in the run `scope_id` (`run.mailbox_by_id(id)`)."""
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
        raise NotFoundError(
            "NOT_FOUND", 404,
            f"mailbox {self.name!r} not found in space {self._ctx.space_id}: create it first, once, with "
            f"`await rs.mailboxes.ensure({self.name!r}, mode=\"WORK\")` (a work queue for tasks; leave out "
            "`mode` for plain messages), or `runstate.setup()` for the run-bound API",
        )

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
        """Create the task `key` in this run, or get the existing one (same input): any number
        of callers submitting the same key share one task and its single result.

        `input` is the task's payload (JSON); `subscriber_id` records who is interested;
        `deadline` (ISO 8601) makes it `EXPIRED` if it has not finished by then; `requirements`
        (pools, quotas, budgets it needs) and `work_limit` hold it until they fit. Returns a
        `TaskTicket`: `await ticket.result()` waits for its outcome. The same key with another
        input raises `ConflictError` (`IDEMPOTENCY_CONFLICT`)."""
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
        reply = await self._ctx.call("POST", "/tasks", body=body, batch=True)
        return TaskTicket(self._ctx, reply.body["taskId"], self.scope_id)

    async def send(self, data: Any, *, work_key: str | None = None, deadline: str | None = None) -> MessageView:
        """Put a plain message on the queue; a repeated `work_key` returns the original (`replay`)."""
        if work_key is not None:
            check_text("workKey", work_key, KEY_LEN_MAX)
        mailbox_id = await self.resolve_id()
        body = {"scopeId": self.scope_id, "payload": data, "workKey": work_key, "deadline": deadline}
        view: MessageView = (await self._ctx.call("POST", f"/mailboxes/{mailbox_id}/messages", body=body, batch=True)).body
        return view

    # -- workers --------------------------------------------------------------------------------

    async def admit(self, *, lease_seconds: int = 30, wait_ms: int = 0) -> Any:  # -- capacity --
        """The oldest task delivery whose requirements all fit, taken with them (`runstate.capacity.admit`)."""
        from .capacity import admit

        return await admit(self, lease_seconds=lease_seconds, wait_ms=wait_ms)

    async def receive(self, *, wait_ms: int = 0, lease_seconds: int = RECEIVE_LEASE_SECONDS) -> Delivery | None:
        """One delivery leased for `lease_seconds` (30 by default, 5 to 600), or None if there is
        none. Its lease is not renewed for you: `delivery.renew()` extends it once, and
        `delivery.keep_renewed()` renews it in the background until it is settled.

        With `wait_ms` the server holds the request until a message comes or the wait ends. A
        server holds one request at most 30 s (its `wait_ms_max`): a longer wait is made of as
        many long polls as it takes, so None comes only once the whole `wait_ms` has passed (or
        the server ended a wait early, as it does when it shuts down).

        It looks first without a wait, which a cancellation does not cut: a delivery that comes
        back after the cancellation is put back at once. Only the wait on an empty queue is cut
        (see docs/python.md, "Cancelling a call")."""
        wait_ms = check_wait_ms(wait_ms)
        check_lease_seconds(lease_seconds)
        deadline = anyio.current_time() + wait_ms / 1000
        # A first look without a wait, which a cancellation does not cut (`_recv_at_once`); only an
        # empty queue is then waited on, in requests a cancellation cuts.
        sent = anyio.current_time()
        raw = await self._recv_at_once(lease_seconds)
        if raw is not None:
            return Delivery(self._ctx, raw, lease_seconds=lease_seconds, sent_at=sent)
        while True:
            left_ms = max(0, round((deadline - anyio.current_time()) * 1000))
            if left_ms <= 0:
                return None
            sent = anyio.current_time()
            raw = await self._recv(lease_seconds, left_ms)
            if raw is not None:  # a held recv leases as it answers
                return Delivery(self._ctx, raw, lease_seconds=lease_seconds, sent_at=anyio.current_time())
            held_ms = (anyio.current_time() - sent) * 1000
            # Again only when the server held the request its whole capped wait and time is left.
            if left_ms <= RECV_WAIT_MS_MAX or held_ms < RECV_WAIT_MS_MAX * 0.9 or anyio.current_time() >= deadline:
                return None

    async def _recv_at_once(self, lease_seconds: int, count: int = 0) -> Any:
        """A recv (of up to `count` deliveries, if given) without a wait, not cut by a cancellation
        of the caller: the server leases a message even to a request whose connection was cut, and
        it would stay leased to no one until its lease ran out, an attempt spent. Its answer is
        awaited (`let_finish`), and what it leased after the cancellation is put back at once,
        unhandled: its attempt is not counted."""

        async def put_back(raw: Any) -> None:
            for one in (raw or []) if count else ([raw] if raw is not None else []):
                await give_back(Delivery(self._ctx, one, lease_seconds=lease_seconds), retry=True, unhandled=True)

        if count:
            return await let_finish(lambda: self._recv_many(count, lease_seconds, 0), put_back)
        return await let_finish(lambda: self._recv(lease_seconds, 0), put_back)

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

    async def _recv_many(self, count: int, lease_seconds: int, wait_ms: int) -> list[dict[str, Any]] | None:
        mailbox_id = await self.resolve_id()
        body = {
            "scopeId": self.scope_id,
            "holder": self._ctx.holder,
            "holderSession": self._ctx.session,
            "leaseSeconds": lease_seconds,
            "waitMs": wait_ms if wait_ms > 0 else None,
            "maxMessages": count,
        }
        reply = await self._ctx.call("POST", f"/mailboxes/{mailbox_id}/recv-many", body=body, wait_ms=max(wait_ms, 0))
        if reply.status == 204:
            return None
        deliveries: list[dict[str, Any]] = reply.body["deliveries"]
        return deliveries

    async def _recv_until_stopped(self, lease_seconds: int, wait_ms: int, stop: StopFlag, count: int = 0) -> Any:
        """A long-poll recv (of up to `count` deliveries, if given) that is abandoned (the request
        cancelled) as soon as `stop` is set."""
        outcome: dict[str, Any] = {}

        async def watch_stop(scope: anyio.CancelScope) -> None:
            while not stop.is_set():
                await anyio.sleep(STOP_CHECK_S)
            scope.cancel()

        async with anyio.create_task_group() as group:
            group.start_soon(watch_stop, group.cancel_scope)
            try:
                if count:
                    outcome["raw"] = await self._recv_many(count, lease_seconds, wait_ms)
                else:
                    outcome["raw"] = await self._recv(lease_seconds, wait_ms)
            except Exception as err:  # raised below, outside the group, unwrapped
                outcome["error"] = err
            group.cancel_scope.cancel()
        if "error" in outcome:
            raise outcome["error"]
        return outcome.get("raw", STOPPED)

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
        prefetch: int = 1,
    ) -> None:
        """Run `handler(data, delivery)` for each delivery until stopped (`runstate._consume`).

        `prefetch`: take up to this many deliveries in one request (`recv-many`), and hold up to
        `max(concurrency, prefetch)` at a time, those waiting for a free slot with their leases
        renewed (a worker that finishes one starts the next without a round trip); their
        completions go out together with the client's other calls. 1 (the default) takes one
        at a time, as the official clients do.

        `handler` and `on_error` may be coroutine functions or plain functions; a plain handler
        runs in a worker thread so it cannot stall lease renewal. `on_error(err, delivery)` gets
        `delivery=None` for an error that is about no delivery (the server could not be reached).
        `give_up_after_s`: raise the last error once the server has failed to answer for this
        long without a break (default: keep trying for as long as it takes). It returns when
        stopped, and within a second of its run being cancelled.
        """
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise ValueError(f"concurrency must be an integer of at least 1, got {concurrency!r}")
        if isinstance(prefetch, bool) or not isinstance(prefetch, int) or not 1 <= prefetch <= PREFETCH_MAX:
            raise ValueError(f"prefetch must be an integer from 1 to {PREFETCH_MAX}, got {prefetch!r}")
        check_lease_seconds(lease_seconds)
        check_wait_ms(wait_ms)
        check_positive("poll_ms", poll_ms)
        check_positive("shutdown_timeout", shutdown_timeout, allow_zero=True)
        if give_up_after_s is not None:
            check_positive("give_up_after_s", give_up_after_s, allow_zero=True)
        stop: StopFlag = stop_event if stop_event is not None else NeverSet()

        # Each intake looks first without a wait, which neither a stop nor a cancellation cuts
        # (`_recv_at_once`: what it leased after a cancellation is put back at once); only an empty
        # queue is then waited on, in a long poll that both cut.
        async def take(wait_ms: int, stop: StopFlag) -> Any:
            sent = anyio.current_time()
            raw = await self._recv_at_once(lease_seconds)
            if raw is None and wait_ms > 0:
                if stop.is_set():
                    return STOPPED
                sent = anyio.current_time()
                raw = await self._recv_until_stopped(lease_seconds, wait_ms, stop)
                if raw is None or raw is STOPPED:
                    return raw
                sent = anyio.current_time()  # a held recv leases as it answers
            if raw is None:
                return None
            return Delivery(self._ctx, raw, lease_seconds=lease_seconds, sent_at=sent)

        async def take_many(count: int, wait_ms: int, stop: StopFlag) -> Any:
            sent = anyio.current_time()
            raw = await self._recv_at_once(lease_seconds, count)
            if not raw and wait_ms > 0:
                if stop.is_set():
                    return STOPPED
                raw = await self._recv_until_stopped(lease_seconds, wait_ms, stop, count)
                if raw is None or raw is STOPPED:
                    return raw
                sent = anyio.current_time()
            if not raw:
                return None
            return [Delivery(self._ctx, one, lease_seconds=lease_seconds, sent_at=sent) for one in raw]

        where = f"consume({self.name or self._id!r})"
        returns = ReturnedValue(handler, where)

        async def work(delivery: Delivery) -> None:
            await _run_handler(delivery, handler, on_error, returns)

        consumer = Consumer(
            self._ctx, where, self.scope_id, take, work,
            concurrency=concurrency, lease_seconds=lease_seconds, poll_ms=poll_ms, wait_ms=wait_ms,
            shutdown_timeout=shutdown_timeout, stop=stop, on_error=on_error, give_up_after_s=give_up_after_s,
            prefetch=prefetch, take_many=take_many,
        )
        await consumer.run()


async def _run_handler(
    delivery: Delivery, handler: Handler, on_error: ErrorHandler | None, returns: ReturnedValue | None = None
) -> None:
    """Run one handler and settle its delivery; raises nothing but cancellation.

    The handler is cancelled if the delivery is lost while it runs (then nothing is sent). Once it
    has returned, the completion (with no payload, unless the handler settled the delivery itself;
    a value it returned is not recorded, and `returns` says so once) rides through an outage until
    the lease ends; a raise, or a settlement the server refused, goes to `on_error` and puts the
    delivery back.
    """
    failure: Exception | None = None
    with anyio.CancelScope() as working:
        unsubscribe = delivery._when_lost(working.cancel)
        try:
            value = await _runtime.invoke(handler, delivery.data, delivery)
            if delivery._open:
                if returns is not None:
                    returns.returned(value)
                await delivery.complete()
        except Exception as err:
            failure = err
        finally:
            unsubscribe()
    if delivery._lost or (failure is None and not delivery._settled and delivery.is_lost):
        await report_lost(on_error, delivery)
        return
    if failure is None:
        return
    await report(on_error, failure, delivery)
    refusal = delivery._refusal
    if delivery.is_lost and refusal is not None:
        # A settlement that could not get through before the lease ran out: say so.
        _runtime.log.warning(
            "could not settle delivery %s before its lease ran out (%s); the server hands it on then",
            delivery.id, refusal,
        )
        return
    # A settlement refused as a bad request would be refused again after any number of retries
    # (the handler would make the same result): reject it rather than loop.
    await give_back(delivery, retry=refusal is None or not is_permanent(refusal))
