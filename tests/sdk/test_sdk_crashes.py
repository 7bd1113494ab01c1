"""Crashes and interruptions, in virtual time: what a takeover test of your own looks like.

`runstate.testing.crash()` makes a lease, a delivery or a whole worker behave as if its process
died: nothing is released or put back, so the server's lease expiry is what hands the work on.
An interruption (Ctrl-C, a cancelled task) is the opposite: the SDK gives back what it holds at
once, so nothing waits for a lease to run out.
"""

from __future__ import annotations

import pytest
import trio

import runstate
from runstate import testing


async def _queue_with_one_task(rs, name="research"):
    await rs.mailboxes.ensure(name, mode="WORK")
    run = await rs.scopes.create()
    ticket = await run.mailbox(name).submit({"company": "acme"}, key="research:acme")
    return run, ticket


# -- crashes: the examples ----------------------------------------------------------------------


@pytest.mark.trio
async def test_example_a_crashed_claim_holder_is_taken_over_at_lease_expiry(autojump_clock, pinned_jitter):
    """Agent A crashes holding a 5 s claim; agent B, waiting, takes it over within one retry of expiry."""
    async with testing.serve() as rs:
        run = await rs.scopes.create()
        agent_a = rs.new_client(holder="agent-a")
        agent_b = rs.new_client(holder="agent-b")
        lease_a = await agent_a.scope(run.id).claim("company:acme").acquire(lease_seconds=5)
        start = trio.current_time()
        await trio.sleep(1)  # before its first renewal, at 5/3 s
        testing.crash(lease_a)  # A's process dies: no more renewals, no release

        lease_b = await agent_b.scope(run.id).claim("company:acme").acquire(wait=True, timeout_ms=30_000)
        taken_after_s = trio.current_time() - start
        assert lease_b.generation == lease_a.generation + 1
        assert 5 <= taken_after_s <= 5 + 0.375  # lease end, then at most one ~0.3 s retry
        await lease_a.release()  # a crashed holder sends nothing, so B keeps the claim
        assert not lease_b.is_lost
        await lease_b.release()


@pytest.mark.trio
async def test_example_a_delivery_crashed_mid_task_comes_back_with_the_next_attempt(autojump_clock):
    """Worker A dies in the middle of the task; worker B gets attempt 2 once A's 5 s lease has run out."""
    async with testing.serve() as rs:
        run, ticket = await _queue_with_one_task(rs)
        worker_a, worker_b = rs.new_client(holder="worker-a"), rs.new_client(holder="worker-b")
        start = trio.current_time()
        seen = []

        async def handle_a(data, delivery):
            seen.append(("a", delivery.attempt, trio.current_time() - start))
            await trio.sleep(1)
            testing.crash(delivery)  # the handler is cancelled here; nothing is sent for it
            await trio.sleep(3600)

        async def handle_b(data, delivery):
            seen.append(("b", delivery.attempt, trio.current_time() - start))
            await delivery.complete(result={"payload": f"done by b on attempt {delivery.attempt}"})

        async with trio.open_nursery() as nursery:
            nursery.start_soon(lambda: worker_a.scope(run.id).mailbox("research").consume(handle_a, lease_seconds=5))
            await trio.sleep(0.5)
            nursery.start_soon(lambda: worker_b.scope(run.id).mailbox("research").consume(handle_b, lease_seconds=5))
            outcome = await ticket.result(timeout_ms=60_000)
            nursery.cancel_scope.cancel()
        assert outcome["outcome"] == "done by b on attempt 2"
        assert [(who, attempt) for who, attempt, _ in seen] == [("a", 1), ("b", 2)]
        # A took it at 0; its lease (renewed once, at about 1.7 s) ran out; B had it right after.
        assert 5 <= seen[1][2] <= 8


@pytest.mark.trio
async def test_example_a_worker_killed_mid_task(autojump_clock):
    """crash(client) kills a worker: its consume() returns, it sends nothing more, B takes over at expiry."""
    async with testing.serve() as rs:
        run, ticket = await _queue_with_one_task(rs)
        worker_a, worker_b = rs.new_client(holder="worker-a"), rs.new_client(holder="worker-b")
        started = trio.Event()

        async def slow(data, delivery):
            started.set()
            await trio.sleep(3600)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(lambda: worker_a.scope(run.id).mailbox("research").consume(slow, lease_seconds=5))
            await started.wait()
            killed_at = trio.current_time()
            testing.crash(worker_a)
        # consume() returned (the nursery closed) at once, leaving the delivery leased.
        assert trio.current_time() == killed_at
        with pytest.raises(testing.CrashedError):
            await worker_a.scope(run.id).status()
        view = await ticket.status()
        assert (view["state"], view["attempt"]) == ("RUNNING", 1)

        async def finish(data, delivery):
            await delivery.complete(result={"payload": delivery.attempt})

        with trio.move_on_after(30):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(lambda: worker_b.scope(run.id).mailbox("research").consume(finish, lease_seconds=5))
                outcome = await ticket.result(timeout_ms=30_000)
                nursery.cancel_scope.cancel()
        assert outcome == {"state": "SUCCEEDED", "outcome": 2, "reason": None}
        assert trio.current_time() - killed_at <= 6


