"""Claims: exclusive, leased, fenced ownership of a key inside a scope.

`ClaimRef` names a key in a scope and sends nothing until asked. `acquire()` gives a `ClaimLease`
that renews itself in the background (see `runstate._renewal`) until `release()`. Renewals ride
through an outage until the lease's end by this process's clock; a lease the server refuses to
renew, or whose local end passes without a renewal, is lost for good: `is_lost` turns true,
`lost_event` is set, and `raise_if_lost()` raises `LeaseLostError`. `is_lost` reads the local end
itself, so a process paused past it sees the loss before doing anything else. The kernel is the
authority on ownership; the lease object only reports what the client last learned, so work that
must not overlap another owner's should also carry `lease.token()` to the system it writes to.

`run(fn)` is the safe way to hold a claim: acquire, run `fn(lease)`, release in a `finally`. A
coroutine function is cancelled as soon as the lease is lost, and `run()` raises `LeaseLostError`.
A plain function runs in a worker thread, which cannot be interrupted: `run()` stops waiting for it
and raises, and the thread runs on to its end. The release after `fn` returns is the last word:
an operator's forced release (or a run cancelled) between two renewals is learned only there, when
the server refuses the release as stale. `run()` then raises `LeaseLostError` too instead of
returning `fn`'s result, since another holder may have been inside the key meanwhile; `is_lost`
is true. A release that meets an outage (no answer, a 503) is sent again, with one idempotency
key, until the lease's end by this process's clock, as a settlement is; one that still cannot
reach the server says nothing about the lease and is ignored (the lease runs out).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Callable, Mapping
from urllib.parse import quote

import anyio

from . import _runtime
from ._context import Context
from ._grace import let_finish
from ._renewal import Kept, LeaseClock, send_through
from . import _checks
from ._checks import check_lease_seconds, check_text
from .errors import (
    ConflictError, LeaseLostError, NotFoundError, RateLimitError, ScopeCancelledError, WaitTimeoutError,
)
from .types import AcquireAttempt, ClaimView

__all__ = [
    "ClaimRef", "ClaimLease", "encode_claim_key", "parse_timestamp", "LEASE_SECONDS_MIN", "LEASE_SECONDS_MAX", "KEY_LEN_MAX",
]

LEASE_SECONDS_MIN = _checks.LEASE_SECONDS_MIN
"""The shortest lease (`lease_seconds`) of a claim, a delivery or a pool grant, in seconds: the
v1 API's published limit, checked before anything is sent."""
LEASE_SECONDS_MAX = _checks.LEASE_SECONDS_MAX
"""The longest lease (`lease_seconds`) of a claim, a delivery or a pool grant, in seconds."""
KEY_LEN_MAX = _checks.KEY_LEN_MAX
"""The longest claim key, task key or work key, in characters."""

DEFAULT_LEASE_SECONDS = 30
DEFAULT_TIMEOUT_MS = 30_000
# Pause between two tries of a wait=True acquire (uniform, seconds): a held key, then a plan limit.
HELD_RETRY_S = (0.225, 0.375)
LIMITED_RETRY_S = (0.75, 1.25)
# The longest `waitMs` one claim request asks the server to hold it (the server's own cap on
# long polls); a longer `timeout_ms` is covered by several requests.
CLAIM_WAIT_MS_MAX = 30_000
# A CLAIM_HELD that came after at least this share of the asked wait means the server held the
# request: the next try goes at once. A quicker one means it does not hold claim requests.
PARKED_FRACTION = 0.9


def encode_claim_key(key: str) -> str:
    """Percent-encode a claim key for a path segment: only `A-Za-z0-9_.-~` stay as they are.

    A key that is `.` or `..` is sent as `%2E` or `%2E%2E`: as it is, the HTTP client would take
    it for a dot segment and drop it from the path (RFC 3986 5.2.4), so the request would reach
    another route."""
    if key in (".", ".."):
        return "%2E" * len(key)
    return quote(key, safe="")


def parse_timestamp(value: str) -> datetime:
    """The server's `YYYY-MM-DDTHH:MM:SS.mmmZ` as an aware datetime."""
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


