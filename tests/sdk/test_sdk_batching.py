"""Fewer requests per unit of work, against a real kernel in process, in virtual time.

One client renews every lease it holds together (claims, pool grants, deliveries), one request
per interval, answered per lease; calls made at the same time by one client (its views
included) go out as one batch request, each with its own answer and error, in order per key,
while a lone call goes out as it always did; `consume(prefetch=N)` takes up to N deliveries in
one request and keeps their leases while they wait for a free slot.
"""

from __future__ import annotations

from typing import Any, Mapping

import pytest
import trio

import runstate
import runstate.testing
from runstate import AsyncRunstate, _runtime
from runstate.transport import Exchange

pytestmark = pytest.mark.trio


class Counting:
    """A transport that passes everything on and keeps (virtual time, method, path) of each
    request; a request whose path ends with a key of `slow` takes that long on the wire."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.base_url = inner.base_url
        self.sent: list[tuple[float, str, str]] = []
        self.slow: dict[str, float] = {}

    async def send(self, method: str, path: str, headers: Mapping[str, str], body: bytes | None, timeout_s: float) -> Exchange:
        self.sent.append((trio.current_time(), method, path.partition("?")[0]))
        for ending, seconds in self.slow.items():
            if path.endswith(ending):
                await trio.sleep(seconds)
        exchange: Exchange = await self.inner.send(method, path, headers, body, timeout_s)
        return exchange

    def paths(self, ending: str) -> list[tuple[float, str, str]]:
        return [sent for sent in self.sent if sent[2].endswith(ending)]


def counted(rs: Any, holder: str = "swarm") -> tuple[AsyncRunstate, Counting]:
    transport = Counting(rs.transport)
    return AsyncRunstate(api_key="test-key", space_id=rs.space_id, transport=transport, holder=holder), transport


@pytest.fixture
def pinned(monkeypatch):
    monkeypatch.setattr(_runtime, "uniform", lambda low, high, rng=None: (low + high) / 2)


# -- renewals ---------------------------------------------------------------------------------------


async def test_every_lease_of_a_client_is_renewed_in_one_request_per_interval(autojump_clock, pinned):
    """Six claims and a pool grant taken over two seconds, on three views of one client: after
    the first interval one batch renews all seven, and from then on one request an interval."""
    async with runstate.testing.serve() as rs:
        run = await rs.scopes.create()
        await rs.pools.ensure("gpu", capacity=4)
        client, transport = counted(rs)
        agents = [client.with_holder(f"agent-{n}") for n in range(3)]
        leases = []
        for n in range(6):
            leases.append(await agents[n % 3].scope(run.id).claim(f"k{n}").acquire(lease_seconds=30))
            await trio.sleep(0.4)
        grant = await agents[0].scope(run.id).pool("gpu").acquire(lease_seconds=30)
        started = trio.current_time()
        await trio.sleep(65)
        batches = transport.paths("/batch")
        assert not transport.paths("/renew")  # never one lease alone
        assert len(batches) == 6  # about one every 10 s
        kept = [*leases, grant]
        assert not any(lease.is_lost for lease in kept)
        assert all(lease.lost_at > started + 60 for lease in kept)
        assert client._ctx.holdings.renewals.renewed == len(kept) * 6
        for lease in kept:
            await lease.release()
        assert len(client._ctx.holdings.renewals) == 0
        await client.aclose()


async def test_one_refused_lease_in_a_renewal_batch_is_lost_alone(autojump_clock, pinned):
    """The server ends one lease behind the client's back (its run cancelled): that renewal is
    refused in the batch, that lease alone is lost, the others are renewed."""
    async with runstate.testing.serve() as rs:
        doomed, kept_run = await rs.scopes.create(), await rs.scopes.create()
        client, transport = counted(rs)
        lost = await client.scope(doomed.id).claim("a").acquire(lease_seconds=30)
        alive = [await client.scope(kept_run.id).claim(f"b{n}").acquire(lease_seconds=30) for n in range(3)]
        await rs.scope(doomed.id).cancel()
        await lost.lost_event.wait()
        assert trio.current_time() == pytest.approx(10, abs=0.01)
        assert isinstance(lost.lost_error, runstate.LeaseLostError)  # its run's claims ended with it
        assert len(transport.paths("/batch")) == 1 and not any(lease.is_lost for lease in alive)
        await trio.sleep(30)
        assert not any(lease.is_lost for lease in alive)
        await client.aclose()


class WithoutBatches(Counting):
    """A server from before the batch route: `/batch` is an unknown route there."""

    async def send(self, method: str, path: str, headers: Mapping[str, str], body: bytes | None, timeout_s: float) -> Exchange:
        if path.partition("?")[0].endswith("/batch"):
            self.sent.append((trio.current_time(), method, path.partition("?")[0]))
            envelope = b'{"error": {"code": "NOT_FOUND", "message": "no such route: POST /v1/spaces/x/batch", "requestId": "req_1"}}'
            return 404, {"content-type": "application/json"}, envelope
        return await super().send(method, path, headers, body, timeout_s)


async def test_against_a_server_without_batches_the_leases_are_renewed_one_by_one(autojump_clock, pinned):
    """The first renewal batch meets a server without the route: the same leases are renewed at
    once, one request each, none is lost, and from then on each lease is renewed alone."""
    async with runstate.testing.serve() as rs:
        run = await rs.scopes.create()
        transport = WithoutBatches(rs.transport)
        client = AsyncRunstate(api_key="test-key", space_id=rs.space_id, transport=transport, holder="old")
        leases = [await client.scope(run.id).claim(f"k{n}").acquire(lease_seconds=30) for n in range(3)]
        await trio.sleep(11)
        assert len(transport.paths("/batch")) == 1 and len(transport.paths("/renew")) == 3
        await trio.sleep(50)
        assert len(transport.paths("/batch")) == 1 and len(transport.paths("/renew")) >= 15
        assert not any(lease.is_lost for lease in leases)
        await client.aclose()


async def test_renewals_ride_through_an_outage_together_and_lose_only_at_their_own_end(autojump_clock, pinned):
    """The server is down from 9 s to 20 s: the batch is tried again with backoff and gets through
    after it; a lease taken with 12 s (lost at 10.8 s by the local clock) is lost at that instant."""
    async with runstate.testing.serve() as rs:
        run = await rs.scopes.create()
        client, _ = counted(rs)
        long = [await client.scope(run.id).claim(f"k{n}").acquire(lease_seconds=30) for n in range(2)]
        short = await client.scope(run.id).claim("short").acquire(lease_seconds=12)
        await trio.sleep(3.9)  # `short` renews every 4 s: its renewals gather the others
        rs.transport.down = True
        await short.lost_event.wait()
        lost_at = trio.current_time()
        assert lost_at == pytest.approx(short.lost_at) and short.lost_error.code == "LEASE_LOST"
        await trio.sleep(20 - lost_at)
        rs.transport.down = False
        await trio.sleep(2)
        assert not any(lease.is_lost for lease in long)
        assert all(lease.lost_at > trio.current_time() + 20 for lease in long)
        await client.aclose()


# -- coalesced calls --------------------------------------------------------------------------------


async def test_calls_made_at_the_same_time_go_out_in_one_batch_with_their_own_answers(autojump_clock):
    """Twenty views submit at once: the first call goes out alone, the other nineteen in one
    batch; the one whose task key exists with another input gets its own conflict, alone."""
    async with runstate.testing.serve() as rs:
        run = await rs.scopes.create()
        await rs.mailboxes.ensure("jobs")
        await rs.scope(run.id).mailbox("jobs").submit({"n": "first"}, key="t7")
        client, transport = counted(rs)
        views = [client.with_holder(f"agent-{n}") for n in range(20)]
        mailboxes = [view.scope(run.id).mailbox("jobs") for view in views]
        await mailboxes[0].resolve_id()
        for mailbox in mailboxes[1:]:
            mailbox._id = mailboxes[0]._id
        transport.sent.clear()
        outcomes: dict[int, Any] = {}

        async def submit(n: int) -> None:
            try:
                outcomes[n] = await mailboxes[n].submit({"n": n}, key=f"t{n}")
            except runstate.ConflictError as error:
                outcomes[n] = error

        async with trio.open_nursery() as nursery:
            for n in range(20):
                nursery.start_soon(submit, n)
        assert len(transport.sent) == 2 and transport.sent[1][2].endswith("/batch")
        assert isinstance(outcomes[7], runstate.ConflictError)
        assert all(isinstance(outcomes[n], runstate.TaskTicket) for n in range(20) if n != 7)
        assert client._ctx.requester.coalescer.batched_calls == 19
        await client.aclose()


async def test_a_batch_keeps_the_order_of_calls_on_one_key(autojump_clock):
    """A release and an acquire of the same key, made in that order while a request is on its
    way, go out in one batch and run in that order: the acquire gets the key."""
    async with runstate.testing.serve() as rs:
        run = await rs.scopes.create()
        client, transport = counted(rs)
        first, second = client.with_holder("first"), client.with_holder("second")
        lease = await first.scope(run.id).claim("k").acquire()
        slow = await first.scope(run.id).claim("other").acquire()
        transport.slow["/other/release"] = 1.0
        got: list[Any] = []

        async def take() -> None:
            got.append(await second.scope(run.id).claim("k").try_acquire())

        transport.sent.clear()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(slow.release)  # goes out alone: the next calls wait for it
            await trio.sleep(0.1)
            nursery.start_soon(lease.release)
            await trio.sleep(0.1)
            nursery.start_soon(take)
        assert [sent[2].rsplit("/", 1)[1] for sent in transport.sent] == ["release", "batch"]
        assert got[0]["kind"] == "acquired" and got[0]["lease"].generation == 2
        await got[0]["lease"].release()
        await client.aclose()


async def test_a_lone_call_goes_out_as_it_always_did(autojump_clock):
    """Nothing on its way: each call is its own request, on its own route (no batch)."""
    async with runstate.testing.serve() as rs:
        run = await rs.scopes.create()
        client, transport = counted(rs)
        lease = await client.scope(run.id).claim("k").acquire()
        await lease.renew()
        await lease.release()
        assert [sent[2].rsplit("/", 1)[-1] for sent in transport.sent] == ["claims", "renew", "release"]
        await client.aclose()


async def test_a_call_cancelled_while_it_waits_is_never_sent(autojump_clock):
    """A call queued behind a request on its way, then cancelled, is taken out of the queue."""
    async with runstate.testing.serve() as rs:
        run = await rs.scopes.create()
        client, transport = counted(rs)
        leases = [await client.scope(run.id).claim(f"k{n}").acquire() for n in range(2)]
        transport.slow["/k0/release"] = 1.0
        transport.sent.clear()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(leases[0].release)
            await trio.sleep(0.1)
            with trio.move_on_after(0.5):
                await leases[1].release()
        await trio.sleep(1)
        assert [sent[2] for sent in transport.sent] == [f"/v1/spaces/default/claims/k0/release"]
        held = (await rs._ctx.call("GET", f"/scopes/{run.id}/claims")).body["claims"]
        assert [c["key"] for c in held] == ["k1"]
        await client.aclose()


async def test_with_holder_views_hold_their_own_claims_and_close_with_their_client(autojump_clock):
    """Two views of one client are two holders: the second cannot take the first's key; closing
    a view does nothing, closing the client stops every view's renewals."""
    async with runstate.testing.serve() as rs:
        run = await rs.scopes.create()
        client, _ = counted(rs)
        a, b = client.with_holder("a"), client.with_holder("b")
        assert (a.holder, b.holder) == ("a", "b") and a.session != b.session
        lease = await a.scope(run.id).claim("k").acquire()
        assert (await b.scope(run.id).claim("k").try_acquire())["kind"] == "busy"
        await a.aclose()
        assert not lease.is_lost
        await client.aclose()
        assert lease.is_lost and len(client._ctx.holdings.renewals) == 0
        with pytest.raises(runstate.ValidationError):
            client.with_holder("")


