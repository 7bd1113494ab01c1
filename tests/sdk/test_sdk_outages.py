"""Riding through an outage, and stopping when the run is cancelled, in virtual time.

The server is a real kernel in-process (`runstate.testing`). An outage is either the server dying
(`rs.restart_server(down_s=)`: killed without a shutdown, down, then recovered from its data
directory, as `kill -9` and a restart would do) or the network between a worker and it (a
transport that refuses every request for a while, the server carrying on). What the SDK must do
through it:

- a held claim whose renewals fall due during the outage keeps trying until its end by the
  local clock, and lives on when the server answers again;
- a handler that finishes during the outage has its completion sent again until the server takes
  it: the task records that result, nothing is run twice;
- an outage that outlasts the lease loses it: the work is told, the loss goes to on_error and a
  warning, and the server hands the task on;
- a cancelled run stops `consume()` within a second, its handlers are told, and their tasks end
  CANCELLED, with a completion sent anyway refused as SCOPE_CANCELLED.
"""

from __future__ import annotations

import logging
import time

import pytest
import trio

import runstate
from runstate import testing
from runstate.server.settings import Settings
from runstate.transport import TransportError


class Outage:
    """Wraps a transport: between `starts` and `ends` (virtual seconds after `origin`), every
    request fails to reach the server."""

    def __init__(self, inner, starts: float, ends: float) -> None:
        self.inner = inner
        self.starts, self.ends = starts, ends
        self.origin = trio.current_time()
        self.failed: list[tuple[float, str]] = []
        self.base_url = "the in-process test server"

    def down(self) -> bool:
        return self.starts <= trio.current_time() - self.origin < self.ends

    async def send(self, method, path, headers, body, timeout_s):
        if self.down():
            self.failed.append((trio.current_time() - self.origin, path))
            raise TransportError("connection refused")
        return await self.inner.send(method, path, headers, body, timeout_s)


async def _queue(rs, name="research", tasks=1):
    await rs.mailboxes.ensure(name, mode="WORK")
    run = await rs.scopes.create()
    tickets = [await run.mailbox(name).submit({"n": n}, key=f"task-{n}") for n in range(tasks)]
    return run, tickets


@pytest.mark.trio
async def test_a_held_claim_survives_an_outage_in_which_its_renewals_fall_due(autojump_clock, pinned_jitter):
    """A claim with a 15 s lease runs a 20 s function; the worker's network is down from 3 s to 9 s,
    over the renewal due at 5 s. The renewal is tried again until it gets through at 9 s, the
    function is never interrupted, run() returns its result, and nobody else could take the key."""
    async with testing.serve() as rs:
        run = await rs.scopes.create()
        outage = Outage(rs.transport, 3.0, 9.0)
        worker = runstate.AsyncRunstate(api_key="test-key", space_id="default", holder="worker", transport=outage)
        seen = []

        async def write_report(lease):
            for _ in range(20):
                lease.raise_if_lost()
                await trio.sleep(1)
            seen.append((lease.is_lost, lease.generation))
            return "report"

        async def other_holder():
            await trio.sleep(10)
            attempt = await rs.scope(run.id).claim("file:report.md").try_acquire()
            seen.append(attempt["kind"])

        async with trio.open_nursery() as nursery:
            nursery.start_soon(other_holder)
            assert await worker.scope(run.id).claim("file:report.md").run(write_report, lease_seconds=15) == "report"
        assert seen == ["busy", (False, 1)]
        renewals = [at for at, path in outage.failed if path.endswith("/renew")]
        assert renewals and 5 <= renewals[0] < 6 and renewals[-1] < 9  # due at 5 s, tried until it got through
        await worker.aclose()


def _durable(data_dir) -> Settings:
    """A server with a data directory (`serve()` runs its disk's IO on the loop, so the autojump
    clock stands still while it works). fsync off: the process does not really die, so what the
    journal wrote stays for recovery."""
    return Settings(api_key="test-key", space_id="default", seed=1, data_dir=str(data_dir), fsync="off")