class ClaimRef:
    """A claim key in a scope (`run.claim(key)`): its `scope_id` and `key`. Cheap to make; each
    method is one or more requests."""

    def __init__(self, ctx: Context, scope_id: str, key: str) -> None:
        self._ctx = ctx
        self.scope_id = scope_id
        self.key = key

    def __repr__(self) -> str:
        return f"ClaimRef(scope_id={self.scope_id!r}, key={self.key!r})"

    async def acquire(
        self,
        *,
        lease_seconds: int = DEFAULT_LEASE_SECONDS,
        wait: bool = False,
        timeout_ms: int = DEFAULT_TIMEOUT_MS,
    ) -> ClaimLease:
        """Take the claim. With `wait=False` a held key raises `ConflictError` (`CLAIM_HELD`) at once.

        With `wait=True` a first try goes without a wait; if the key is held, each later try asks
        the server to hold the request until the key is free
        (`waitMs`: the time left of `timeout_ms`, at most 30 s a request). A server that does not
        hold claim requests answers `CLAIM_HELD` at once; then the key is tried again every
        ~0.3 s (every ~1 s on `CONCURRENCY_LIMITED`). When `timeout_ms` has passed,
        `WaitTimeoutError` is raised.

        Cancelled while a try the server answers at once is on its way, the acquire waits for the
        answer (2 s at most) and releases a grant it brings before the cancellation goes on; a try
        the server holds is cut at once (see docs/python.md, "Cancelling a call").

        Either refusal says who holds the key: the `ConflictError`'s `details` (and the
        `WaitTimeoutError`'s, from the last try) are the claim's `holder`, `generation` and
        `leaseExpiresAt`."""
        check_lease_seconds(lease_seconds)
        check_text("key", self.key, KEY_LEN_MAX)
        if isinstance(timeout_ms, bool) or not isinstance(timeout_ms, int) or timeout_ms < 0:
            raise ValueError(f"timeout_ms must be an integer of 0 or more, got {timeout_ms!r}")
        deadline = _runtime.deadline_in(timeout_ms)  # (one deadline: see there)
        body: dict[str, Any] = {
            "key": self.key,
            "scopeId": self.scope_id,
            "holder": self._ctx.holder,
            "holderSession": self._ctx.session,
            "leaseSeconds": lease_seconds,
        }
        # With `wait`, a try without a wait first: a free key (most are) is answered at once, in a
        # request a cancellation does not cut (see `_send`), and it rides in the client's next
        # batch when its calls are going out in batches. Only a held key is then waited for, in
        # tries the server holds, which a cancellation cuts.
        first = bool(wait and timeout_ms)
        while True:
            left_ms = (deadline - anyio.current_time()) * 1000
            wait_ms = round(min(left_ms, CLAIM_WAIT_MS_MAX)) if wait and not first else 0
            tried_first, first = first, False
            body["waitMs"] = wait_ms if wait_ms > 0 else None
            sent = anyio.current_time()
            try:
                reply = await self._send(body, wait_ms, lease_seconds, sent)
            except (ConflictError, RateLimitError) as err:
                if not wait or err.code not in ("CLAIM_HELD", "CONCURRENCY_LIMITED"):
                    raise
                if anyio.current_time() >= deadline:
                    # Who held it at the last try, so the caller need not read it again.
                    raise WaitTimeoutError(
                        "WAIT_TIMEOUT", 0, f"timed out waiting for claim {self.key!r} after {timeout_ms} ms",
                        details=err.details if err.code == "CLAIM_HELD" else None,
                    ) from err
                if err.code == "CLAIM_HELD" and tried_first:
                    continue  # held: now the wait the server holds
                if err.code == "CLAIM_HELD" and wait_ms and (anyio.current_time() - sent) * 1000 >= wait_ms * PARKED_FRACTION:
                    continue  # the server held the request for the whole wait: ask again at once
                low, high = LIMITED_RETRY_S if err.code == "CONCURRENCY_LIMITED" else HELD_RETRY_S
                # Never sleep past the deadline: the last try comes when the time is up.
                await _runtime.sleep_before(_runtime.uniform(low, high, self._ctx.requester.rng), deadline)
                continue
            # The lease began when the server took the claim: at once, or at the end of a held try.
            began = sent if not wait_ms else anyio.current_time()
            return ClaimLease._start(self._ctx, self.key, reply.body, lease_seconds, began)

    async def _send(self, body: dict[str, Any], wait_ms: int, lease_seconds: int, sent: float) -> Any:
        """One try. A try the server answers at once (no `wait_ms`) is not cut by a cancellation of
        the caller: the server grants it even when the connection is cut, and the key would stay
        held, renewed by no one, for the whole lease. Its answer is awaited (`let_finish`), a grant
        released, and the cancellation goes on. A try the server holds is cut: the server gives up
        a held wait whose connection closed."""
        if wait_ms:
            return await self._ctx.call("POST", "/claims", body=body, wait_ms=wait_ms)

        async def give_back(reply: Any) -> None:
            await ClaimLease(self._ctx, self.key, reply.body, lease_seconds, sent)._release_quietly(cancelled=True)

        return await let_finish(lambda: self._ctx.call("POST", "/claims", body=body, batch=True), give_back)

    async def try_acquire(
        self,
        *,
        lease_seconds: int = DEFAULT_LEASE_SECONDS,
        wait: bool = False,
        timeout_ms: int = DEFAULT_TIMEOUT_MS,
    ) -> AcquireAttempt:
        """`{"kind": "acquired", "lease": lease}`, or `{"kind": "busy"}` when another holder has it.
        Other errors, `CONCURRENCY_LIMITED` included, are raised."""
        try:
            lease = await self.acquire(lease_seconds=lease_seconds, wait=wait, timeout_ms=timeout_ms)
        except ConflictError as err:
            if err.code == "CLAIM_HELD":
                return AcquireAttempt(kind="busy")
            raise
        return AcquireAttempt(kind="acquired", lease=lease)

    async def run(
        self,
        fn: Callable[[ClaimLease], Any],
        *,
        wait: bool = False,
        timeout_ms: int = DEFAULT_TIMEOUT_MS,
        lease_seconds: int = DEFAULT_LEASE_SECONDS,
    ) -> Any:
        """Acquire, return `fn(lease)` while the lease is renewed, release in a `finally`.

        If the lease is lost first, a coroutine function is cancelled and a plain function (in a
        worker thread) is no longer waited for; either way `LeaseLostError` (`STALE_CLAIM`) is
        raised. A release the server refuses (the token went stale while `fn` ran: an operator
        forced the key free, or the run ended) also raises `LeaseLostError`, in place of `fn`'s
        result, and sets `is_lost`; an error `fn` raised goes up as it is. A release that cannot
        reach the server is ignored: the lease expires on its own.
        """
        lease = await self.acquire(lease_seconds=lease_seconds, wait=wait, timeout_ms=timeout_ms)
        return await lease._hold(fn)

    async def force_release(self, reason: str | None = None) -> ClaimView:
        """An operator's release of whoever holds this key now, without their token: the key is
        free at once, the holder's token is refused from then on (its SDK sees the lease lost at
        its next renewal), and the next holder gets the next generation. Returns the claim as it
        was (`holder`, `generation`), with `token` None. A key not held raises `ConflictError`
        (`CONFLICT`); one never claimed here, `NotFoundError`. The admin key may call it too."""
        reply = await self._ctx.call(
            "POST", f"/claims/{encode_claim_key(self.key)}/force-release", body={"scopeId": self.scope_id, "reason": reason}
        )
        view: ClaimView = reply.body
        return view


