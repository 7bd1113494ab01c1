"""Shared tasks, consume and takeover through our SDK against the real kernel, in-process
(`runstate.testing`), in virtual time: leases, renewals, backoffs and long polls at exact instants.
"""

from __future__ import annotations

import pytest
import trio

import runstate
from runstate import _runtime, testing
from runstate.transport import TransportError

pytestmark = pytest.mark.trio


@pytest.fixture
def pinned_jitter(monkeypatch):
    """The SDK's random draws (renewal intervals, retry pauses) return the middle of their range."""
    monkeypatch.setattr(_runtime, "uniform", lambda low, high, rng=None: (low + high) / 2)


class FrozenRenewals:
    """Wraps a transport; once `frozen`, nothing this worker sends gets through (a paused process)."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.frozen = False

    async def send(self, method, path, headers, body, timeout_s):
        if self.frozen:
            raise TransportError("network unreachable")
        return await self.inner.send(method, path, headers, body, timeout_s)


async def test_planners_share_one_task_and_read_its_single_result(autojump_clock, pinned_jitter):
    """Three planners submit one key; one worker does the 2 s of work once; all read its result."""
    async with testing.serve() as rs:
        await rs.mailboxes.ensure("research", mode="WORK")
        run = await rs.scopes.create()
        calls = []

        async def handle(data, delivery):
            calls.append((data, delivery.attempt))
            await trio.sleep(2)
            await delivery.complete(result={"payload": {"report": data["company"].upper()}})

        stop = trio.Event()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(lambda: run.mailbox("research").consume(handle, concurrency=4, stop_event=stop))
            tickets = [
                await rs.new_client(holder=f"planner-{n}").scope(run.id).mailbox("research").submit(
                    {"company": "acme"}, key="research:acme", subscriber_id=f"planner-{n}"
                )
                for n in range(3)
            ]
            outcomes = [await ticket.result(timeout_ms=60_000) for ticket in tickets]
            stop.set()
        assert {ticket.id for ticket in tickets} == {tickets[0].id}
        assert calls == [({"company": "acme"}, 1)]
        assert outcomes == [{"state": "SUCCEEDED", "outcome": {"report": "ACME"}, "reason": None}] * 3
        view = await tickets[0].status()
        assert view["subscribers"] == ["planner-0", "planner-1", "planner-2"] and view["attempt"] == 1


async def test_a_frozen_worker_is_taken_over_at_lease_end_and_its_late_result_is_refused(autojump_clock, pinned_jitter):
    """Worker A (5 s lease) freezes at once: its handler is told (cancelled) when the lease runs out
    by A's own clock, less its 0.5 s margin, so it sends nothing; B, long-polling, gets attempt 2
    exactly when A's lease runs out on the server; a completion A sends anyway with its old token
    is STALE_CLAIM; B's result is the one kept."""
    async with testing.serve() as rs:
        await rs.mailboxes.ensure("research")
        run = await rs.scopes.create()
        ticket = await run.mailbox("research").submit({"company": "acme"}, key="k")
        transport_a = FrozenRenewals(rs.transport)
        worker_a = runstate.AsyncRunstate(api_key="test-key", space_id="default", holder="a", transport=transport_a)
        took_over_at = {}
        told = {}
        start = trio.current_time()
        late = {}

        async def handle_a(data, delivery):
            transport_a.frozen = True  # from here on, no renewal gets through: the lease runs out
            told["delivery"] = delivery
            try:
                await trio.sleep_forever()
            finally:
                told["at"] = trio.current_time() - start

        async def handle_b(data, delivery):
            took_over_at["t"] = trio.current_time() - start
            took_over_at["attempt"] = delivery.attempt
            await delivery.complete(result={"payload": "from b"})

        stop = trio.Event()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(lambda: worker_a.scope(run.id).mailbox("research").consume(handle_a, lease_seconds=5, stop_event=stop))
            await trio.testing.wait_all_tasks_blocked()
            nursery.start_soon(lambda: run.mailbox("research").consume(handle_b, lease_seconds=5, stop_event=stop))
            outcome = await ticket.result(timeout_ms=60_000)
            transport_a.frozen = False  # A wakes up and completes, too late
            try:
                await told["delivery"].complete(result={"payload": "from a"})
            except runstate.LeaseLostError as error:
                late["code"] = error.code
            stop.set()
        assert told["at"] == pytest.approx(4.5, abs=1e-6) and told["delivery"].is_lost
        assert late == {"code": "STALE_CLAIM"}
        assert took_over_at["attempt"] == 2
        # Leased at 0, never renewed (the first renewal, at 5/3 s, was already frozen out): ends at 5 s.
        assert took_over_at["t"] == pytest.approx(5.0, abs=1e-6)
        assert outcome == {"state": "SUCCEEDED", "outcome": "from b", "reason": None}
        assert (await ticket.status())["attempt"] == 2


