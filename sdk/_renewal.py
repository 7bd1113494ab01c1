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

import random
from typing import Any, Awaitable, Callable, TypeVar

import anyio

from . import _runtime
from ._context import CrashedError
from ._request import new_idempotency_key
from .errors import (
    InternalError, LeaseLostError, RateLimitError, RunstateError, UnavailableError,
)

__all__ = [
    "Renewals", "Kept", "GATHER_SHARE",
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


def interval_s(lease_seconds: float, rng: random.Random | None = None) -> float:
    """Seconds until the next renewal of a lease of `lease_seconds` (jitter from `rng`, a client's
    generator, see `_runtime.uniform`)."""
    return max(INTERVAL_MIN_S, lease_seconds / 3) * _runtime.uniform(JITTER_MIN, JITTER_MAX, rng)


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
    renew: Callable[[int], Awaitable[Any]], lease: LeaseClock, what: str, outage: _Outage | None = None,
    rng: random.Random | None = None,
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
                await anyio.sleep(_runtime.uniform(0.8 * pause, 1.2 * pause, rng))
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
    rng: random.Random | None = None,
) -> None:
    """Renew every interval until cancelled; once the lease is lost call `on_lost(error)` and
    return. Cancellation (the lease was released, the handler ended) is not an error: it propagates."""
    while True:
        # Counted from when the last accepted renewal was sent, as the lease's end is: a slow answer
        # does not push the next renewal later.
        await _sleep_until(min(lease.ends_at - lease.lease_seconds + interval_s(lease.lease_seconds, rng), lease.lost_at))
        if lease.expired():  # paused, or starved, past the end: nothing may be sent as its holder now
            on_lost(ran_out(what, lease, None))
            return
        error = await renew_through(renew, lease, what, rng=rng)
        if error is not None:
            on_lost(error)
            return


async def send_through(
    send: Callable[[str], Awaitable[T]], lease: LeaseClock | None, what: str, rng: random.Random | None = None
) -> T:
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
            await anyio.sleep(min(_runtime.uniform(0.8 * pause, 1.2 * pause, rng), max(0.0, lease.left_s())))
            pause = min(2 * pause, RETRY_MAX_S)
            if lease.left_s() <= 0:
                raise


# -- every lease of a client, renewed together ----------------------------------------------------

# A lease that is due is renewed with every other lease of its client due within this share of
# their own interval: renewing early only moves a lease's end on, and it gathers a client's
# renewals into one request per interval instead of one per lease.
GATHER_SHARE = 0.5


class Kept:
    """One lease a client keeps alive (a claim, a pool grant, a delivery a handler works on):
    how to renew it, its local clock, and what to do once it is lost.

    `request(seconds)` gives the renewal's path (below the space) and body; `on_reply(body)`
    reads the answer (a malformed one raises, which counts as an outage); `on_lost(error)` is
    called once, when the lease is lost."""

    __slots__ = ("ctx", "clock", "request", "on_reply", "on_lost", "what", "due", "retrying", "in_flight", "pause", "last", "outage")

    def __init__(
        self,
        ctx: Any,
        clock: LeaseClock,
        request: Callable[[int], tuple[str, dict[str, Any]]],
        on_reply: Callable[[Any], None],
        on_lost: Callable[[BaseException], None],
        what: str,
    ) -> None:
        self.ctx = ctx
        self.clock = clock
        self.request = request
        self.on_reply = on_reply
        self.on_lost = on_lost
        self.what = what
        self.due = 0.0
        self.retrying = False  # in an outage: `due` is the next try
        self.in_flight = False
        self.pause = RETRY_FIRST_S
        self.last: BaseException | None = None
        self.outage = _Outage(what)

    def __repr__(self) -> str:
        return f"Kept({self.what}, due={self.due:.3f})"


