"""`acquire(wait=True)` asks the server to hold the request (`waitMs`) and still works when it does not.

A server that parks claim requests (ours) answers as soon as the key is free, or `CLAIM_HELD` when
the wait ends; a server without the extension ignores the field and answers `CLAIM_HELD` at once,
and then the SDK tries again every ~0.3 s. Both are tested, with our kernel and with fakes.
"""

from __future__ import annotations

import anyio
import pytest
import trio

import runstate
from runstate import testing
from sdk_fakes import GRANT, RENEWED, error, make_client, ok


class Recording:
    """Passes requests through and keeps the JSON bodies of POST /claims."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.claims: list[bytes] = []

    async def send(self, method, path, headers, body, timeout_s):
        if method == "POST" and path.endswith("/claims"):
            self.claims.append(body)
        return await self.inner.send(method, path, headers, body, timeout_s)


class ParkingClaims:
    """A fake server that parks POST /claims until `free` is set or its `waitMs` ends."""

    def __init__(self) -> None:
        self.free = trio.Event()
        self.waits: list[int | None] = []

    async def __call__(self, sent):
        if sent.suffix == "/claims":
            wait_ms = sent.json.get("waitMs")
            self.waits.append(wait_ms)
            if not self.free.is_set():
                with trio.move_on_after((wait_ms or 0) / 1000):
                    await self.free.wait()
            return ok(GRANT) if self.free.is_set() else error(409, "CLAIM_HELD", "held")
        if sent.suffix.endswith("/renew"):
            return ok(RENEWED)
        return ok({})


@pytest.mark.trio
async def test_a_parked_wait_is_answered_the_instant_the_claim_is_free(autojump_clock):
    """One request, held by the server, returns the lease exactly when the key is released."""
    server = ParkingClaims()
    rs, transport = make_client(server)
    start = trio.current_time()

    async def release_later():
        await trio.sleep(7.25)
        server.free.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(release_later)
        lease = await rs.scope("sc_1").claim("k").acquire(wait=True, timeout_ms=20_000)
    assert trio.current_time() - start == pytest.approx(7.25)
    assert server.waits == [None, 20_000]  # a try without a wait, then one the server holds
    # The request may take its wait plus the usual request timeout.
    assert transport.to("/claims")[1].timeout_s == pytest.approx(10 + 20)
    await lease.release()


@pytest.mark.trio
async def test_a_long_timeout_is_covered_by_several_parked_requests_then_times_out(autojump_clock):
    """timeout_ms=70 s: waits of 30, 30 and 10 s back to back (no pause), then WaitTimeoutError at 70 s."""
    server = ParkingClaims()
    rs, _ = make_client(server)
    start = trio.current_time()
    with pytest.raises(runstate.WaitTimeoutError):
        await rs.scope("sc_1").claim("k").acquire(wait=True, timeout_ms=70_000)
    assert trio.current_time() - start == pytest.approx(70)
    assert server.waits == [None, 30_000, 30_000, 10_000]


@pytest.mark.trio
async def test_without_wait_no_wait_is_sent(autojump_clock):
    """acquire() without wait sends no waitMs: official clients and ours look the same."""
    server = ParkingClaims()
    server.free.set()
    rs, _ = make_client(server)
    lease = await rs.scope("sc_1").claim("k").acquire()
    assert server.waits == [None]
    await lease.release()


@pytest.mark.trio
async def test_against_our_server_the_wait_parks_and_ends_at_the_release(autojump_clock):
    """Our server holds the request in the claim's actor: after a try without a wait, one request,
    answered at the release."""
    async with testing.serve() as rs:
        run = await rs.scopes.create()
        held = await run.claim("k").acquire(lease_seconds=5)
        recording = Recording(rs.transport)
        waiter = runstate.AsyncRunstate(api_key="test-key", space_id="default", transport=recording)
        start = trio.current_time()

        async def release_later():
            await trio.sleep(1.0)
            await held.release()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(release_later)
            lease = await waiter.scope(run.id).claim("k").acquire(wait=True, timeout_ms=10_000)
        assert trio.current_time() - start == pytest.approx(1.0)
        assert lease.generation == held.generation + 1
        assert b'"waitMs"' not in recording.claims[0]
        assert b'"waitMs":10000' in recording.claims[1] and len(recording.claims) == 2
        await lease.release()
        await waiter.aclose()


class ImpatientClaims:
    """A server that ignores waitMs (as servers without the extension do): CLAIM_HELD at once until `free`."""

    def __init__(self) -> None:
        self.free = False
        self.tries: list[float] = []

    async def __call__(self, sent):
        if sent.suffix == "/claims":
            self.tries.append(trio.current_time())
            return ok(GRANT) if self.free else error(409, "CLAIM_HELD", "held")
        if sent.suffix.endswith("/renew"):
            return ok(RENEWED)
        return ok({})


@pytest.mark.trio
async def test_against_a_server_that_ignores_waits_it_falls_back_to_the_jittered_retry(autojump_clock, pinned_jitter):
    """CLAIM_HELD at once despite waitMs: the SDK tries again every 0.3 s until the key is free."""
    server = ImpatientClaims()
    rs, _ = make_client(server)
    start = trio.current_time()

    async def free_later():
        await trio.sleep(1.0)
        server.free = True

    async with trio.open_nursery() as nursery:
        nursery.start_soon(free_later)
        lease = await rs.scope("sc_1").claim("k").acquire(wait=True, timeout_ms=10_000)
    # Tries at 0 (without a wait, then with one), 0.3, 0.6, 0.9 are refused; the one at 1.2 s gets it.
    assert [round(at - start, 6) for at in server.tries] == [0.0, 0.0, 0.3, 0.6, 0.9, 1.2]
    await lease.release()


@pytest.mark.anyio
async def test_a_parked_wait_works_under_asyncio_too():
    """Under asyncio the parked request is answered as soon as the key is free."""
    free = anyio.Event()
    waits = []

    async def server(sent):
        if sent.suffix == "/claims":
            waits.append(sent.json.get("waitMs"))
            if waits[-1] is None:  # the first try, without a wait
                return ok(GRANT) if free.is_set() else error(409, "CLAIM_HELD", "held")
            with anyio.move_on_after(sent.json["waitMs"] / 1000):
                await free.wait()
            return ok(GRANT) if free.is_set() else error(409, "CLAIM_HELD", "held")
        return ok({})

    rs, _ = make_client(server)

    async def release_later():
        await anyio.sleep(0.05)
        free.set()

    with anyio.fail_after(5):
        async with anyio.create_task_group() as group:
            group.start_soon(release_later)
            lease = await rs.scope("sc_1").claim("k").acquire(wait=True, timeout_ms=2_000)
    assert len(waits) == 2 and waits[0] is None and 1_900 < waits[1] <= 2_000
    await lease.release()
