"""Claims against a scripted server: request shapes, the wait loop, renewal timing, fail-closed, run()."""

from __future__ import annotations

import asyncio
import threading

import anyio
import pytest
import trio

import runstate
from runstate import _renewal
from runstate.transport import TransportError
from sdk_fakes import RENEWED, claim_server, error, make_client, ok


# -- acquire ----------------------------------------------------------------------------------


@pytest.mark.trio
async def test_acquire_sends_the_claim_and_returns_the_lease(autojump_clock):
    """POST /claims carries key, scope, holder, session and lease; the lease exposes the grant."""
    rs, transport = make_client(claim_server())
    lease = await rs.scope("sc_1").claim("company:acme").acquire(lease_seconds=12)
    assert transport.sent[0].json == {
        "key": "company:acme", "scopeId": "sc_1", "holder": "h1", "holderSession": rs.session, "leaseSeconds": 12,
    }
    assert (lease.key, lease.generation, lease.token()) == ("company:acme", 7, "tok-1")
    assert lease.expires_at.isoformat() == "2030-01-01T00:00:30+00:00"
    assert "tok-1" not in repr(lease)
    assert isinstance(lease.lost_event, trio.Event) and not lease.is_lost
    await lease.release()


@pytest.mark.trio
async def test_wait_loop_retries_a_held_key_every_300ms_with_a_fresh_key(autojump_clock, pinned_jitter):
    """With wait=True a held key is tried again every 0.3 s (jitter pinned), each try a new logical call;
    the first try, without a wait, is followed at once by one that asks the server to hold it."""
    rs, transport = make_client(claim_server(held_for=3))
    start = trio.current_time()
    lease = await rs.scope("sc_1").claim("k").acquire(wait=True)
    tries = transport.to("/claims")
    assert [round(s.at - start, 6) for s in tries] == [0, 0, 0.3, 0.6]
    assert len({s.headers["idempotency-key"] for s in tries}) == 4
    await lease.release()


@pytest.mark.trio
async def test_wait_loop_backs_off_about_a_second_on_concurrency_limited(autojump_clock, pinned_jitter):
    """CONCURRENCY_LIMITED is waited out with ~1 s pauses, then a held key with ~0.3 s."""
    rs, transport = make_client(claim_server(limited_for=2, held_for=1))
    start = trio.current_time()
    lease = await rs.scope("sc_1").claim("k").acquire(wait=True)
    assert [round(s.at - start, 6) for s in transport.to("/claims")] == [0, 1.0, 2.0, 2.3]
    await lease.release()


@pytest.mark.trio
async def test_jitter_of_the_wait_loop_stays_in_its_band(autojump_clock):
    """Unpinned, the pauses of a held-key wait fall within 0.225-0.375 s."""
    rs, transport = make_client(claim_server(held_for=20))
    lease = await rs.scope("sc_1").claim("k").acquire(wait=True)
    tries = transport.to("/claims")
    gaps = [b.at - a.at for a, b in zip(tries[1:], tries[2:])]  # (the first try, without a wait, is followed at once)
    assert all(0.225 <= gap <= 0.375 for gap in gaps)
    await lease.release()


@pytest.mark.trio
async def test_wait_times_out_with_wait_timeout_error(autojump_clock, pinned_jitter):
    """A key held for longer than timeout_ms raises WaitTimeoutError exactly at the timeout, caused by CLAIM_HELD."""
    rs, transport = make_client(claim_server(held_for=10_000))
    start = trio.current_time()
    with pytest.raises(runstate.WaitTimeoutError) as caught:
        await rs.scope("sc_1").claim("k").acquire(wait=True, timeout_ms=1000)
    assert trio.current_time() - start == pytest.approx(1.0)
    assert (caught.value.code, caught.value.status) == ("WAIT_TIMEOUT", 0)
    assert caught.value.__cause__.code == "CLAIM_HELD"
    assert round(transport.to("/claims")[-1].at - start, 6) == 1.0


@pytest.mark.anyio
async def test_without_wait_a_held_key_raises_claim_held_at_once():
    """wait=False (the default) raises ConflictError CLAIM_HELD after one try."""
    rs, transport = make_client(claim_server(held_for=1))
    with pytest.raises(runstate.ConflictError) as caught:
        await rs.scope("sc_1").claim("k").acquire()
    assert caught.value.code == "CLAIM_HELD" and len(transport.sent) == 1


