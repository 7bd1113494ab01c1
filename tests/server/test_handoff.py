"""No time wasted between holders: what is given back goes to the first parked waiter, at once.

A released claim, and one whose lease ran out, is taken in the very turn that ended it by the
first acquirer parked on it (`waitMs`), then the next, in the order they parked; a message sent
to a queue with parked receivers goes to the oldest of them in the turn of the send. Many
parked callers waiting for the same thing are not each run again on every change (one that
still finds nothing stands for the others), and none is skipped when it is its turn. All in
virtual time, over HTTP in process.
"""

from __future__ import annotations

import pytest
import trio
import trio.testing

from .asgi_client import AsgiClient, client  # noqa: F401 - the fixture

pytestmark = pytest.mark.trio


def acquire_body(run: str, holder: str, **fields: object) -> dict:
    return {"scopeId": run, "key": "k", "holder": holder, "holderSession": f"s-{holder}", "leaseSeconds": 5, **fields}


async def test_a_released_claim_goes_to_the_first_parked_acquirer_in_the_same_instant(client, autojump_clock):
    run = await client.run()
    first = (await client.post("/claims", acquire_body(run, "h0"))).json
    got: list[tuple[str, float, int]] = []
    tokens: dict[str, str] = {}

    async def wait(holder: str) -> None:
        answer = await client.post("/claims", acquire_body(run, holder, waitMs=30_000))
        got.append((holder, trio.current_time(), answer.json["generation"]))
        tokens[holder] = answer.json["token"]

    async with trio.open_nursery() as nursery:
        for n, holder in enumerate(("a", "b", "c")):
            nursery.start_soon(wait, holder)
            await trio.sleep(0.1)  # they park in this order
        await trio.sleep(1)
        released_at = trio.current_time()
        await client.post("/claims/k/release", {"token": first["token"]})
        await trio.sleep(0.5)
        assert got == [("a", released_at, 2)]
        released_at = trio.current_time()
        await client.post("/claims/k/release", {"token": tokens["a"]})
        await trio.sleep(0.5)
        assert got[1] == ("b", released_at, 3)
        # c's turn comes when b's lease runs out (5 s), at that instant.
        await trio.sleep(10)
    expires = got[1][1] + 5
    assert got[2] == ("c", pytest.approx(expires, abs=0.002), 4)


async def test_a_sent_message_goes_to_the_oldest_parked_receiver(client, autojump_clock):
    run, mailbox = await client.run(), await client.mailbox()
    got: list[tuple[str, object, float]] = []

    async def receive(holder: str) -> None:
        body = {"scopeId": run, "holder": holder, "holderSession": "s", "waitMs": 30_000}
        answer = await client.post(f"/mailboxes/{mailbox}/recv", body)
        got.append((holder, answer.json["message"]["payload"], trio.current_time()))

    async with trio.open_nursery() as nursery:
        for holder in ("w1", "w2", "w3"):
            nursery.start_soon(receive, holder)
            await trio.sleep(0.1)
        for n in range(3):
            await trio.sleep(1)
            sent_at = trio.current_time()
            await client.post(f"/mailboxes/{mailbox}/messages", {"scopeId": run, "payload": n})
            await trio.testing.wait_all_tasks_blocked()
            assert got[-1] == (f"w{n + 1}", n, sent_at)


async def test_a_hundred_parked_receivers_are_not_each_run_again_on_every_change(client, autojump_clock):
    """While a hundred receivers are parked on a queue, changes that deliver nothing (renewals,
    completions) run a few turns, not a hundred each; every receiver still gets a message, in
    the order they parked."""
    run, mailbox = await client.run(), await client.mailbox()
    partition = client.runtime.kernel.partition_of(client.space)
    worker = {"scopeId": run, "holder": "busy", "holderSession": "s"}
    await client.post(f"/mailboxes/{mailbox}/messages", {"scopeId": run, "payload": "held"})
    held = (await client.post(f"/mailboxes/{mailbox}/recv", worker)).json
    order: list[int] = []

    async def receive(n: int) -> None:
        body = {"scopeId": run, "holder": f"w{n}", "holderSession": "s", "waitMs": 30_000}
        answer = await client.post(f"/mailboxes/{mailbox}/recv", body)
        order.append((n, answer.json["message"]["payload"]))

    async with trio.open_nursery() as nursery:
        for n in range(100):
            nursery.start_soon(receive, n)
            await trio.sleep(0.001)
        await trio.sleep(1)
        turns = partition.turns
        for _ in range(10):
            assert (await client.post(f"/messages/{held['message']['id']}/renew", {"token": held["token"]})).status == 200
        assert partition.turns - turns <= 10 * 2  # each renewal, and one look for the parked ones
        for n in range(100):
            await client.post(f"/mailboxes/{mailbox}/messages", {"scopeId": run, "payload": n})
    assert order == [(n, n) for n in range(100)]
