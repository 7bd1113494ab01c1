"""The host's clock is read at most once per `HOST_READ_EVERY_MS` of trio time.

Run on a trio clock the test moves by hand (not `MockClock`, under which the wall source is
virtual), with the host's clock replaced by one the test reads and steps.
"""

from __future__ import annotations

import trio
import trio.abc

from runstate.actors import clock as clock_module
from runstate.actors.clock import HOST_READ_EVERY_MS, Clock


class HandClock(trio.abc.Clock):
    """Trio time that moves only when the test says so."""

    def __init__(self) -> None:
        self.now = 1000.0

    def start_clock(self) -> None:
        pass

    def current_time(self) -> float:
        return self.now

    def deadline_to_sleep_time(self, deadline: float) -> float:
        return 0.0


def test_the_host_is_read_once_per_interval_and_a_step_is_seen_within_it(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    host = {"ms": 1_800_000_000_000.0, "reads": 0}

    def host_ms() -> float:
        host["reads"] += 1
        return host["ms"]

    monkeypatch.setattr(clock_module, "_host_wall_ms", host_ms)
    hand = HandClock()

    async def main() -> None:
        clock = Clock()
        reads = host["reads"]
        first = clock.now_ms()
        for _ in range(50):  # many turns within one interval: one reading
            assert clock.now_ms() == first
        assert host["reads"] == reads + 1
        host["ms"] += 5_000  # the host steps forward
        assert clock.now_ms() == first  # not read yet: within the interval
        hand.now += HOST_READ_EVERY_MS / 1000
        seen = clock.now_ms()
        assert host["reads"] == reads + 2
        assert seen >= first + 5_000  # followed at the next reading
        host["ms"] -= 60_000  # a backward step is never followed
        hand.now += HOST_READ_EVERY_MS / 1000
        assert clock.now_ms() >= seen

    trio.run(main, clock=hand)


def test_a_given_wall_source_is_read_on_every_call() -> None:
    reads = []

    async def main() -> None:
        clock = Clock(wall_source=lambda: reads.append(1) or 1_800_000_000_000.0)
        before = len(reads)
        for _ in range(5):
            clock.now_ms()
        assert len(reads) == before + 5

    trio.run(main, clock=HandClock())