class Renewals:
    """Every lease one client keeps alive, renewed by one loop: the leases that are due (and those
    due soon, `GATHER_SHARE`) go out together, one request per space: alone as its own renewal
    when it is one lease, else as one batch (`runstate._batch`), answered per lease.

    Each lease keeps the rules of `keep_alive` and `renew_through` to the letter: its first
    renewal an interval after it was taken, its next an interval after each answer; through an
    outage, tries again after 0.2 s doubling to 1 s, until its local end (less the margin), where
    it is lost; lost at once on an answer that ends it; never sent once past its end. The loop
    runs while the client keeps a lease and ends with the last one."""

    def __init__(self) -> None:
        self._kept: dict[Kept, None] = {}
        self._loop: _runtime.Background | None = None
        self._changed: Any = None
        # Renewal requests sent, and leases renewed in them (for tests and the bench).
        self.requests = 0
        self.renewed = 0

    def __len__(self) -> int:
        return len(self._kept)

    def add(self, kept: Kept) -> None:
        """Keep `kept` alive from now: its first renewal comes an interval from now."""
        kept.due = min(anyio.current_time() + interval_s(kept.clock.lease_seconds, kept.ctx.requester.rng), kept.clock.lost_at)
        self._kept[kept] = None
        if self._loop is None:
            self._loop = _runtime.spawn_background(self._run, name="runstate-renewals")
        else:
            self._poke()

    def remove(self, kept: Kept) -> None:
        """Stop renewing `kept` (released, settled, crashed): an answer on its way is ignored."""
        self._kept.pop(kept, None)
        if not self._kept:
            self._poke()  # the loop ends with the last lease

    def close(self) -> None:
        """Stop every renewal (the client closes)."""
        self._kept.clear()
        if self._loop is not None:
            self._loop.cancel()

    def _poke(self) -> None:
        if self._changed is not None:
            self._changed.set()

    def _lose(self, kept: Kept, error: BaseException) -> None:
        self._kept.pop(kept, None)
        kept.on_lost(error)

    async def _run(self) -> None:
        try:
            async with anyio.create_task_group() as sends:
                while self._kept:
                    wake_at = self._due_now(sends)
                    if wake_at is None:
                        continue
                    self._changed = anyio.Event()
                    with anyio.move_on_at(wake_at):
                        await self._changed.wait()
                    self._changed = None
        finally:
            self._loop = None

    def _due_now(self, sends: Any) -> float | None:
        """Lose what ran out, send what is due; returns when to look again (None: at once)."""
        now = anyio.current_time()
        due: list[Kept] = []
        wake_at = float("inf")
        for kept in list(self._kept):
            clock = kept.clock
            if kept.in_flight or kept.retrying:
                if now >= clock.lost_at:  # the try in flight, or the pause, reached the end
                    self._lose(kept, ran_out(kept.what, clock, kept.last))
                    continue
                if kept.in_flight:
                    wake_at = min(wake_at, clock.lost_at)
                    continue
            if now >= kept.due:
                if not kept.retrying and clock.expired():  # paused, or starved, past the end
                    self._lose(kept, ran_out(kept.what, clock, None))
                    continue
                due.append(kept)
            else:
                wake_at = min(wake_at, kept.due, clock.lost_at)
        if not due:
            return wake_at
        chosen = set(due)
        for kept in self._kept:
            if kept in chosen or kept.in_flight or kept.retrying or kept.clock.expired():
                continue
            if kept.due - now <= max(INTERVAL_MIN_S, kept.clock.lease_seconds / 3) * GATHER_SHARE:
                due.append(kept)
        spaces: dict[tuple[int, str], list[Kept]] = {}
        for kept in due:
            kept.in_flight = True
            spaces.setdefault((id(kept.ctx.requester), kept.ctx.space_id), []).append(kept)
        for group in spaces.values():
            sends.start_soon(self._send, group, now)
        return None

    async def _send(self, group: list[Kept], sent: float) -> None:
        from ._batch import Operation, batch_unsupported, copy_error, send_batch

        seconds = [int(kept.clock.lease_seconds) for kept in group]
        ctx = group[0].ctx
        answers: list[Any] | None = None
        coalescer = ctx.requester.coalescer
        if len(group) > 1 and coalescer is not None and not coalescer.unsupported:
            operations = [Operation("POST", *kept.request(n), new_idempotency_key()) for kept, n in zip(group, seconds)]
            self.requests += 1
            try:
                answers = list(await send_batch(ctx.requester, ctx.path(""), operations))
            except Exception as error:
                if not batch_unsupported(error):
                    answers = [copy_error(error) for _ in group]
                else:  # a server without the route: these leases are renewed one by one, now
                    coalescer.unsupported = True
        if answers is None:
            alone: list[Any] = [None] * len(group)

            async def renew(index: int) -> None:
                suffix, body = group[index].request(seconds[index])
                try:
                    alone[index] = await group[index].ctx.call("POST", suffix, body=body)
                except Exception as error:
                    alone[index] = error

            async with anyio.create_task_group() as each:
                for index in range(len(group)):
                    each.start_soon(renew, index)
            self.requests += len(group)
            answers = alone
        now = anyio.current_time()
        for kept, answer, n in zip(group, answers, seconds):
            kept.in_flight = False
            if kept not in self._kept:
                continue  # released, settled or lost meanwhile
            if not isinstance(answer, BaseException):
                try:
                    kept.on_reply(answer.body)
                except Exception as error:
                    answer = error
            if isinstance(answer, BaseException):
                self._failed(kept, answer, now)
                continue
            kept.clock.renewed(sent, n)
            kept.outage.recovered()
            kept.outage = _Outage(kept.what) if kept.outage.started is not None else kept.outage
            kept.retrying, kept.pause, kept.last = False, RETRY_FIRST_S, None
            kept.due = min(sent + interval_s(kept.clock.lease_seconds, kept.ctx.requester.rng), kept.clock.lost_at)  # from the send, as its end
            self.renewed += 1
        self._poke()

    def _failed(self, kept: Kept, error: BaseException, now: float) -> None:
        if ends_lease(error):
            self._lose(kept, error)
            return
        kept.last = error
        kept.outage.failed(error, kept.clock.left_s())
        kept.retrying = True
        kept.due = now + _runtime.uniform(0.8 * kept.pause, 1.2 * kept.pause, kept.ctx.requester.rng)
        kept.pause = min(2 * kept.pause, RETRY_MAX_S)
