"""Keeping a lease alive, and knowing by this process's own clock when it is gone.

A lease (a claim, a pool grant, a delivery) ends on the server `lease_seconds` after the last
renewal the server accepted. This side keeps its own estimate of that end, `LeaseClock`: the
moment the accepted request was *sent*, plus the lease length (the server can only have started
counting after that). A long poll that the server held (a `recv`, an admission, a claim with
`waitMs`) leases in the turn that answers it, so there the moment the answer arrived stands in for
the start: later than the server's by the answer's time on the wire, which the margin covers.

A lease is lost when either:

- **the server says so**: a renewal refused as stale (`LeaseLostError`), in a scope that ended
  (`ScopeCancelledError`), of something that is gone (`NotFoundError`), or any other refusal that
  sending the same request again cannot change (`ends_lease`);
- **or its end by the local clock, less a safety margin, passes** without a renewal getting through.

Between the two, a renewal that meets an outage (no answer, a 503, a 429, a malformed answer, a
server restarting or failing over) is tried again with backoff until that local end, not given up
after a few tries: a server restart shorter than what is left of the lease costs the holder
nothing, since the server gives surviving leases a grace period after it recovers. The outage is
logged on the `runstate` logger when it starts and when a renewal gets through again.

The margin (a tenth of the lease, between 0.5 s and 2 s) covers the time a request spends on the
way and a little drift between two clocks; the end by the local clock is also what `is_lost` and
`raise_if_lost()` read, so a process that was paused (SIGSTOP, a debugger, a laptop lid) past its
lease sees the loss the moment it runs again, before it sends one more write with the old token.
If in doubt, treat the lease as lost: it is never re-acquired behind the caller's back.

Timing: the loop sleeps for an interval, renews, and repeats; one renewal runs at a time, and the
first comes after the first interval, not at once. The interval is max(1 s, lease/3) times a
random factor in [0.9, 1.1], so a 30 s lease renews every 9-11 s and workers do not renew in step.
"""

from __future__ import annotations

from typing import Any, Awaitable, Callable, TypeVar

import anyio

from . import _runtime
from ._context import CrashedError
from ._request import new_idempotency_key
from .errors import (
    InternalError, LeaseLostError, RateLimitError, RunstateError, UnavailableError,
)

__all__ = [
    "LeaseClock", "keep_alive", "send_through", "interval_s", "margin_s", "ends_lease", "outage_may_pass",
    "ran_out", "INTERVAL_MIN_S", "RETRY_FIRST_S", "RETRY_MAX_S",
]

T = TypeVar("T")

# The shortest time between two renewals, whatever the lease length.
INTERVAL_MIN_S = 1.0
JITTER_MIN = 0.9
JITTER_MAX = 1.1
# The safety margin kept before the local end of a lease: a share of the lease, within bounds.
MARGIN_SHARE = 0.1
MARGIN_MIN_S = 0.5
MARGIN_MAX_S = 2.0
# Pauses between two tries of a renewal (or a settlement) that met an outage: doubling, capped.
RETRY_FIRST_S = 0.2
RETRY_MAX_S = 1.0


def interval_s(lease_seconds: float) -> float:
    """Seconds until the next renewal of a lease of `lease_seconds`."""
    return max(INTERVAL_MIN_S, lease_seconds / 3) * _runtime.uniform(JITTER_MIN, JITTER_MAX)


def margin_s(lease_seconds: float) -> float:
    """How long before its local end a lease counts as lost."""
    return min(MARGIN_MAX_S, max(MARGIN_MIN_S, lease_seconds * MARGIN_SHARE))


def outage_may_pass(error: BaseException) -> bool:
    """True for a failure that says nothing about the lease itself: the server could not be
    reached, was busy or restarting, failed on a bug, or answered something this side could not
    read. Such a request is worth sending again while the lease lasts. (A client crashed by
    `runstate.testing.crash` is a dead process: nothing of it passes.)"""
    if isinstance(error, CrashedError):
        return False
    if isinstance(error, (UnavailableError, RateLimitError, InternalError)):
        return True
    if type(error) is RunstateError:  # a code we do not know: judge by its status
        return error.status >= 500 or error.status in (408, 429)
    return not isinstance(error, RunstateError)


def ends_lease(error: BaseException) -> bool:
    """True when an answer means the lease is gone, or can never be renewed: stale, its scope
    ended, not found, refused for good. Everything else is an outage that may pass."""
    return not outage_may_pass(error)


