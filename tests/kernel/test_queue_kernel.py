"""Queues and tasks through the kernel's actors and supervisor, in virtual time (exact instants).

Long polls park on the queue's actor and are answered by the turn that changes the queue; lease
ends, backoffs, deadlines and retention are the supervisor's timers. The tests assert the virtual
instant at which each thing happens and, through the harness, that the journal replays exactly.
"""

from __future__ import annotations

import pytest
import trio

from runstate.actors import Idem, KernelError
from runstate.actors.errors import SCOPE_CANCELLED, STALE_CLAIM
from runstate.actors.timestamps import parse_timestamp

from .queue_harness import queue_harness  # noqa: F401 - the fixture
from .queue_world import SPACE, T0
from ..single import only

pytestmark = pytest.mark.trio


async def test_a_parked_recv_is_answered_at_the_instant_of_the_send(queue_harness, autojump_clock):
    """A receiver waiting 20 s gets a message sent at 3.000 s at 3.000 s, with no turns in between."""
    h = queue_harness
    scope, mailbox = await h.run_and_mailbox()
    got = {}

    async def receiver():
        got["delivery"] = await h.recv(mailbox, scope, wait_ms=20_000)
        got["at"] = h.elapsed()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(receiver)
        await h.settle()
        turns_parked = h.kernel.turns
        await trio.sleep(3)
        assert h.kernel.turns == turns_parked, "the parked receiver was polled"
        await h.messages.send(SPACE, mailbox, scope_id=scope, payload={"company": "acme"})
    assert got["at"] == 3.0
    assert got["delivery"]["message"]["payload"] == {"company": "acme"}
    assert got["delivery"]["message"]["attempt"] == 1


async def test_a_long_poll_with_nothing_ends_at_wait_ms_capped_at_thirty_seconds(queue_harness, autojump_clock):
    h = queue_harness
    scope, mailbox = await h.run_and_mailbox()
    assert await h.recv(mailbox, scope, wait_ms=1_500) is None
    assert h.elapsed() == 1.5
    assert await h.recv(mailbox, scope, wait_ms=120_000) is None
    assert h.elapsed() == 31.5
    assert await h.recv(mailbox, scope) is None
    assert h.elapsed() == 31.5


async def test_parked_receivers_are_served_in_arrival_order(queue_harness, autojump_clock):
    h = queue_harness
    scope, mailbox = await h.run_and_mailbox()
    order = []

    async def receiver(name):
        delivery = await h.recv(mailbox, scope, holder=name, wait_ms=10_000)
        order.append((name, None if delivery is None else delivery["message"]["payload"], h.elapsed()))

    async with trio.open_nursery() as nursery:
        for name in ("first", "second", "third"):
            nursery.start_soon(receiver, name)
            await h.settle()
        await trio.sleep(1)
        await h.messages.send(SPACE, mailbox, scope_id=scope, payload=1)
        await trio.sleep(1)
        await h.messages.send(SPACE, mailbox, scope_id=scope, payload=2)
    assert order == [("first", 1, 1.0), ("second", 2, 2.0), ("third", None, 10.0)]


async def test_a_receiver_that_goes_away_is_not_handed_a_lease(queue_harness, autojump_clock):
    """A long poll cancelled at 2 s (the client disconnected) leases nothing; the message waits."""
    h = queue_harness
    scope, mailbox = await h.run_and_mailbox()
    with trio.move_on_after(2):
        await h.recv(mailbox, scope, wait_ms=20_000)
    await h.settle()
    assert not h.kernel.actors or all(not a.waiters for a in only(h.kernel)._actors.values())
    await h.messages.send(SPACE, mailbox, scope_id=scope, payload="kept")
    delivery = await h.recv(mailbox, scope)
    assert delivery["message"]["attempt"] == 1


async def test_recv_with_the_same_idempotency_key_returns_the_same_delivery(queue_harness, autojump_clock):
    h = queue_harness
    scope, mailbox = await h.run_and_mailbox()
    await h.messages.send(SPACE, mailbox, scope_id=scope, payload=1)
    await h.messages.send(SPACE, mailbox, scope_id=scope, payload=2)
    idem = Idem(SPACE, "a1b2c3", "fingerprint")
    first = await h.recv(mailbox, scope, idem=idem)
    again = await h.recv(mailbox, scope, idem=idem)
    assert again == first
    assert (await h.recv(mailbox, scope))["message"]["payload"] == 2