async def test_stopping_consume_drains_then_requeues_what_is_unfinished(autojump_clock, pinned_jitter):
    """On stop, a handler still running after shutdown_timeout is put back (retry): the task is
    QUEUED again and a later worker receives it with attempt 2 after the 1 s backoff."""
    async with testing.serve() as rs:
        await rs.mailboxes.ensure("research")
        run = await rs.scopes.create()
        ticket = await run.mailbox("research").submit({"n": 1}, key="slow")
        started = trio.Event()

        async def slow(data, delivery):
            started.set()
            await trio.sleep(3600)

        stop = trio.Event()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(lambda: run.mailbox("research").consume(slow, stop_event=stop, shutdown_timeout=1.0))
            await started.wait()
            stop.set()
        assert (await ticket.status())["state"] == "QUEUED"
        delivery = await run.mailbox("research").receive(wait_ms=5_000)
        assert delivery is not None and delivery.attempt == 2
        await delivery.complete(result={"payload": "done"})
        assert (await ticket.result())["outcome"] == "done"


async def test_cancelling_the_run_stops_an_idle_consume_at_that_instant(autojump_clock, pinned_jitter):
    """A consume parked in its long poll returns at the very instant the run is cancelled, and the
    run's queued tasks (here on another mailbox) end CANCELLED with reason scope_cancelled."""
    async with testing.serve() as rs:
        await rs.mailboxes.ensure("research")
        await rs.mailboxes.ensure("later")
        run = await rs.scopes.create()
        queued = await run.mailbox("later").submit({"n": 1}, key="waiting")
        stopped_at = {}

        async def never(data, delivery):  # pragma: no cover - nothing is delivered
            raise AssertionError("delivered in a cancelled run")

        async def worker():
            await run.mailbox("research").consume(never)
            stopped_at["t"] = trio.current_time()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(worker)
            await trio.sleep(3)
            cancelled_at = trio.current_time()
            await run.cancel()
        assert stopped_at["t"] == pytest.approx(cancelled_at, abs=1e-6)
        assert await queued.result() == {"state": "CANCELLED", "outcome": None, "reason": "scope_cancelled"}


async def test_a_handler_that_keeps_raising_fails_the_task_after_the_attempt_limit(autojump_clock, pinned_jitter):
    async with testing.serve() as rs:
        await rs.mailboxes.ensure("research")
        run = await rs.scopes.create()
        ticket = await run.mailbox("research").submit({"n": 1}, key="flaky")
        seen = []

        async def flaky(data, delivery):
            seen.append((delivery.attempt, trio.current_time()))
            raise RuntimeError("upstream 500")

        stop = trio.Event()
        errors = []
        async with trio.open_nursery() as nursery:
            nursery.start_soon(
                lambda: run.mailbox("research").consume(flaky, stop_event=stop, on_error=lambda err, d: errors.append(d.attempt))
            )
            outcome = await ticket.result(timeout_ms=120_000)
            stop.set()
        assert [attempt for attempt, _ in seen] == [1, 2, 3, 4, 5] and errors == [1, 2, 3, 4, 5]
        gaps = [later - earlier for (_, earlier), (_, later) in zip(seen, seen[1:])]
        for gap, nominal in zip(gaps, (1, 2, 4, 8)):  # the server's backoff, 0.8-1.0 x nominal
            assert 0.8 * nominal <= gap <= nominal + 0.001
        assert outcome["state"] == "FAILED" and outcome["reason"].startswith("attempts_exhausted: 5 of 5")