@pytest.mark.anyio
async def test_try_acquire_reports_busy_or_the_lease():
    """try_acquire gives {'kind': 'busy'} for a held key and {'kind': 'acquired', 'lease'} otherwise."""
    rs, _ = make_client(claim_server(held_for=1))
    claim = rs.scope("sc_1").claim("k")
    assert await claim.try_acquire() == {"kind": "busy"}
    attempt = await claim.try_acquire()
    assert attempt["kind"] == "acquired" and attempt["lease"].generation == 7
    await attempt["lease"].release()


@pytest.mark.anyio
async def test_try_acquire_still_raises_concurrency_limited():
    """CONCURRENCY_LIMITED is not 'busy': try_acquire raises RateLimitError."""
    rs, _ = make_client(claim_server(limited_for=1))
    with pytest.raises(runstate.RateLimitError):
        await rs.scope("sc_1").claim("k").try_acquire()


# -- renewal ----------------------------------------------------------------------------------


@pytest.mark.trio
async def test_renewal_runs_every_third_of_the_lease(autojump_clock, pinned_jitter):
    """A 30 s lease is renewed at 10, 20, 30 s... with {token, leaseSeconds}, the first after one interval."""
    rs, transport = make_client(claim_server())
    start = trio.current_time()
    lease = await rs.scope("sc_1").claim("k").acquire(lease_seconds=30)
    await trio.sleep(45)
    renewals = transport.to("/claims/k/renew")
    assert [round(s.at - start, 6) for s in renewals] == [10, 20, 30, 40]
    assert all(s.json == {"token": "tok-1", "leaseSeconds": 30} for s in renewals)
    assert lease.expires_at.isoformat() == "2030-01-01T00:01:00+00:00"
    await lease.release()


@pytest.mark.trio
async def test_renewal_interval_has_a_one_second_floor_and_jitter_bounds(autojump_clock, monkeypatch):
    """A 5 s lease renews every 5/3 s; under 3 s the 1 s floor applies; the jitter spans 0.9-1.1."""
    from runstate import _runtime

    monkeypatch.setattr(_runtime, "uniform", lambda low, high, rng=None: high if high == 1.1 else (low + high) / 2)
    rs, transport = make_client(claim_server())
    start = trio.current_time()
    lease = await rs.scope("sc_1").claim("k").acquire(lease_seconds=5)
    await trio.sleep(6)
    assert [round(s.at - start, 6) for s in transport.to("/claims/k/renew")] == [1.833333, 3.666667, 5.5]
    await lease.release()
    assert _renewal.interval_s(2) == pytest.approx(1.1)
    monkeypatch.setattr(_runtime, "uniform", lambda low, high, rng=None: low)
    assert _renewal.interval_s(30) == pytest.approx(9.0)


@pytest.mark.trio
async def test_renewals_ride_through_an_outage_until_the_local_end_of_the_lease(autojump_clock, pinned_jitter):
    """A renewal that meets an outage (here UNAVAILABLE on every try) is tried again with backoff
    (0.2 s doubling to 1 s) until the lease's end by the local clock less its 2 s margin: a 30 s
    lease taken at 0 is lost at exactly 28 s, not at its first failed renewal, and renewal stops."""
    rs, transport = make_client(claim_server(renew=lambda sent: error(503, "UNAVAILABLE")))
    start = trio.current_time()
    lease = await rs.scope("sc_1").claim("k").acquire(lease_seconds=30)
    await trio.sleep(27.9)
    assert not lease.is_lost
    await lease.lost_event.wait()
    assert trio.current_time() - start == pytest.approx(28)
    assert lease.is_lost and lease.lost_error.code == "LEASE_LOST"
    assert isinstance(lease.lost_error.__cause__, runstate.UnavailableError)
    with pytest.raises(runstate.LeaseLostError) as caught:
        lease.raise_if_lost()
    assert caught.value.code == "STALE_CLAIM"
    tries = [round(sent.at - start, 3) for sent in transport.to("/claims/k/renew")]
    assert tries[:6] == [10, 10.2, 10.6, 11.4, 12.4, 13.4] and tries[-1] == 27.4
    await trio.sleep(100)
    assert len(transport.to("/claims/k/renew")) == len(tries)
    await lease.release()  # still sent after loss (PROTOCOL 3.3)
    assert len(transport.to("/claims/k/release")) == 1


