"""Shutdown ends parked calls: `Kernel.end_waits` answers every long poll EMPTY at once, in virtual time."""

import pytest
import trio
import trio.testing

from runstate.actors import EMPTY

from ..ops import MailboxOps, MessageOps

pytestmark = pytest.mark.trio


async def test_parked_calls_are_answered_empty_at_once_and_new_ones_do_not_park(harness, autojump_clock):
    """Two callers parked for 30 s get EMPTY the moment end_waits runs; a later caller is not parked at all."""
    kernel = harness.kernel
    scope_id = (await harness.scopes.create("default"))["id"]
    mailbox_id = (await MailboxOps(kernel).create("default", name="inbox"))["id"]
    await trio.sleep(5)  # the actors that made them have retired
    assert kernel.actors == 0
    t0 = trio.current_time()
    messages = MessageOps(kernel)
    answers = []

    async def receive():
        return await messages.receive("default", mailbox_id, scope_id=scope_id, holder="h", session="s", lease_s=30, wait_ms=30_000)

    async def poll():
        answers.append((await receive(), trio.current_time()))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(poll)
        nursery.start_soon(poll)
        await trio.sleep(2)
        await trio.testing.wait_all_tasks_blocked()
        assert kernel.actors == 1 and not answers
        assert kernel.end_waits() == 2
    assert [answer for answer, _ in answers] == [EMPTY, EMPTY]
    assert all(at == pytest.approx(t0 + 2) for _, at in answers)
    assert kernel.actors == 0

    before = trio.current_time()
    assert await receive() is EMPTY
    assert trio.current_time() == before


async def test_ending_waits_leaves_other_calls_alone(harness, autojump_clock):
    """Commands that change state still run and answer normally after end_waits."""
    kernel = harness.kernel
    kernel.end_waits()
    scope = await harness.scopes.create("default")
    assert scope["effective"] == "ACTIVE"