class ClaimLease:
    """A held claim: `generation`, `token()`, loss reporting, `renew()` and `release()`.

    `key` is the claim's key; `generation` grows with each new owner of the key (the value to
    compare, unlike the opaque token); `expires_at` is when the lease ends as the server last said
    (an aware datetime); `lease_seconds` its length. `lost_event` is set when the lease is lost
    (an `asyncio.Event` or a `trio.Event`, the running library's), and `lost_error` says why."""

    def __init__(
        self, ctx: Context, key: str, grant: Mapping[str, Any], lease_seconds: int, sent_at: float | None = None
    ) -> None:
        self._ctx = ctx
        self.key = key
        self.generation = grant["generation"]
        self.expires_at = parse_timestamp(grant["leaseExpiresAt"])
        self.lease_seconds = lease_seconds
        self._token: str = grant["token"]
        # The running library's own event: asyncio.Event or trio.Event.
        self.lost_event: Any = _runtime.new_native_event()
        self.lost_error: BaseException | None = None
        self._released = False
        self._crashed = False
        self._lost_callbacks: list[Callable[[], None]] = []
        # Its place among the leases the client renews together, while it is renewed.
        self._kept: Kept | None = None
        # When the lease ends by this process's clock (the moment the grant was asked for, plus
        # its length), moved on by every renewal that gets through.
        self._clock = LeaseClock(lease_seconds, anyio.current_time() if sent_at is None else sent_at)

    @classmethod
    def _start(cls, ctx: Context, key: str, grant: Mapping[str, Any], lease_seconds: int, sent_at: float) -> ClaimLease:
        lease = cls(ctx, key, grant, lease_seconds, sent_at)
        lease._start_renewal(f"claim {key!r}")
        return lease

    def _start_renewal(self, what: str) -> None:
        self._kept = Kept(self._ctx, self._clock, self._renewal_request, self._renewal_reply, self._mark_lost, what)
        self._ctx.holdings.renewals.add(self._kept)
        self._ctx.leases.add(self)

    def __repr__(self) -> str:
        return f"ClaimLease(key={self.key!r}, generation={self.generation!r}, token='[redacted]')"

    # -- what the holder reads ------------------------------------------------------------------

    def token(self) -> str:
        """The fencing token: opaque, compare it for equality only."""
        return self._token

    @property
    def is_lost(self) -> bool:
        """True once the server refused a renewal, or the lease's end by this process's clock
        (less a safety margin) has passed without one getting through: read afresh on each call."""
        return bool(self.lost_event.is_set()) or (not self._crashed and self._clock.expired())

    @property
    def lost_at(self) -> float:
        """When the lease counts as lost unless renewed before, on the running library's clock
        (`anyio.current_time()`)."""
        return self._clock.lost_at

    def raise_if_lost(self) -> None:
        """Raise `LeaseLostError` if the lease is lost (see `is_lost`); a cheap check for long loops."""
        if self.is_lost:
            raise LeaseLostError("STALE_CLAIM", 409, f"lease for {self.key!r} was lost") from self.lost_error

    # -- renewal and release --------------------------------------------------------------------

    async def renew(self, lease_seconds: int | None = None) -> None:
        """Renew now. Without `lease_seconds` the server extends by the lease's own length.
        A lease already lost raises `LeaseLostError`; a stale answer marks it lost."""
        if lease_seconds is not None:
            check_lease_seconds(lease_seconds)
        self.raise_if_lost()
        if self._crashed:
            return
        sent = anyio.current_time()
        try:
            await self._renew_request(lease_seconds)
        except LeaseLostError as err:
            self._mark_lost(err)
            raise
        self._clock.renewed(sent, lease_seconds)

    async def _renew_request(self, lease_seconds: int | None) -> None:
        suffix, body = self._renewal_request(lease_seconds)
        self._renewal_reply((await self._ctx.call("POST", suffix, body=body)).body)

    def _renewal_request(self, lease_seconds: int | None) -> tuple[str, dict[str, Any]]:
        """The renewal's path and body (sent alone, or with the client's other renewals)."""
        return f"/claims/{encode_claim_key(self.key)}/renew", {"token": self._token, "leaseSeconds": lease_seconds}

    def _renewal_reply(self, body: Any) -> None:
        self.expires_at = parse_timestamp(body["leaseExpiresAt"])

    async def release(self, observation: Any = None) -> None:
        """Stop renewing and give the claim back. A second call sends nothing. A `LeaseLostError`
        answer (the lease had already gone: its token is stale) is not raised, but marks the lease
        lost: `is_lost` is true from then on. Through an outage (no answer, a 503) the release is
        sent again, with one idempotency key, until the lease's end by this process's clock; then
        the last error is raised (the lease runs out on the server by itself)."""
        await self._release(observation)

    async def _release(self, observation: Any = None) -> BaseException | None:
        """`release()`; returns the refusal that says the lease had gone before it (a stale token,
        a run that ended, a lease the server no longer knows), having marked the lease lost, or
        None. Any other error (the server cannot be reached) is raised."""
        if self._released:
            return None
        self._released = True
        await self._stop_renewal()
        suffix, body = self._release_suffix(), {"token": self._token, "observation": observation}

        async def send(idempotency_key: str) -> None:
            await self._ctx.call("POST", suffix, body=body, idempotency_key=idempotency_key, batch=True)

        try:
            # Through an outage (no answer, a 503) the release is sent again, with one key, until
            # the lease's end by the local clock, as a settlement is: given up after the request
            # layer's few quick tries, the key stayed held, renewed by no one, for the whole lease.
            await send_through(send, self._clock, f"{self._what()}: release", self._ctx.requester.rng)
        except (LeaseLostError, ScopeCancelledError, NotFoundError) as err:
            self._mark_lost(err)
            if isinstance(err, LeaseLostError):
                return err
            raise
        return None

    def _release_suffix(self) -> str:
        """The release's path below the space."""
        return f"/claims/{encode_claim_key(self.key)}/release"

    def _what(self) -> str:
        """The lease, for messages."""
        return f"claim {self.key!r}"

    async def aclose(self) -> None:
        """Stop renewing without releasing: the claim stays held until its lease runs out."""
        await self._stop_renewal()

    async def __aenter__(self) -> ClaimLease:
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        if exc_info[0] is not None:
            await self._release_quietly(cancelled=not issubclass(exc_info[0], Exception))
            return
        await self._release_checked()

    # -- internals ------------------------------------------------------------------------------

    async def _stop_renewal(self) -> None:
        self._stop_renewal_nowait()

    def _stop_renewal_nowait(self) -> None:
        self._ctx.leases.discard(self)
        kept, self._kept = self._kept, None
        if kept is not None:
            self._ctx.holdings.renewals.remove(kept)

    def _crash(self) -> None:
        """Stop renewing and never release, as a process that died would (`runstate.testing.crash`).
        The claim stays held until its lease runs out; then another holder can take it."""
        self._crashed = True
        self._released = True  # release() sends nothing from here on
        self._stop_renewal_nowait()

    def _mark_lost(self, err: BaseException) -> None:
        if self.lost_event.is_set():
            return
        self.lost_error = err
        self.lost_event.set()
        self._ctx.leases.discard(self)
        callbacks, self._lost_callbacks = self._lost_callbacks, []
        for callback in callbacks:
            callback()

    def _when_lost(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call `callback` when the lease is lost (now, if it already is); returns an unsubscribe."""
        if self.lost_event.is_set():
            callback()
            return lambda: None
        self._lost_callbacks.append(callback)

        def unsubscribe() -> None:
            if callback in self._lost_callbacks:
                self._lost_callbacks.remove(callback)

        return unsubscribe

    async def _run_guarded(self, fn: Callable[[ClaimLease], Any]) -> Any:
        with anyio.CancelScope() as scope:
            unsubscribe = self._when_lost(scope.cancel)
            try:
                result = await _runtime.invoke(fn, self)
            except Exception as err:
                if scope.cancel_called and self.is_lost:
                    raise self._lost_during_run() from err
                raise
            finally:
                unsubscribe()
        if scope.cancelled_caught:
            raise self._lost_during_run() from self.lost_error
        return result

    def _lost_during_run(self) -> LeaseLostError:
        return LeaseLostError("STALE_CLAIM", 409, f"lease for {self.key!r} was lost during run()")

    async def _hold(self, fn: Callable[[ClaimLease], Any]) -> Any:
        """`run()` once the lease is held: `fn(lease)` under the lease, then the release, which has
        the last word on whether the lease lasted to the end of `fn`."""
        try:
            result = await self._run_guarded(fn)
        except BaseException as err:
            await self._release_quietly(cancelled=not isinstance(err, Exception))
            raise
        await self._release_checked()
        return result

    async def _release_checked(self) -> None:
        """Release after work that ended normally; raise `LeaseLostError` if the lease did not last
        until then: lost by the local clock, or refused by the server at the release."""
        if self.is_lost:
            await self._release_quietly()
            raise self._lost_during_run() from self.lost_error
        refused = await self._release_quietly()
        if refused is not None:
            assert self.lost_event.is_set()
            raise self._lost_during_run() from refused

    async def _release_quietly(self, *, cancelled: bool = False) -> BaseException | None:
        """Release, never raising; returns the refusal that said the lease had gone (see `_release`).

        Shielded so that a cancelled caller still gives the key back. A release that meets an
        outage is sent again until the lease's end by the local clock; for a `cancelled` caller
        only for as long as one call's tries take (`Context.cleanup_bound_s`), so that an
        unreachable server does not hold a cancellation for the rest of a long lease. Failing
        that, the lease expires."""
        bound_s = self._ctx.cleanup_bound_s()
        if not cancelled:
            bound_s = max(bound_s, self._clock.left_s())
        with anyio.move_on_after(bound_s, shield=True):
            try:
                return await self._release()
            except (ScopeCancelledError, NotFoundError) as err:
                return err  # the lease went with its run, or the server no longer knows it
            except Exception:
                pass  # the server could not be reached, or answered something else: it expires
        return None