@pytest.mark.trio
async def test_a_stale_renewal_loses_the_lease_at_once(autojump_clock, pinned_jitter):
    """The server saying the token is stale ends the lease at that instant: no retry."""
    rs, transport = make_client(claim_server(renew=lambda sent: error(409, "STALE_CLAIM")))
    start = trio.current_time()
    lease = await rs.scope("sc_1").claim("k").acquire(lease_seconds=30)
    await lease.lost_event.wait()
    assert trio.current_time() - start == pytest.approx(10)
    assert isinstance(lease.lost_error, runstate.LeaseLostError) and lease.lost_error.code == "STALE_CLAIM"
    assert len(transport.to("/claims/k/renew")) == 1


@pytest.mark.trio
async def test_a_renewal_that_gets_through_after_an_outage_keeps_the_lease(autojump_clock, pinned_jitter):
    """Renewals fail from 9 s to 15 s; the lease (30 s, renewed at 10 s) is renewed at the first try
    after the outage, and its local end moves on from that try."""
    down = (9.0, 15.0)
    start = trio.current_time()

    def renew(sent):
        if down[0] <= sent.at - start < down[1]:
            raise TransportError("connection refused")
        return ok(RENEWED)

    rs, transport = make_client(claim_server(renew=renew))
    lease = await rs.scope("sc_1").claim("k").acquire(lease_seconds=30)
    await trio.sleep(16)
    assert not lease.is_lost
    got_through = [sent.at - start for sent in transport.to("/claims/k/renew") if sent.at - start >= down[1]][0]
    assert down[1] <= got_through <= down[1] + _renewal.RETRY_MAX_S + 0.2  # within one pause of the end
    assert lease.lost_at - start == pytest.approx(got_through + 28)
    await lease.release()


@pytest.mark.trio
async def test_a_malformed_renewal_answer_is_tried_again_until_the_lease_runs_out(autojump_clock, pinned_jitter):
    """A renewal answer without leaseExpiresAt (a proxy's page, say) says nothing about the lease:
    it is tried again, and the lease is lost at its local end with that error as the cause."""
    rs, _ = make_client(claim_server(renew=lambda sent: ok({})))
    start = trio.current_time()
    lease = await rs.scope("sc_1").claim("k").acquire(lease_seconds=30)
    await lease.lost_event.wait()
    assert trio.current_time() - start == pytest.approx(28)
    assert isinstance(lease.lost_error.__cause__, KeyError)


@pytest.mark.trio
async def test_a_paused_process_sees_the_loss_before_it_runs_anything_else(autojump_clock, pinned_jitter):
    """is_lost reads the lease's end by the local clock: when the clock has jumped past it (a
    process paused by SIGSTOP, here a clock jump with no chance for the renewal task to run),
    raise_if_lost() raises at once, before the renewal loop has noticed anything."""
    rs, transport = make_client(claim_server())
    lease = await rs.scope("sc_1").claim("k").acquire(lease_seconds=5)
    autojump_clock.jump(6)  # 6 s pass without any task running
    assert lease.is_lost and not lease.lost_event.is_set()
    with pytest.raises(runstate.LeaseLostError):
        lease.raise_if_lost()
    await trio.sleep(0)
    await lease.lost_event.wait()  # the loop marks it lost as soon as it runs, and sends nothing
    assert transport.to("/claims/k/renew") == []
    await lease.release()


@pytest.mark.anyio
async def test_asyncio_lease_has_an_asyncio_event_and_fails_closed(monkeypatch, pinned_jitter):
    """Under asyncio lost_event is an asyncio.Event and a stale renewal sets it."""
    monkeypatch.setattr(_renewal, "interval_s", lambda lease_seconds, rng=None: 0.01)
    rs, transport = make_client(claim_server(renew=lambda sent: error(409, "STALE_CLAIM")))
    lease = await rs.scope("sc_1").claim("k").acquire(lease_seconds=5)
    assert isinstance(lease.lost_event, asyncio.Event)
    with anyio.fail_after(2):
        await lease.lost_event.wait()
    assert isinstance(lease.lost_error, runstate.LeaseLostError)
    await lease.release()


@pytest.mark.trio
async def test_release_stops_renewal_and_sends_once(autojump_clock, pinned_jitter):
    """release() stops the renewal task, sends {token, observation} once, and a second call sends nothing."""
    rs, transport = make_client(claim_server())
    lease = await rs.scope("sc_1").claim("a/b c").acquire(lease_seconds=30)
    await trio.sleep(15)
    await lease.release(observation={"note": None})
    await lease.release()
    await trio.sleep(60)
    releases = transport.to("/claims/a%2Fb%20c/release")
    assert len(releases) == 1 and releases[0].json == {"token": "tok-1", "observation": {"note": None}}
    assert len(transport.to("/claims/a%2Fb%20c/renew")) == 1
    assert not rs._ctx.leases