# -- prefetch ----------------------------------------------------------------------------------------


async def test_prefetch_takes_many_deliveries_in_one_request_and_keeps_their_leases(autojump_clock, pinned):
    """consume(prefetch=3, concurrency=1) over six tasks: two recv-many requests, each task done
    once, in order; the deliveries waiting for the slot (12 s of work each, 10 s leases) are
    renewed meanwhile and none is handed to another worker."""
    async with runstate.testing.serve() as rs:
        run = await rs.scopes.create()
        await rs.mailboxes.ensure("jobs")
        client, transport = counted(rs)
        mailbox = client.scope(run.id).mailbox("jobs")
        tickets = [await mailbox.submit({"n": n}, key=f"t{n}") for n in range(6)]
        done: list[tuple[int, int]] = []
        stop = trio.Event()
        left_at_start: list[float] = []

        async def handler(data: Any, delivery: runstate.Delivery) -> dict:
            # The lease's end as last said (by the recv-many, then by each renewal): never past.
            assert delivery.expires_at is not None
            left_at_start.append(delivery.expires_at.timestamp() - trio.current_time())  # (+ the clocks' offset)
            await trio.sleep(12)
            done.append((data["n"], delivery.attempt))
            if len(done) == 6:
                stop.set()
            return {"payload": data["n"]}

        await mailbox.consume(handler, prefetch=3, lease_seconds=10, stop_event=stop)
        assert done == [(n, 1) for n in range(6)]
        # The first was taken at the start (10 s left); those that waited for the slot were renewed
        # meanwhile, and what each says it has left when its turn comes is still within 10 s.
        first = left_at_start[0]
        assert all(first - 10 < left <= first + 0.01 for left in left_at_start), left_at_start
        # 3 taken at first, 2 while the third ran, 1 (of 2 asked) while the fifth ran, and at the
        # end a look without a wait and the long poll stopped: five requests for six tasks.
        assert len(transport.paths("/recv-many")) == 5 and not transport.paths("/recv")
        assert [(await ticket.status())["state"] for ticket in tickets] == ["SUCCEEDED"] * 6
        await client.aclose()