async def test_a_worker_that_stops_renewing_is_taken_over_exactly_at_lease_end(queue_harness, autojump_clock):
    """Worker A leases for 5 s and goes silent; B, parked, gets attempt 2 at 5.000 s; A's late
    completion is STALE_CLAIM and the task keeps B's result."""
    h = queue_harness
    scope, mailbox = await h.run_and_mailbox()
    ticket = await h.tasks.submit(SPACE, scope_id=scope, mailbox_id=mailbox, key="research:acme", task_input={"company": "acme"})
    first = await h.recv(mailbox, scope, holder="a", lease_s=5)
    assert first["leaseExpiresAt"] == "2027-01-15T08:00:05.000Z"
    second = await h.recv(mailbox, scope, holder="b", lease_s=5, wait_ms=30_000)
    assert h.elapsed() == 5.0
    assert second["message"]["attempt"] == 2 and second["message"]["taskId"] == ticket["taskId"]
    await h.messages.complete(SPACE, second["message"]["id"], token=second["token"], result={"payload": "from b"})
    with pytest.raises(KernelError) as caught:
        await h.messages.complete(SPACE, first["message"]["id"], token=first["token"], result={"payload": "from a"})
    assert caught.value.code == STALE_CLAIM
    view = h.tasks.view(SPACE, ticket["taskId"])
    assert view["state"] == "SUCCEEDED" and view["outcome"] == "from b" and view["attempt"] == 2


async def test_renewals_keep_a_delivery_far_beyond_its_lease(queue_harness, autojump_clock):
    h = queue_harness
    scope, mailbox = await h.run_and_mailbox()
    await h.messages.send(SPACE, mailbox, scope_id=scope, payload=1)
    delivery = await h.recv(mailbox, scope, lease_s=5)
    for _ in range(100):
        await trio.sleep(3)
        await h.messages.renew(SPACE, delivery["message"]["id"], token=delivery["token"], lease_s=5)
    assert await h.recv(mailbox, scope) is None
    assert only(h.kernel).supervisor.fired == 0
    await trio.sleep(5)
    await h.settle()  # the expiry falls due at this very instant: let the supervisor's turn run first
    assert (await h.recv(mailbox, scope))["message"]["attempt"] == 2
    assert h.elapsed() == 305.0


async def test_retries_come_back_after_one_two_four_seconds_of_jittered_backoff(queue_harness, autojump_clock):
    """Each retry is visible again at the announced instant, 0.8-1.0 x 1 s, 2 s, 4 s after the nack,
    and a receiver parked meanwhile is answered at exactly that instant."""
    h = queue_harness
    scope, mailbox = await h.run_and_mailbox(max_attempts=10)
    await h.messages.send(SPACE, mailbox, scope_id=scope, payload="flaky")
    delivery = await h.recv(mailbox, scope)
    for attempt, nominal_s in ((1, 1), (2, 2), (3, 4)):
        assert delivery["message"]["attempt"] == attempt
        nacked_ms = h.kernel.clock.now_ms()
        reply = await h.messages.nack(SPACE, delivery["message"]["id"], token=delivery["token"], retry=True)
        visible_ms = parse_timestamp(reply["visibleAt"])
        assert 0.8 * nominal_s * 1000 <= visible_ms - nacked_ms <= nominal_s * 1000
        delivery = await h.recv(mailbox, scope, wait_ms=30_000)
        assert h.kernel.clock.now_ms() == visible_ms
    assert delivery["message"]["attempt"] == 4


async def test_past_the_attempt_limit_the_task_fails_at_the_last_lease_end(queue_harness, autojump_clock):
    """maxAttempts 3 and 5 s leases nobody completes: FAILED at exactly 15 s, dead-lettered."""
    h = queue_harness
    scope, mailbox = await h.run_and_mailbox(max_attempts=3)
    ticket = await h.tasks.submit(SPACE, scope_id=scope, mailbox_id=mailbox, key="k")
    for attempt in (1, 2, 3):
        delivery = await h.recv(mailbox, scope, lease_s=5, wait_ms=30_000)
        assert delivery["message"]["attempt"] == attempt
        assert h.elapsed() == 5.0 * (attempt - 1)
    assert await h.recv(mailbox, scope, wait_ms=30_000) is None
    view = h.tasks.view(SPACE, ticket["taskId"])
    assert view["state"] == "FAILED" and view["attempt"] == 3
    assert view["updatedAt"] == "2027-01-15T08:00:15.000Z"
    assert "attempts_exhausted" in view["outcomeReason"]
    assert h.mailboxes.dead_letters(SPACE, mailbox, 10)["total"] == 1


