"""The supervisor's lazy heap: one entry per live timer, stale proposals dropped, exact firing times."""

import pytest
import trio

from runstate.actors import Clock, Timer
from runstate.actors.supervisor import Supervisor

pytestmark = pytest.mark.trio

T0 = 1_800_000_000_000


async def run_supervisor(nursery):
    fired = []
    clock = Clock(wall_anchor_ms=T0)
    supervisor = Supervisor(clock, lambda actor, tag, marker: fired.append((clock.now_ms() - T0, actor, marker)))
    await nursery.start(supervisor.run)
    return supervisor, fired


async def test_timers_fire_at_their_due_time_in_order(nursery, autojump_clock):
    """Three timers armed out of order fire at 1 s, 2 s, 3 s exactly."""
    supervisor, fired = await run_supervisor(nursery)
    for due in (3000, 1000, 2000):
        supervisor.arm(Timer(T0 + due, ("claim", str(due)), "lease", due))
    await trio.sleep(10)
    assert [f[0] for f in fired] == [1000, 2000, 3000]


async def test_moving_a_timer_later_does_not_grow_the_heap_and_fires_once_at_the_new_time(nursery, autojump_clock):
    """Renewing a lease a hundred times keeps one heap entry; the timer fires once, at the last due time."""
    supervisor, fired = await run_supervisor(nursery)
    actor = ("claim", "k")
    for n in range(100):
        supervisor.arm(Timer(T0 + 5000 + n * 1000, actor, "lease", f"m{n}"))
    assert len(supervisor._heap) == 1
    await trio.sleep(200)
    assert fired == [(104_000, actor, "m99")]


async def test_moving_a_timer_earlier_wakes_the_sleeping_supervisor(nursery, autojump_clock):
    """A timer armed earlier than the one being slept on fires on time."""
    supervisor, fired = await run_supervisor(nursery)
    supervisor.arm(Timer(T0 + 60_000, ("claim", "late"), "lease", 1))
    await trio.sleep(1)
    supervisor.arm(Timer(T0 + 2000, ("claim", "early"), "lease", 2))
    await trio.sleep(100)
    assert [f[0] for f in fired] == [2000, 60_000]


async def test_a_disarmed_timer_never_fires(nursery, autojump_clock):
    """Disarm removes the slot; its heap entry is dropped when it pops."""
    supervisor, fired = await run_supervisor(nursery)
    supervisor.arm(Timer(T0 + 1000, ("claim", "k"), "lease", 1))
    supervisor.disarm(("claim", "k"), "lease")
    await trio.sleep(5)
    assert fired == [] and len(supervisor) == 0


async def test_an_expiry_storm_is_handled_in_slices(nursery, autojump_clock):
    """Ten thousand timers due at once all fire, in batches that let other tasks run."""
    supervisor, fired = await run_supervisor(nursery)
    for n in range(10_000):
        supervisor.arm(Timer(T0 + 1000, ("claim", n), "lease", n))
    await trio.sleep(2)
    assert len(fired) == 10_000