@pytest.mark.trio
async def test_release_rides_through_an_outage_with_one_key_until_the_lease_ends(autojump_clock):
    """A release that meets an outage (no answer, then a 503) is sent again with the same
    idempotency key until it gets through; one that never does stops at the lease's end by the
    local clock (30 s less its 2 s margin) and raises the last error; a stale answer still only
    marks the lease lost, sent once."""
    origin = trio.current_time()
    down = {"until": 5.0}

    def release(sent):
        if trio.current_time() - origin < down["until"] - 2:
            raise TransportError("connection refused")
        if trio.current_time() - origin < down["until"]:
            return error(503, "UNAVAILABLE", "restarting")
        return ok({})

    rs, transport = make_client(claim_server(release=release), retries=1)
    lease = await rs.scope("sc_1").claim("k").acquire(lease_seconds=30)
    await lease.release()
    releases = transport.to("/claims/k/release")
    assert trio.current_time() - origin >= 5.0 and len(releases) > 4
    assert len({sent.headers["idempotency-key"] for sent in releases}) == 1, "one logical release, one key"
    assert not lease.is_lost

    down["until"] = float("inf")
    started = trio.current_time()
    lease = await rs.scope("sc_1").claim("k2").acquire(lease_seconds=30)
    with pytest.raises(runstate.UnavailableError):
        await lease.release()
    assert 27.0 <= trio.current_time() - started <= 28.5

    stale = lambda sent: error(409, "STALE_CLAIM")  # noqa: E731
    rs, transport = make_client(claim_server(release=stale))
    lease = await rs.scope("sc_1").claim("k").acquire(lease_seconds=30)
    await lease.release()
    assert lease.is_lost and len(transport.to("/claims/k/release")) == 1


@pytest.mark.trio
async def test_run_gives_the_key_back_through_an_outage_but_a_cancelled_one_does_not_wait_long(autojump_clock):
    """run()'s release after fn rides through an outage; a cancelled run() tries only for as long
    as one call's tries take, and lets the lease run out."""
    origin = trio.current_time()
    down = {"until": 8.0}

    def release(sent):
        if trio.current_time() - origin < down["until"]:
            return 503, {}, b"<html>503 Service Unavailable</html>"
        return ok({})

    rs, transport = make_client(claim_server(release=release), retries=1, request_timeout_ms=1000)
    async def work(lease):
        return "done"

    assert await rs.scope("sc_1").claim("k").run(work, lease_seconds=30) == "done"
    assert trio.current_time() - origin >= 8.0
    assert len(transport.to("/claims/k/release")) > 2

    down["until"] = float("inf")
    started = trio.current_time()

    async def forever(lease):
        await trio.sleep_forever()

    with trio.move_on_after(1):
        await rs.scope("sc_1").claim("k2").run(forever, lease_seconds=30)
    assert trio.current_time() - started <= 1 + 2 * (1 + 0.1) + 0.01


@pytest.mark.anyio
async def test_release_ignores_stale_claim():
    """A STALE_CLAIM answer to release means the lease had already gone: no error, but it is lost."""
    rs, _ = make_client(claim_server(release=lambda sent: error(409, "STALE_CLAIM")))
    lease = await rs.scope("sc_1").claim("k").acquire()
    await lease.release()
    assert lease.is_lost and isinstance(lease.lost_error, runstate.LeaseLostError)


@pytest.mark.anyio
async def test_claim_keys_are_fully_percent_encoded_in_paths():
    """Renew and release paths encode every byte of the key but A-Za-z0-9_.-~."""
    rs, transport = make_client(claim_server())
    lease = await rs.scope("sc_1").claim("file/a b%:é~_.-").acquire()
    await lease.renew(60)
    await lease.renew()
    await lease.release()
    encoded = "file%2Fa%20b%25%3A%C3%A9~_.-"
    assert [s.suffix for s in transport.sent[1:]] == [f"/claims/{encoded}/renew"] * 2 + [f"/claims/{encoded}/release"]
    assert transport.sent[1].json == {"token": "tok-1", "leaseSeconds": 60}
    assert transport.sent[2].json == {"token": "tok-1"}
    assert transport.sent[0].json["key"] == "file/a b%:é~_.-"