def test_crash_refuses_anything_else():
    """crash() takes a lease, a delivery or a client, and says so."""
    with pytest.raises(TypeError, match="ClaimLease, a Delivery or a client"):
        testing.crash("lease")


# -- interruptions give back at once ------------------------------------------------------------


@pytest.mark.trio
async def test_a_cancelled_consume_puts_its_deliveries_back_at_once(autojump_clock):
    """consume() cancelled from outside (a timeout, Ctrl-C under asyncio) nacks what it holds: attempt 2 comes at once."""
    async with testing.serve() as rs:
        run, ticket = await _queue_with_one_task(rs)
        started = trio.Event()

        async def slow(data, delivery):
            started.set()
            await trio.sleep(3600)

        with trio.move_on_after(2):
            await run.mailbox("research").consume(slow, lease_seconds=60)
        assert started.is_set()
        stopped_at = trio.current_time()
        delivery = await run.mailbox("research").receive(wait_ms=5_000)
        assert delivery is not None and delivery.attempt == 2
        # Back after the mailbox's retry backoff (1 s), not after the 60 s lease.
        assert trio.current_time() - stopped_at <= 1.5
        await delivery.complete()


@pytest.mark.trio
async def test_keyboard_interrupt_in_consume_gives_back_every_delivery(autojump_clock):
    """A KeyboardInterrupt in one handler ends consume() with it, and both running deliveries go back at once."""
    async with testing.serve() as rs:
        await rs.mailboxes.ensure("research", mode="WORK")
        run = await rs.scopes.create()
        for n in range(2):
            await run.mailbox("research").send({"n": n})
        running = []

        async def handle(data, delivery):
            running.append(data["n"])
            await trio.sleep(1 if data["n"] == 0 else 3600)
            raise KeyboardInterrupt

        with pytest.raises(KeyboardInterrupt):
            await run.mailbox("research").consume(handle, concurrency=2, lease_seconds=60)
        assert sorted(running) == [0, 1]
        rows = await rs.mailboxes.list()
        counts = rows[0]["counts"]
        assert counts["leased"] == 0 and counts["queued"] + counts["delayed"] == 2


@pytest.mark.trio
async def test_a_cancelled_claim_run_releases_the_claim_at_once(autojump_clock):
    """claim(...).run(fn) cancelled from outside releases on the way out: another agent gets it at once."""
    async with testing.serve() as rs:
        run = await rs.scopes.create()

        async def work(lease):
            await trio.sleep(3600)

        with trio.move_on_after(2):
            await run.claim("k").run(work, lease_seconds=60)
        other = await rs.new_client().scope(run.id).claim("k").acquire()
        assert other.generation == 2
        await other.release()


@pytest.mark.trio
async def test_another_client_of_the_in_process_server_may_send_through_a_transport_of_its_own(autojump_clock):
    """`new_client(transport=...)` puts a transport of the test's own in front of the in-process
    server (one that counts, or fails, some calls) for that client alone."""
    sent: list[str] = []

    class Counting:
        def __init__(self, inner):  # type: ignore[no-untyped-def]
            self.inner = inner

        async def send(self, method, path, headers, body, timeout_s):  # type: ignore[no-untyped-def]
            sent.append(f"{method} {path.split('?')[0]}")
            return await self.inner.send(method, path, headers, body, timeout_s)

    async with testing.serve() as rs:
        run = await rs.scopes.create()
        counted = rs.new_client(holder="counted", transport=Counting(rs.transport))
        lease = await counted.scope(run.id).claim("k").acquire(lease_seconds=30)
        await lease.release()
        await rs.scope(run.id).claim("k").acquire(lease_seconds=30)
        assert [line for line in sent if "/claims" in line] == [
            "POST /v1/spaces/default/claims", "POST /v1/spaces/default/claims/k/release",
        ], sent
