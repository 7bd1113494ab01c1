"""The one source of time for the kernel and the shell.

Everything that decides something with time gets it from a `Clock`: the state machines receive
`now_ms` (wall-clock milliseconds since the Unix epoch, UTC) as an argument and never read a clock
themselves. Two clocks meet here:

- trio's clock (monotonic seconds) is the base of every in-memory sleep and deadline;
- a wall source (the operating system's `time.time()`) says what time it is for the world:
  `createdAt`, `leaseExpiresAt`, a client's `deadline`.

`now_ms()` is `trio time + offset`, and a call reads the wall source again and moves the offset
up to it when the host's clock is ahead. So timestamps and deadline decisions follow the host at
any uptime, however long ago the server started (a clock corrected by the time service after boot,
a VM resumed or migrated). The host's clock is read at most once per `HOST_READ_EVERY_MS` of trio
time (a busy server asks for the time on every turn), so a step is followed within that long; a
wall source given by the caller is read on every call.

What a step of the host clock does:

- **Forward** (the host jumps ahead, or runs fast): followed at once. Wall deadlines take effect
  at their wall time: a lease or task deadline that the jump put in the past is due now. The
  supervisor sleeps at most `WALL_RECHECK_S` at a time while anything is armed, so an expiry a
  jump made due is proposed within that long even when no request comes in.
- **Backward** (the host jumps back, or runs slow): not followed. `now_ms()` keeps counting from
  where it was at the monotonic pace, so no recorded time ever goes backwards and no lease, delivery
  or deadline lasts longer than granted. The price: the server's timestamps stay ahead of the host
  by the size of the step until the host catches up (`ahead_of_host_ms` says by how much). Every
  other choice lets some live lease outlast its grant.

Under trio's `MockClock` (or with a `wall_anchor_ms` given) the wall source is virtual: an anchor
plus trio's time since the clock was made. The whole server then runs in virtual time, SDK renewals
included, and a test can assert exact virtual instants; such a source never steps, so nothing
changes for it. Tests of steps and drift pass their own `wall_source`.

Persisted times are wall milliseconds; in-memory sleeps are trio deadlines. `deadline_for()` is the
only place that turns one into the other. Not to be confused with `time.monotonic()`, which the
kernel never reads: trio gives its clock a random offset precisely to catch code that does.
"""

from __future__ import annotations

import logging
import sys
import time
from typing import Callable

import trio

__all__ = ["Clock", "WALL_RECHECK_S", "WALL_STEP_LOGGED_MS", "HOST_READ_EVERY_MS"]

log = logging.getLogger("runstate.clock")

# The longest a sleep on a wall deadline lasts before the wall source is read again, so that a
# forward step of the host clock makes an armed deadline due within this long.
WALL_RECHECK_S = 0.1
# A step of the host clock at least this large is logged (once per step).
WALL_STEP_LOGGED_MS = 1000
# The host's clock is read again once trio's clock has moved this far since the last reading (a
# busy server reads the time on every turn; a step is still seen within this long).
HOST_READ_EVERY_MS = 1.0

WallSource = Callable[[], float]


def _mock_clock_runs() -> bool:
    """Whether the running loop runs on trio's `MockClock` (virtual time). One can only if
    `trio.testing` was imported: a server never imports it (it would bring pytest with it)."""
    testing = sys.modules.get("trio.testing")
    return testing is not None and isinstance(trio.lowlevel.current_clock(), testing.MockClock)


def _host_wall_ms() -> float:
    return time.time_ns() / 1_000_000


