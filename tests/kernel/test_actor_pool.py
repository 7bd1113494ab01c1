"""The pool of idle actor tasks, in virtual time: a retired actor's task waits in its partition's
pool and serves the next key with no actor (no task is started for it); the pool is bounded, its
tasks end when the partition stops, and a key never has two actors at once."""

import pytest
import trio
import trio.testing

from runstate.actors import Clock, IdSource, Kernel, KernelState
from runstate.actors import partition as partition_module
from runstate.actors.journal import MemoryJournal
from runstate.actors.partition import ACTOR_LINGER_S, Partition

from .conftest import T0, Harness
from ..single import only

pytestmark = pytest.mark.trio


def tasks_living() -> int:
    return trio.lowlevel.current_statistics().tasks_living


async def acquire(h, scope_id, key, holder="a"):
    return await h.claims.acquire("default", scope_id=scope_id, key=key, holder=holder, session="s-" + holder, lease_s=60)


async def until_retired(h) -> None:
    """Two linger periods: every idle actor has retired."""
    await trio.sleep(2 * ACTOR_LINGER_S)
    await trio.testing.wait_all_tasks_blocked()
    assert h.kernel.actors == 0


async def test_a_retired_actor_task_serves_the_next_key_from_the_pool(harness, autojump_clock):
    """Ten keys' actors retire into the pool; five new keys are served by pooled tasks, so no task
    starts and none ends: the living tasks stay as many, five fewer wait in the pool."""
    h = harness
    scope = await h.scopes.create("default")
    for n in range(10):
        await acquire(h, scope["id"], f"k{n}")
    await until_retired(h)
    pooled = h.kernel.actor_tasks_pooled
    assert pooled == 11  # the ten keys' tasks and the scope's
    living = tasks_living()

    async with trio.open_nursery() as nursery:
        for n in range(10, 15):
            nursery.start_soon(acquire, h, scope["id"], f"k{n}")
        await trio.testing.wait_all_tasks_blocked()
        assert h.kernel.actors == 5 and h.kernel.actor_tasks_pooled == pooled - 5
        assert tasks_living() == living + 5 - 5  # five callers started; no actor task did
    assert len(only(h.kernel).state.space("default").claims) == 15
    await until_retired(h)
    assert h.kernel.actor_tasks_pooled == pooled and tasks_living() == living


async def test_stopping_the_partition_ends_its_pooled_tasks(autojump_clock):
    """Cancelled, the kernel's nursery ends every pooled task (they leave the pool through their
    abort) and exits at once; nothing is left waiting."""
    kernel = Kernel(state=KernelState(), journal=MemoryJournal(keep=True), clock=Clock(wall_anchor_ms=T0), ids=IdSource(seed=1))
    before = tasks_living()
    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            await nursery.start(kernel.run)
            h = Harness(kernel)
            scope = await h.scopes.create("default")
            async with trio.open_nursery() as callers:
                for n in range(20):
                    callers.start_soon(acquire, h, scope["id"], f"k{n}")
            await until_retired(h)
            assert kernel.actor_tasks_pooled == 21
            stopping = trio.current_time()
            nursery.cancel_scope.cancel()
    assert trio.current_time() == stopping
    assert kernel.actor_tasks_pooled == 0 and kernel.actors == 0
    assert tasks_living() == before


async def test_a_burst_past_the_pool_bound_ends_the_tasks_past_it(harness, autojump_clock, monkeypatch):
    """Fifty keys at once with four lingering at most and eight pooled at most: once they are idle
    the pool holds eight tasks and every other actor task has ended."""
    monkeypatch.setattr(partition_module, "ACTORS_LINGERING_MAX", 4)
    monkeypatch.setattr(partition_module, "ACTOR_TASKS_POOLED_MAX", 8)
    h = harness
    scope = await h.scopes.create("default")
    await until_retired(h)
    living, pooled = tasks_living(), h.kernel.actor_tasks_pooled
    assert pooled == 1
    async with trio.open_nursery() as callers:
        for n in range(50):
            callers.start_soon(acquire, h, scope["id"], f"k{n}")
    await trio.testing.wait_all_tasks_blocked()
    assert len(only(h.kernel)._lingering) == 4
    assert h.kernel.actor_tasks_pooled == 8
    await until_retired(h)
    assert h.kernel.actor_tasks_pooled == 8
    assert tasks_living() == living - pooled + 8
    assert len(only(h.kernel).state.space("default").claims) == 50


async def test_one_key_never_has_two_actors_at_once(harness, autojump_clock, monkeypatch):
    """Callers come back to their keys exactly when the sweep retires the keys' actors (every two
    linger periods, on the sweep's instants), and new keys take pooled tasks meanwhile: every turn
    of a key runs in the task that serves it, which gives the key up (its actor retires) before any
    other task runs a turn of it (retired, it is not running)."""
    serving: dict[object, trio.lowlevel.Task] = {}
    turns = 0
    turn, retire = Partition._turn, Partition._retire_if_idle

    def checked_turn(self, entry, call):
        nonlocal turns
        task = trio.lowlevel.current_task()
        owner = serving.setdefault(entry.key, task)
        assert owner is task, f"{entry.key} has two actors"
        turns += 1
        return turn(self, entry, call)

    def checked_retire(self, entry):
        if not entry.running:  # retired (by its task, or by the sweep while it lingered): no task serves it
            serving.pop(entry.key, None)
        retire(self, entry)

    monkeypatch.setattr(Partition, "_turn", checked_turn)
    monkeypatch.setattr(Partition, "_retire_if_idle", checked_retire)
    h = harness
    scope = await h.scopes.create("default")

    async def come_back(n):
        lease = await acquire(h, scope["id"], f"k{n}", holder=f"h{n}")
        for _ in range(6):
            await trio.sleep(2 * ACTOR_LINGER_S)
            lease = await h.claims.renew("default", key=f"k{n}", token=lease["token"])

    async def new_keys():
        for n in range(100, 160):
            await trio.sleep(ACTOR_LINGER_S / 5)
            await acquire(h, scope["id"], f"k{n}")

    # The sweep has run every linger period since the scope's actor lingered (new keys keep some
    # actor lingering throughout), so its instants and the callers' renewals fall together.
    async with trio.open_nursery() as callers:
        for n in range(40):
            callers.start_soon(come_back, n)
        callers.start_soon(new_keys)
    assert turns == 1 + 40 * 7 + 60
    await until_retired(h)
    assert not serving