async def test_stopping_gives_back_the_deliveries_taken_ahead(autojump_clock, pinned):
    """Stopped while two deliveries wait for the slot: they go back at once (not at their lease's
    end), and another worker takes them."""
    async with runstate.testing.serve() as rs:
        run = await rs.scopes.create()
        await rs.mailboxes.ensure("jobs")
        mailbox = rs.scope(run.id).mailbox("jobs")
        for n in range(3):
            await mailbox.submit({"n": n}, key=f"t{n}")
        stop = trio.Event()
        seen: list[int] = []

        async def first(data: Any, delivery: runstate.Delivery) -> None:
            seen.append(data["n"])
            stop.set()

        await mailbox.consume(first, prefetch=3, stop_event=stop)
        assert seen == [0]
        other = rs.new_client(holder="other").scope(run.id).mailbox("jobs")
        again: list[tuple[int, int]] = []
        stop_other = trio.Event()

        async def second(data: Any, delivery: runstate.Delivery) -> None:
            again.append((data["n"], delivery.attempt))
            if len(again) == 2:
                stop_other.set()

        started = trio.current_time()
        await other.consume(second, stop_event=stop_other)
        assert sorted(again) == [(1, 2), (2, 2)] and trio.current_time() - started < 5


async def test_prefetch_is_checked(autojump_clock):
    async with runstate.testing.serve() as rs:
        mailbox = rs.scope("sc_x").mailbox("jobs")
        for bad in (0, 101, True, 2.5):
            with pytest.raises(ValueError):
                await mailbox.consume(lambda data, delivery: None, prefetch=bad)