class Clock:
    """Wall milliseconds that follow the host's clock, over trio's monotonic clock.

    Create it inside a running trio loop. `wall_source` returns wall milliseconds (a float is fine);
    by default the operating system's clock, or a virtual one under `MockClock` or when
    `wall_anchor_ms` is given. `virtual=True` says that a given source follows trio's clock
    exactly (it never steps), so sleeps need not wake to read it again.
    """

    __slots__ = ("_offset_ms", "_source", "_steps", "_virtual", "_ahead_ms", "_trio_time", "_host", "_next_read_ms")

    def __init__(
        self, wall_anchor_ms: int | None = None, *, wall_source: WallSource | None = None, virtual: bool = False
    ) -> None:
        trio_now = trio.current_time()
        # The running loop's clock, read straight (what `trio.current_time()` reads, one call in
        # place of three: every turn reads the time).
        self._trio_time = trio.lowlevel.current_clock().current_time
        self._virtual = virtual or wall_source is None and (wall_anchor_ms is not None or _mock_clock_runs())
        if wall_source is None and self._virtual:
            anchor_ms = float(int(time.time() * 1000) if wall_anchor_ms is None else wall_anchor_ms)
            wall_source = lambda: anchor_ms + (trio.current_time() - trio_now) * 1000  # noqa: E731
        self._source: WallSource = wall_source or _host_wall_ms
        # The host's own clock is read at most every `HOST_READ_EVERY_MS`; a given source, always.
        self._host = self._source is _host_wall_ms
        self._next_read_ms = float("-inf")
        # now_ms = trio time (in ms) + offset; the offset only grows (see the module docstring).
        self._offset_ms = self._source() - trio_now * 1000
        self._ahead_ms = 0.0
        self._steps = 0

    @classmethod
    def at_trio_zero(cls, wall_ms: int) -> "Clock":
        """A virtual clock that reads `wall_ms` at trio time 0, whenever it is made.

        For simulations that restart the server inside one trio run: every incarnation's clock
        then gives the same wall time for the same virtual instant.
        """
        clock = cls(wall_ms, wall_source=lambda: wall_ms + trio.current_time() * 1000, virtual=True)
        # Exactly `wall_ms`, as the source says: `(wall_ms + t) - t` in floating point may miss it
        # by a fraction of a millisecond, and every incarnation must round the same instant alike.
        clock._offset_ms = float(wall_ms)
        return clock

    def now_ms(self) -> int:
        """The current wall time in whole milliseconds: never earlier than a previous reading."""
        base_ms = self._trio_time() * 1000
        if self._virtual or base_ms < self._next_read_ms:  # nothing to read (see above)
            return round(base_ms + self._offset_ms)
        if self._host:
            self._next_read_ms = base_ms + HOST_READ_EVERY_MS
        gap_ms = self._source() - base_ms - self._offset_ms
        if gap_ms > 0:
            if gap_ms >= WALL_STEP_LOGGED_MS:
                self._stepped(gap_ms)
            self._offset_ms += gap_ms
            self._ahead_ms = 0.0
        else:
            ahead_ms = -gap_ms
            if ahead_ms >= WALL_STEP_LOGGED_MS and ahead_ms > self._ahead_ms + WALL_STEP_LOGGED_MS:
                self._stepped(gap_ms)
            self._ahead_ms = ahead_ms
        return round(base_ms + self._offset_ms)

    @property
    def ahead_of_host_ms(self) -> float:
        """How far `now_ms()` was ahead of the wall source at the last reading (after a backward step)."""
        return self._ahead_ms

    @property
    def steps(self) -> int:
        """Steps of the wall source of at least `WALL_STEP_LOGGED_MS` seen so far."""
        return self._steps

    def deadline_for(self, wall_ms: int) -> float:
        """The trio deadline at which to look again whether `now_ms()` has reached `wall_ms`.

        Exactly that instant for a virtual source; otherwise at most `WALL_RECHECK_S` from now, since
        a forward step of the host clock can bring the instant closer while one sleeps.
        """
        deadline = (wall_ms - self._offset_ms) / 1000
        if self._virtual:
            return deadline
        return min(deadline, trio.current_time() + WALL_RECHECK_S)

    def deadline_after(self, duration_ms: float) -> float:
        """The trio deadline `duration_ms` from now: for a wait of a length (a long poll), which no
        step of the host clock may shorten or stretch. Not to be confused with `deadline_for`."""
        return trio.current_time() + duration_ms / 1000

    def advance_anchor_to(self, wall_ms: int) -> None:
        """Make `now_ms()` at least `wall_ms` from here on.

        Recovery calls this with the newest time found in the journal, so that a host clock that
        went backwards across a restart cannot make the kernel decide with a time earlier than one
        it already recorded.
        """
        behind = wall_ms - self.now_ms()
        if behind > 0:
            self._offset_ms += behind

    def _stepped(self, gap_ms: float) -> None:
        self._steps += 1
        direction = "forward: followed" if gap_ms > 0 else "backward: not followed, the server's time runs ahead"
        log.warning("the host clock stepped %+.0f ms (%s)", gap_ms, direction)
