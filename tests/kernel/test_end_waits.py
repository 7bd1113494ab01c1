"""Shutdown ends parked calls: `Kernel.end_waits` answers every long poll EMPTY at once, in virtual time."""

import pytest
import trio
import trio.testing

from runstate.actors import EMPTY, Outcome

pytestmark = pytest.mark.trio

ACTOR = ("test", "default", "inbox")


def nothing_yet(state, now_ms):
    return Outcome(empty=True)


async def test_parked_calls_are_answered_empty_at_once_and_new_ones_do_not_park(harness, autojump_clock):
    """Two callers parked for 30 s get EMPTY the moment end_waits runs; a later caller is not parked at all."""
    kernel = harness.kernel
    answers = []

    async def poll():
        answers.append((await kernel.call(ACTOR, nothing_yet, wait_until=trio.current_time() + 30), trio.current_time()))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(poll)
        nursery.start_soon(poll)
        await trio.sleep(2)
        await trio.testing.wait_all_tasks_blocked()
        assert kernel.actors == 1 and not answers
        assert kernel.end_waits() == 2
    assert [answer for answer, _ in answers] == [EMPTY, EMPTY]
    assert all(at == pytest.approx(harness.t0 + 2) for _, at in answers)
    assert kernel.actors == 0

    before = trio.current_time()
    assert await kernel.call(ACTOR, nothing_yet, wait_until=trio.current_time() + 30) is EMPTY
    assert trio.current_time() == before


async def test_ending_waits_leaves_other_calls_alone(harness, autojump_clock):
    """Commands that change state still run and answer normally after end_waits."""
    kernel = harness.kernel
    kernel.end_waits()
    scope = await harness.scopes.create("default")
    assert scope["effective"] == "ACTIVE"