@pytest.mark.anyio
async def test_manual_renew_with_a_stale_token_marks_the_lease_lost():
    """A manual renew answered STALE_CLAIM raises LeaseLostError and the lease counts as lost."""
    rs, _ = make_client(claim_server(renew=lambda sent: error(409, "STALE_CLAIM")))
    lease = await rs.scope("sc_1").claim("k").acquire()
    with pytest.raises(runstate.LeaseLostError):
        await lease.renew()
    assert lease.is_lost
    await lease.release()


@pytest.mark.trio
async def test_closing_the_client_stops_every_renewal(autojump_clock, pinned_jitter):
    """aclose() stops the background renewals (no request afterwards) and marks those leases lost."""
    rs, transport = make_client(claim_server())
    lease = await rs.scope("sc_1").claim("k").acquire(lease_seconds=30)
    await rs.aclose()
    await trio.sleep(100)
    assert transport.to("/claims/k/renew") == [] and lease.is_lost


# -- run() ------------------------------------------------------------------------------------


@pytest.mark.trio
async def test_run_returns_the_result_and_releases(autojump_clock, pinned_jitter):
    """run(fn) gives fn the lease, returns its result and releases afterwards, renewing meanwhile."""
    rs, transport = make_client(claim_server())

    async def work(lease):
        await trio.sleep(25)
        return f"done by generation {lease.generation}"

    assert await rs.scope("sc_1").claim("k").run(work, wait=True) == "done by generation 7"
    assert [s.suffix for s in transport.sent] == ["/claims", "/claims/k/renew", "/claims/k/renew", "/claims/k/release"]


@pytest.mark.trio
async def test_run_raises_lease_lost_when_its_release_is_refused_as_stale(autojump_clock, pinned_jitter):
    """A token gone stale between two renewals (a forced release) is learned at the release: run()
    raises LeaseLostError in place of fn's result, and the lease is lost."""
    rs, transport = make_client(claim_server(release=lambda sent: error(409, "STALE_CLAIM")))
    held = []

    async def work(lease):
        held.append(lease)
        await trio.sleep(5)  # shorter than a renewal interval: no renewal is refused first
        return "a result made without ownership"

    with pytest.raises(runstate.LeaseLostError) as caught:
        await rs.scope("sc_1").claim("k").run(work, lease_seconds=30)
    assert caught.value.code == "STALE_CLAIM" and "during run()" in caught.value.message
    assert isinstance(caught.value.__cause__, runstate.LeaseLostError)
    assert held[0].is_lost
    assert [s.suffix for s in transport.sent] == ["/claims", "/claims/k/release"]


@pytest.mark.trio
async def test_run_keeps_fns_own_error_when_its_release_is_refused(autojump_clock):
    """fn's own error goes up as it is, even when the release then finds the lease gone."""
    rs, _ = make_client(claim_server(release=lambda sent: error(409, "STALE_CLAIM")))

    async def boom(lease):
        raise ValueError("bad input")

    with pytest.raises(ValueError, match="bad input"):
        await rs.scope("sc_1").claim("k").run(boom)


@pytest.mark.trio
async def test_run_ignores_a_release_that_cannot_reach_the_server(autojump_clock):
    """A release lost to an outage says nothing about the lease: fn's result stands."""
    rs, _ = make_client(claim_server(release=lambda sent: error(503, "UNAVAILABLE")), retries=0)

    async def work(lease):
        return "done"

    assert await rs.scope("sc_1").claim("k").run(work) == "done"


@pytest.mark.trio
async def test_a_lease_block_that_ends_normally_raises_when_its_release_is_refused(autojump_clock):
    """`async with lease:` learns at its release, as run() does, that the lease had gone."""
    rs, _ = make_client(claim_server(release=lambda sent: error(409, "STALE_CLAIM")))
    lease = await rs.scope("sc_1").claim("k").acquire()
    with pytest.raises(runstate.LeaseLostError):
        async with lease:
            pass
    assert lease.is_lost


@pytest.mark.trio
async def test_run_releases_when_fn_raises(autojump_clock):
    """An exception from fn comes out of run() unchanged, after the release."""
    rs, transport = make_client(claim_server())

    async def boom(lease):
        raise ValueError("bad input")

    with pytest.raises(ValueError, match="bad input"):
        await rs.scope("sc_1").claim("k").run(boom)
    assert transport.sent[-1].suffix == "/claims/k/release"


