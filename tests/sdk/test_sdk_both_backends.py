"""The central paths, each run twice: under asyncio (tiny real times) and under trio (virtual time).

The waits here are kept to tens of milliseconds so the asyncio runs stay fast; the exact instants
are asserted in the trio-only tests of the other modules.
"""

from __future__ import annotations

import threading

import anyio
import pytest
import trio.testing

import runstate
from runstate import _renewal, _runtime
from runstate.transport import TransportError
from sdk_fakes import GRANT, QueueServer, claim_server, error, make_client, ok, settlements, task_server


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request):
    if request.param == "trio":
        return "trio", {"clock": trio.testing.MockClock(autojump_threshold=0)}
    return "asyncio"


@pytest.fixture
def fast_renewal(monkeypatch):
    """Renew every 10 ms, so a failing renewal shows up at once."""
    monkeypatch.setattr(_renewal, "interval_s", lambda lease_seconds, rng=None: 0.01)


def native_event_type():
    return type(_runtime.new_native_event())


@pytest.mark.anyio
async def test_transport_retries_reuse_one_idempotency_key():
    """Every retry of one call carries the same key; the next call gets a new one."""

    def refuse(sent):
        raise TransportError("down")

    rs, transport = make_client(refuse)
    for _ in range(2):
        with pytest.raises(runstate.UnavailableError):
            await rs.scopes.create()
    keys = [s.headers["idempotency-key"] for s in transport.sent]
    assert len(keys) == 6 and len(set(keys[:3])) == 1 and len(set(keys[3:])) == 1 and keys[0] != keys[3]


@pytest.mark.anyio
async def test_claim_wait_times_out():
    """A key that stays held raises WaitTimeoutError once timeout_ms has passed."""
    rs, transport = make_client(claim_server(held_for=10_000))
    with anyio.fail_after(5):
        with pytest.raises(runstate.WaitTimeoutError):
            await rs.scope("sc_1").claim("k").acquire(wait=True, timeout_ms=100)
    assert len(transport.to("/claims")) >= 2


@pytest.mark.anyio
async def test_failed_renewal_sets_the_native_lost_event(fast_renewal):
    """A stale renewal fails closed and sets lost_event, an event of the running library."""
    rs, _ = make_client(claim_server(renew=lambda sent: error(409, "STALE_CLAIM")))
    lease = await rs.scope("sc_1").claim("k").acquire(lease_seconds=5)
    assert type(lease.lost_event) is native_event_type()
    with anyio.fail_after(5):
        await lease.lost_event.wait()
    with pytest.raises(runstate.LeaseLostError):
        lease.raise_if_lost()
    await lease.release()


@pytest.mark.anyio
async def test_run_cancels_a_coroutine_on_loss(fast_renewal):
    """run() cancels its coroutine when the lease is lost, raises LeaseLostError and releases."""
    rs, transport = make_client(claim_server(renew=lambda sent: error(409, "STALE_CLAIM")))
    reached_end = []

    async def work(lease):
        await anyio.sleep(60)
        reached_end.append(True)

    with anyio.fail_after(5):
        with pytest.raises(runstate.LeaseLostError):
            await rs.scope("sc_1").claim("k").run(work, lease_seconds=5)
    assert reached_end == [] and transport.sent[-1].suffix == "/claims/k/release"


@pytest.mark.anyio
async def test_run_abandons_a_thread_on_loss(fast_renewal):
    """run() stops waiting for a plain function's thread when the lease is lost."""
    started = threading.Event()
    go_on = threading.Event()

    async def stale_once_started(sent):
        await anyio.to_thread.run_sync(started.wait, 5)
        return error(409, "STALE_CLAIM")

    rs, _ = make_client(claim_server(renew=stale_once_started))

    def work(lease):
        started.set()
        go_on.wait(5)

    # No fail_after here: under autojump a virtual deadline would pass while the thread starts.
    # The thread's own waits bound the test instead.
    with pytest.raises(runstate.LeaseLostError):
        await rs.scope("sc_1").claim("k").run(work, lease_seconds=5)
    go_on.set()