class LeaseClock:
    """When a lease ends by this process's clock. `expired()` may be read from any thread (the
    blocking client's worker threads ask it): it reads the running library's clock object, which
    is safe to read anywhere, and is virtual under trio's `MockClock`."""

    __slots__ = ("lease_seconds", "ends_at", "margin_s", "_now")

    def __init__(self, lease_seconds: float, sent_at: float, now: Callable[[], float] | None = None) -> None:
        self.lease_seconds = lease_seconds
        self.ends_at = sent_at + lease_seconds
        self.margin_s = margin_s(lease_seconds)
        self._now = now if now is not None else _runtime.clock()

    def __repr__(self) -> str:
        return f"LeaseClock(lease_seconds={self.lease_seconds}, ends_at={self.ends_at:.3f})"

    @property
    def lost_at(self) -> float:
        """The local time from which the lease counts as lost, unless renewed before."""
        return self.ends_at - self.margin_s

    def now(self) -> float:
        return self._now()

    def renewed(self, sent_at: float, lease_seconds: float | None = None) -> None:
        """A renewal sent at `sent_at` was accepted: the lease runs `lease_seconds` from then."""
        self.ends_at = max(self.ends_at, sent_at + (self.lease_seconds if lease_seconds is None else lease_seconds))

    def expired(self) -> bool:
        return self._now() >= self.lost_at

    def left_s(self) -> float:
        return self.lost_at - self._now()


def ran_out(what: str, lease: LeaseClock, last: BaseException | None) -> LeaseLostError:
    """The loss of a lease whose local end passed while the server could not be reached."""
    detail = f"; the last try failed: {last}" if last is not None else ""
    error = LeaseLostError(
        "LEASE_LOST", 0,
        f"{what}: its {lease.lease_seconds:g} s lease ran out by this process's clock without a renewal "
        f"getting through{detail}; another holder may have it now",
    )
    error.__cause__ = last
    return error


class _Outage:
    """A run of failed renewals of one lease: a warning when it starts, another when it ends."""

    def __init__(self, what: str) -> None:
        self.what = what
        self.started: float | None = None
        self.failures = 0

    def failed(self, error: BaseException, left_s: float) -> None:
        self.failures += 1
        if self.started is None:
            self.started = anyio.current_time()
            _runtime.log.warning(
                "%s: renewal failed (%s); trying again until the lease runs out by the local clock (in %.1f s)",
                self.what, error, max(0.0, left_s),
            )

    def recovered(self) -> None:
        if self.started is not None:
            _runtime.log.warning(
                "%s: renewed again after %.1f s and %d failed tries",
                self.what, anyio.current_time() - self.started, self.failures,
            )


async def _sleep_until(deadline: float) -> None:
    await anyio.sleep(max(0.0, deadline - anyio.current_time()))


async def renew_through(
    renew: Callable[[int], Awaitable[Any]], lease: LeaseClock, what: str, outage: _Outage | None = None
) -> BaseException | None:
    """One renewal, tried again through an outage until the lease's local end. Returns None once
    it got through (the clock moved on), or the error that lost the lease."""
    outage = outage if outage is not None else _Outage(what)
    pause = RETRY_FIRST_S
    last: BaseException | None = None
    seconds = int(lease.lease_seconds)
    while True:
        sent = anyio.current_time()
        with anyio.move_on_at(lease.lost_at):
            try:
                await renew(seconds)
            except Exception as err:
                if ends_lease(err):
                    return err
                last = err
                outage.failed(err, lease.left_s())
                await anyio.sleep(_runtime.uniform(0.8 * pause, 1.2 * pause))
                pause = min(2 * pause, RETRY_MAX_S)
                continue
            lease.renewed(sent, seconds)
            outage.recovered()
            return None
        return ran_out(what, lease, last)


async def keep_alive(
    renew: Callable[[int], Awaitable[Any]],
    lease: LeaseClock,
    on_lost: Callable[[BaseException], None],
    what: str = "lease",
) -> None:
    """Renew every interval until cancelled; once the lease is lost call `on_lost(error)` and
    return. Cancellation (the lease was released, the handler ended) is not an error: it propagates."""
    while True:
        await _sleep_until(min(anyio.current_time() + interval_s(lease.lease_seconds), lease.lost_at))
        if lease.expired():  # paused, or starved, past the end: nothing may be sent as its holder now
            on_lost(ran_out(what, lease, None))
            return
        error = await renew_through(renew, lease, what)
        if error is not None:
            on_lost(error)
            return


async def send_through(send: Callable[[str], Awaitable[T]], lease: LeaseClock | None, what: str) -> T:
    """A settlement of leased work (a completion, a failure, a give-back), `send(idempotency_key)`,
    sent again with the same key through an outage until the lease's local end: a try that did
    reach the server is answered as it was then, never counted twice. An answer about the lease
    itself (stale, its run ended, refused for good), or the end passing, raises; so does anything
    without a lease to bound it."""
    key = new_idempotency_key()
    pause, told = RETRY_FIRST_S, False
    while True:
        try:
            return await send(key)
        except Exception as err:
            if ends_lease(err) or lease is None or lease.left_s() <= 0:
                raise
            if not told:
                told = True
                _runtime.log.warning(
                    "%s failed (%s); sending it again until the lease runs out (in %.1f s)", what, err, lease.left_s()
                )
            await anyio.sleep(min(_runtime.uniform(0.8 * pause, 1.2 * pause), max(0.0, lease.left_s())))
            pause = min(2 * pause, RETRY_MAX_S)
            if lease.left_s() <= 0:
                raise
