"""The one source of time for the kernel and the shell.

Everything that decides something with time gets it from a `Clock`: the state machines receive
`now_ms` (wall-clock milliseconds since the Unix epoch, UTC) as an argument and never read a clock
themselves. The wall time is derived from trio's clock: an anchor taken once, plus the monotonic
delta since. Two consequences follow, both wanted:

- Under trio's `MockClock` the whole server runs in virtual time, SDK renewals included, and a test
  can assert exact virtual instants.
- Wall time never goes backwards inside one process, even when the host clock is stepped.

Persisted times are wall milliseconds; in-memory sleeps are trio deadlines. `deadline_for()` is the
only place that turns one into the other. Not to be confused with `time.monotonic()`, which the
kernel never reads: trio gives its clock a random offset precisely to catch code that does.
"""

from __future__ import annotations

import time

import trio

__all__ = ["Clock"]


class Clock:
    """Wall milliseconds derived from trio's clock; create it inside a running trio loop."""

    __slots__ = ("_trio_anchor", "_wall_anchor_ms")

    def __init__(self, wall_anchor_ms: int | None = None) -> None:
        self._trio_anchor = trio.current_time()
        self._wall_anchor_ms = int(time.time() * 1000) if wall_anchor_ms is None else wall_anchor_ms

    def now_ms(self) -> int:
        """The current wall time in whole milliseconds."""
        return self._wall_anchor_ms + round((trio.current_time() - self._trio_anchor) * 1000)

    def deadline_for(self, wall_ms: int) -> float:
        """The trio deadline at which `now_ms()` reaches `wall_ms`."""
        return self._trio_anchor + (wall_ms - self._wall_anchor_ms) / 1000

    def advance_anchor_to(self, wall_ms: int) -> None:
        """Make `now_ms()` at least `wall_ms` from here on.

        Recovery calls this with the newest time found in the journal, so that a host clock that
        went backwards across a restart cannot make the kernel decide with a time earlier than one
        it already recorded.
        """
        behind = wall_ms - self.now_ms()
        if behind > 0:
            self._wall_anchor_ms += behind