@pytest.mark.trio
async def test_a_held_claim_survives_the_server_being_killed_and_restarted(autojump_clock, pinned_jitter, tmp_path):
    """The server itself dies at 1 s (no shutdown) and is back 6 s later, recovered from its data
    directory: the claim's renewal due at 5 s is tried until the restarted server takes it, with
    the same token, and the 20 s of work end with run() returning; nothing was lost."""
    async with testing.serve(settings=_durable(tmp_path)) as rs:
        worker = rs.new_client(holder="worker")
        run = await worker.scopes.create()
        start = trio.current_time()
        done = {}

        async def work(lease):
            for _ in range(20):
                lease.raise_if_lost()
                await trio.sleep(1)
            return lease.generation

        async def hold():
            done["generation"] = await worker.scope(run.id).claim("report").run(work, lease_seconds=15)
            done["at"] = trio.current_time() - start

        async with trio.open_nursery() as nursery:
            nursery.start_soon(hold)
            await trio.sleep(1)
            await rs.restart_server(down_s=6)
            assert 7 <= trio.current_time() - start < 8
        assert done == {"generation": 1, "at": pytest.approx(20, abs=0.5)}
        again = await rs.scope(run.id).claim("report").acquire()
        assert again.generation > 1  # released by run(), on the restarted server (whose fsync-off
        # boot raised the generation floor: a generation is never handed out twice)
        await again.release()


@pytest.mark.trio
async def test_a_completion_made_while_the_server_is_down_is_accepted_by_the_restarted_one(autojump_clock, pinned_jitter, tmp_path):
    """The handler finishes at 4 s while the server is down (killed at 1 s, back at 7 s): its
    completion is sent again until the recovered server takes it, at attempt 1."""
    async with testing.serve(settings=_durable(tmp_path)) as rs:
        run, (ticket,) = await _queue(rs)
        worker = rs.new_client(holder="worker")
        stop, errors = trio.Event(), []

        async def handle(data, delivery):
            await trio.sleep(4)
            stop.set()
            await delivery.complete(result={"payload": f"done on attempt {delivery.attempt}"})

        async def restart():
            await trio.sleep(1)
            await rs.restart_server(down_s=6)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(restart)
            await worker.scope(run.id).mailbox("research").consume(
                handle, lease_seconds=15, stop_event=stop, wait_ms=0, on_error=lambda err, d: errors.append((err, d)),
            )
        assert [err for err, delivery in errors if delivery is not None] == []
        assert await ticket.result(timeout_ms=1_000) == {"state": "SUCCEEDED", "outcome": "done on attempt 1", "reason": None}


@pytest.mark.trio
async def test_a_handler_that_finishes_during_an_outage_has_its_completion_accepted_after(autojump_clock, pinned_jitter):
    """consume() with a 15 s lease; the handler finishes at 4 s, inside an outage from 1 s to 7 s.
    Its completion is sent again (one idempotency key) until the server answers at 7 s: the task
    records that result at the first attempt, on_error hears nothing."""
    async with testing.serve() as rs:
        run, (ticket,) = await _queue(rs)
        outage = Outage(rs.transport, 1.0, 7.0)
        worker = runstate.AsyncRunstate(api_key="test-key", space_id="default", holder="worker", transport=outage)
        stop, errors = trio.Event(), []

        async def handle(data, delivery):
            await trio.sleep(4)
            stop.set()
            return None

        async def handle_and_report(data, delivery):
            await handle(data, delivery)
            await delivery.complete(result={"payload": f"done on attempt {delivery.attempt}"})

        await worker.scope(run.id).mailbox("research").consume(
            handle_and_report, lease_seconds=15, stop_event=stop, wait_ms=0, on_error=lambda err, d: errors.append(err),
        )
        assert errors == []
        assert trio.current_time() - outage.origin == pytest.approx(7, abs=1.2)
        assert await ticket.result(timeout_ms=1_000) == {"state": "SUCCEEDED", "outcome": "done on attempt 1", "reason": None}
        assert any(path.endswith("/complete") for _, path in outage.failed)
        await worker.aclose()


