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


async def test_entries_of_renewed_timers_are_settled_without_firing_anything(nursery, autojump_clock):
    """Entries whose timers moved later are queued again at their new times on the way, due or
    not, and nothing fires before it is due."""
    supervisor, fired = await run_supervisor(nursery)
    for n in range(100):
        supervisor.arm(Timer(T0 + 1000 + n, ("claim", n), "lease", n))
    await trio.sleep(0.5)
    for n in range(100):
        supervisor.arm(Timer(T0 + 60_000 + n, ("claim", n), "lease", n))  # renewed, none due yet
    supervisor.arm(Timer(T0 + 5000, ("claim", "still"), "lease", "still"))
    assert supervisor.fire_due(supervisor._clock.now_ms()) == 100  # all settled at once
    assert fired == [] and supervisor._heap[0][2] == (("claim", "still"), "lease")
    await trio.sleep(100)
    assert [f[0] for f in fired] == [5000] + [60_000 + n for n in range(100)]


class _Steps(trio.abc.Instrument):
    def __init__(self, name: str) -> None:
        self.name, self.steps = name, 0

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        if self.name in task.name:
            self.steps += 1


async def test_leases_renewed_at_a_third_of_their_term_hardly_wake_the_supervisor(nursery, autojump_clock):
    """A thousand 30 s leases, each renewed every 10 s for 200 s: the old entries reaching the top
    are settled together, not one wake-up each (which would be 10,000), and the one lease left to
    lapse still fires at its exact due time."""
    supervisor, fired = await run_supervisor(nursery)
    steps = _Steps("Supervisor.run")
    trio.lowlevel.add_instrument(steps)
    try:
        for tick in range(20_000):  # one renewal every 10 ms, each lease every 10 s
            n = tick % 1000
            if n == 7 and tick > 1000:
                continue  # lease 7 is renewed once, at 70 ms, and then left to lapse
            supervisor.arm(Timer(supervisor._clock.now_ms() + 30_000, ("claim", n), "lease", tick))
            await trio.sleep(0.01)
    finally:
        trio.lowlevel.remove_instrument(steps)
    assert [(f[0], f[1]) for f in fired] == [(30_070, ("claim", 7))]
    assert steps.steps < 300, steps.steps  # (47; with one wake-up per old entry: about 6,000)