@pytest.mark.trio
async def test_run_cancels_a_coroutine_when_the_lease_is_lost(autojump_clock, pinned_jitter):
    """When renewal fails, run() cancels the coroutine at that instant and raises LeaseLostError (STALE_CLAIM)."""
    rs, transport = make_client(claim_server(renew=lambda sent: error(409, "STALE_CLAIM")))
    reached = []
    start = trio.current_time()

    async def long_work(lease):
        try:
            await trio.sleep(3600)
            reached.append("end")
        except trio.Cancelled:
            reached.append(("cancelled at", trio.current_time() - start))
            raise

    with pytest.raises(runstate.LeaseLostError) as caught:
        await rs.scope("sc_1").claim("k").run(long_work, lease_seconds=30)
    assert caught.value.code == "STALE_CLAIM" and caught.value.status == 409
    assert reached == [("cancelled at", pytest.approx(10))]
    assert transport.sent[-1].suffix == "/claims/k/release"


@pytest.mark.trio
async def test_run_stops_waiting_for_a_thread_when_the_lease_is_lost(autojump_clock, pinned_jitter):
    """A plain fn runs in a worker thread; on loss run() raises at once and the thread finishes later on its own."""
    # Virtual time jumps only after a real second with every task waiting: while the worker thread
    # starts (on a busy machine, later than trio's own tasks run), the clock must not jump to the
    # lease's end and lose it before the renewal is refused.
    autojump_clock.autojump_threshold = 1.0
    started = threading.Event()
    release_thread = threading.Event()
    finished = threading.Event()
    seen = {}

    async def stale_once_the_thread_runs(sent):
        await trio.to_thread.run_sync(started.wait, 5)
        return error(409, "STALE_CLAIM")

    rs, transport = make_client(claim_server(renew=stale_once_the_thread_runs))

    def blocking_work(lease):
        seen["thread"] = threading.current_thread()
        started.set()
        release_thread.wait(5)
        seen["lost_seen_by_thread"] = lease.is_lost
        finished.set()

    with pytest.raises(runstate.LeaseLostError):
        await rs.scope("sc_1").claim("k").run(blocking_work, lease_seconds=30)
    assert not finished.is_set()
    assert seen["thread"] is not threading.current_thread()
    release_thread.set()
    await trio.to_thread.run_sync(finished.wait, 5)
    assert seen["lost_seen_by_thread"] is True


@pytest.mark.anyio
async def test_asyncio_run_cancels_the_coroutine_on_loss(monkeypatch, pinned_jitter):
    """Under asyncio too, a lost lease cancels run()'s coroutine and raises LeaseLostError."""
    monkeypatch.setattr(_renewal, "interval_s", lambda lease_seconds, rng=None: 0.01)
    rs, transport = make_client(claim_server(renew=lambda sent: error(409, "STALE_CLAIM")))
    cancelled = []

    async def long_work(lease):
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            cancelled.append(True)
            raise

    with anyio.fail_after(2):
        with pytest.raises(runstate.LeaseLostError):
            await rs.scope("sc_1").claim("k").run(long_work, lease_seconds=5)
    assert cancelled == [True]
    assert transport.sent[-1].suffix == "/claims/k/release"


@pytest.mark.anyio
async def test_asyncio_run_with_a_plain_function(monkeypatch):
    """Under asyncio a plain fn runs in a worker thread and its result comes back."""
    rs, transport = make_client(claim_server())
    main_thread = threading.current_thread()
    result = await rs.scope("sc_1").claim("k").run(lambda lease: (threading.current_thread() is not main_thread, lease.token()))
    assert result == (True, "tok-1")


@pytest.mark.trio
async def test_renewal_transport_failures_are_retried_before_the_lease_counts_as_lost(autojump_clock, pinned_jitter):
    """A renewal is a logical call: a transport failure is retried with the same key, and only
    exhausting the retries loses the lease."""
    calls = {"n": 0}

    def flaky_renew(sent):
        calls["n"] += 1
        if calls["n"] % 2:
            raise TransportError("blip")
        return ok(RENEWED)

    rs, transport = make_client(claim_server(renew=flaky_renew))
    lease = await rs.scope("sc_1").claim("k").acquire(lease_seconds=30)
    await trio.sleep(35)
    assert not lease.is_lost
    renewals = transport.to("/claims/k/renew")
    assert len(renewals) == 6
    assert renewals[0].headers["idempotency-key"] == renewals[1].headers["idempotency-key"]
    await lease.release()