@pytest.mark.anyio
async def test_consume_completes_and_requeues_failures():
    """consume() completes a handler that returns and, for one that raises, calls on_error then nacks with retry."""
    rs, transport = make_client(QueueServer([(1, "good"), (2, "bad")]))
    stop = anyio.Event()
    errors = []

    async def handle(data, delivery):
        if data == "bad":
            stop.set()
            raise RuntimeError("failed")

    with anyio.fail_after(5):
        await rs.scope("sc_1").mailbox("research").consume(
            handle, stop_event=stop, on_error=lambda err, d: errors.append((str(err), d.id)), wait_ms=50
        )
    assert errors == [("failed", "msg_2")]
    assert settlements(transport) == [
        ("/messages/msg_1/complete", {"token": "t1"}),
        ("/messages/msg_2/nack", {"token": "t2", "retry": True}),
    ]


@pytest.mark.anyio
async def test_consume_stop_drains_and_requeues():
    """On stop, an unfinished handler is nacked after shutdown_timeout and then cancelled."""
    rs, transport = make_client(QueueServer([(1, "slow")]))
    stop = anyio.Event()
    cancelled = []

    async def handle(data, delivery):
        stop.set()
        try:
            await anyio.sleep(60)
        except anyio.get_cancelled_exc_class():
            cancelled.append(delivery.id)
            raise

    with anyio.fail_after(5):
        await rs.scope("sc_1").mailbox("research").consume(handle, stop_event=stop, shutdown_timeout=0.05, poll_ms=10, wait_ms=50)
    assert cancelled == ["msg_1"]
    assert settlements(transport) == [("/messages/msg_1/nack", {"token": "t1", "retry": True})]


@pytest.mark.anyio
async def test_consume_stops_cleanly_on_scope_cancelled_and_raises_auth_errors():
    """SCOPE_CANCELLED ends consume quietly; UNAUTHENTICATED is raised from it."""
    quiet, _ = make_client(QueueServer([], recv_error=lambda n: error(409, "SCOPE_CANCELLED")))
    loud, _ = make_client(QueueServer([], recv_error=lambda n: error(401, "UNAUTHENTICATED")))
    with anyio.fail_after(5):
        await quiet.scope("sc_1").mailbox("research").consume(lambda d, x: None)
        with pytest.raises(runstate.AuthenticationError):
            await loud.scope("sc_1").mailbox("research").consume(lambda d, x: None)


@pytest.mark.anyio
async def test_delivery_settles_once():
    """A second settlement of a delivery sends nothing."""
    rs, transport = make_client(QueueServer([(1, "x")]))
    delivery = await rs.scope("sc_1").mailbox("research").receive()
    await delivery.reject()
    await delivery.complete()
    assert settlements(transport) == [("/messages/msg_1/nack", {"token": "t1", "retry": False})]


@pytest.mark.anyio
async def test_task_result_polls_and_times_out():
    """result() returns the terminal outcome after polling, and raises WaitTimeoutError when the task stays running."""
    rs, _ = make_client(task_server(["QUEUED", "RUNNING", "SUCCEEDED"]))
    with anyio.fail_after(5):
        assert await rs.scope("sc_1").task("tk_1").result(poll_ms=10) == {"state": "SUCCEEDED", "outcome": "report", "reason": None}
    slow, _ = make_client(task_server(["RUNNING"] * 1000))
    with anyio.fail_after(5):
        with pytest.raises(runstate.WaitTimeoutError):
            await slow.scope("sc_1").task("tk_1").result(timeout_ms=50, poll_ms=10)


@pytest.mark.anyio
async def test_closing_the_client_stops_renewal_tasks():
    """aclose() leaves no renewal running: no renew request goes out afterwards."""
    rs, transport = make_client(lambda sent: ok(GRANT) if sent.suffix == "/claims" else ok({}))
    lease = await rs.scope("sc_1").claim("k").acquire(lease_seconds=5)
    await rs.aclose()
    await anyio.sleep(0.05)
    assert transport.to("/claims/k/renew") == [] and lease.is_lost