async def test_a_task_expires_exactly_at_its_deadline(queue_harness, autojump_clock):
    h = queue_harness
    scope, mailbox = await h.run_and_mailbox()
    ticket = await h.tasks.submit(SPACE, scope_id=scope, mailbox_id=mailbox, key="k", deadline_ms=T0 + 10_000)
    await trio.sleep(9.999)
    assert h.tasks.view(SPACE, ticket["taskId"])["state"] == "QUEUED"
    await trio.sleep(0.001)
    await h.settle()
    view = h.tasks.view(SPACE, ticket["taskId"])
    assert view["state"] == "EXPIRED" and view["updatedAt"] == "2027-01-15T08:00:10.000Z"
    assert view["outcomeReason"] == "deadline_exceeded"
    assert await h.recv(mailbox, scope) is None


async def test_a_finished_task_is_tombstoned_exactly_at_the_end_of_retention(queue_harness, autojump_clock):
    h = queue_harness
    scope, mailbox = await h.run_and_mailbox()
    ticket = await h.tasks.submit(SPACE, scope_id=scope, mailbox_id=mailbox, key="k")
    delivery = await h.recv(mailbox, scope)
    await trio.sleep(1)
    await h.messages.complete(SPACE, delivery["message"]["id"], token=delivery["token"], result={"payload": "r"})
    week_s = 7 * 86_400
    await trio.sleep(week_s - 0.001)
    await h.settle()
    assert not h.space.tasks.get(ticket["taskId"]).tombstoned
    await trio.sleep(0.001)
    await h.settle()
    task = h.space.tasks.get(ticket["taskId"])
    assert task.tombstoned and task.outcome is None
    tombstone = [r for r in only(h.kernel).journal.records if r["type"] == "task.tombstoned"]
    assert tombstone and tombstone[0]["at_ms"] == T0 + 1_000 + week_s * 1000
    view = h.tasks.view(SPACE, ticket["taskId"])
    assert view["state"] == "SUCCEEDED" and view["outcome"] is None and view["tombstoned"] is True


async def test_cancelling_a_run_wakes_its_parked_receivers_at_once(queue_harness, autojump_clock):
    """A recv parked in a child run, and one on a queue that never had a message, both get
    SCOPE_CANCELLED at 2.000 s when the parent run is cancelled; queued tasks are cancelled."""
    h = queue_harness
    scope, mailbox = await h.run_and_mailbox()
    child = (await h.scopes.create(SPACE, parent_id=scope))["id"]
    other_mailbox = (await h.mailboxes.create(SPACE, name="other"))["id"]
    ticket = await h.tasks.submit(SPACE, scope_id=scope, mailbox_id=mailbox, key="queued")
    errors = []

    async def receiver(mailbox_id, scope_id):
        try:
            await h.recv(mailbox_id, scope_id, wait_ms=20_000)
        except KernelError as error:
            errors.append((error.code, h.elapsed()))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(receiver, mailbox, child)
        nursery.start_soon(receiver, other_mailbox, scope)
        await trio.sleep(2)
        await h.scopes.cancel(SPACE, scope)
    assert errors == [(SCOPE_CANCELLED, 2.0), (SCOPE_CANCELLED, 2.0)]
    view = h.tasks.view(SPACE, ticket["taskId"])
    assert view["state"] == "CANCELLED" and view["outcomeReason"] == "scope_cancelled"


async def test_a_run_reaching_its_deadline_wakes_its_parked_receivers(queue_harness, autojump_clock):
    h = queue_harness
    scope = (await h.scopes.create(SPACE, deadline_ms=T0 + 4_000))["id"]
    mailbox = (await h.mailboxes.create(SPACE, name="q"))["id"]
    with pytest.raises(KernelError) as caught:
        await h.recv(mailbox, scope, wait_ms=20_000)
    assert caught.value.code == SCOPE_CANCELLED and h.elapsed() == 4.0