@pytest.mark.trio
async def test_an_outage_longer_than_the_lease_loses_the_delivery_and_says_so(autojump_clock, caplog, pinned_jitter):
    """An outage from 1 s on, with a 10 s lease: the handler (still working) is cancelled at the
    lease's local end, 9 s; on_error gets the LeaseLostError and a warning says nothing was sent;
    once the server's lease has run out another worker gets attempt 2."""
    async with testing.serve() as rs:
        run, (ticket,) = await _queue(rs)
        outage = Outage(rs.transport, 1.0, 1_000.0)
        worker = runstate.AsyncRunstate(api_key="test-key", space_id="default", holder="worker", transport=outage)
        caplog.set_level(logging.WARNING, logger="runstate")
        cancelled_at, errors = [], []

        async def handle(data, delivery):
            try:
                await trio.sleep(3600)
            finally:
                cancelled_at.append(trio.current_time() - outage.origin)

        async def second(data, delivery):
            await delivery.complete(result={"payload": delivery.attempt})

        async with trio.open_nursery() as nursery:
            nursery.start_soon(lambda: worker.scope(run.id).mailbox("research").consume(
                handle, lease_seconds=10, wait_ms=0, give_up_after_s=20, on_error=lambda err, d: errors.append(err),
            ))
            await trio.sleep(11)
            stop = trio.Event()
            nursery.start_soon(lambda: rs.scope(run.id).mailbox("research").consume(second, stop_event=stop))
            assert (await ticket.result(timeout_ms=5_000))["outcome"] == 2
            stop.set()
            nursery.cancel_scope.cancel()
        assert cancelled_at == [pytest.approx(9)]
        lost = [err for err in errors if isinstance(err, runstate.LeaseLostError)]
        assert len(lost) == 1 and lost[0].code == "LEASE_LOST"
        assert any("was lost" in record.getMessage() for record in caplog.records)
        await worker.aclose()


@pytest.mark.trio
@pytest.mark.parametrize("kind", ["coroutine", "plain"])
async def test_a_cancelled_run_stops_consume_within_a_second_and_its_tasks_end_cancelled(autojump_clock, kind):
    """Two 60 s handlers run (every slot busy, so no recv is in flight to hear of a cancel); the run
    is cancelled at 5 s. consume() returns within a second, a coroutine handler is cancelled, a
    plain one sees `delivery.is_lost`; both tasks end CANCELLED (scope_cancelled), not SUCCEEDED,
    and a completion sent anyway is refused with ScopeCancelledError."""
    async with testing.serve() as rs:
        run, tickets = await _queue(rs, tasks=2)
        worker = rs.new_client(holder="worker")
        told, deliveries = [], []
        start = trio.current_time()

        async def coroutine_handler(data, delivery):
            deliveries.append(delivery)
            try:
                await trio.sleep(60)
            finally:
                told.append(trio.current_time() - start)

        def plain_handler(data, delivery):  # a worker thread: it looks at its delivery now and then
            deliveries.append(delivery)
            for _ in range(5_000):  # (real time: virtual time runs on while the thread sleeps)
                if delivery.is_lost:
                    told.append("is_lost")
                    return
                time.sleep(0.002)

        handler = coroutine_handler if kind == "coroutine" else plain_handler

        cancelled = []

        async def cancel_later():
            await trio.sleep(5)
            while len(deliveries) < 2:  # both handlers have started (a thread starts in real time)
                await trio.to_thread.run_sync(time.sleep, 0.01)
            cancelled.append(trio.current_time() - start)
            await run.cancel()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(cancel_later)
            await worker.scope(run.id).mailbox("research").consume(handler, concurrency=2, lease_seconds=30)
            returned_after = trio.current_time() - start
        assert 0 <= returned_after - cancelled[0] <= 1
        if kind == "coroutine":
            assert cancelled == [5] and len(told) == 2 and all(5 <= at <= 6 for at in told)
        for ticket in tickets:
            view = await ticket.status()
            assert view["state"] == "CANCELLED" and view["outcomeReason"] == "scope_cancelled"
        with pytest.raises(runstate.ScopeCancelledError):
            await deliveries[0].complete(result={"payload": "too late"})
        assert all(delivery.is_lost for delivery in deliveries)
        if kind == "plain":
            for _ in range(100):  # the threads run on their own; give them a moment of real time
                if len(told) == 2:
                    break
                await trio.to_thread.run_sync(time.sleep, 0.05)
            assert told == ["is_lost", "is_lost"]
