"""The SDK against a real kernel through `runstate.testing`: trio in virtual time, asyncio in real time."""

from __future__ import annotations

import asyncio
import gc
import warnings

import anyio
import pytest
import trio

import runstate
from runstate import testing
from runstate.transport import TransportError

pytest.importorskip("runstate.server.app")


class Flaky:
    """Wraps a transport; while `down` is true, claim renewals fail as if the network dropped them."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.down = False

    async def send(self, method, path, headers, body, timeout_s):
        if self.down and path.endswith("/renew"):
            raise TransportError("network unreachable")
        return await self.inner.send(method, path, headers, body, timeout_s)


# -- trio, virtual time -----------------------------------------------------------------------


@pytest.mark.trio
async def test_a_5s_lease_lives_for_minutes_through_background_renewal(autojump_clock):
    """A 5 s lease stays held for 10 virtual minutes by renewal alone; then release hands the key on with generation + 1."""
    async with testing.serve() as rs:
        run = await rs.scopes.create(name="renewal")
        lease = await run.claim("company:acme").acquire(lease_seconds=5)
        other = rs.new_client(holder="worker-2").scope(run.id).claim("company:acme")
        for _ in range(10):
            await trio.sleep(60)
            assert await other.try_acquire() == {"kind": "busy"}
            assert not lease.is_lost
        await lease.release()
        attempt = await other.try_acquire()
        assert attempt["kind"] == "acquired"
        assert attempt["lease"].generation == lease.generation + 1
        assert attempt["lease"].token() != lease.token()
        await attempt["lease"].release()


async def _renewal_times(seed):
    """Two clients of one in-process server each hold a 6 s lease for a virtual minute; when each
    lease's last accepted renewal was sent, counted from the start (it depends on every draw of
    the clients' renewal jitter)."""
    async with testing.serve(seed=seed) as rs:
        start = trio.current_time()
        other = rs.new_client(holder="worker-2")
        first = await rs.scope((await rs.scopes.create()).id).claim("a").acquire(lease_seconds=6)
        second = await other.scope((await other.scopes.create()).id).claim("b").acquire(lease_seconds=6)
        await trio.sleep(60)
        times = [round(lease._clock.ends_at - lease.lease_seconds - start, 6) for lease in (first, second)]
        await first.release()
        await second.release()
        return times


@pytest.mark.trio
async def test_a_seed_repeats_the_clients_renewal_jitter(autojump_clock):
    """The same server seed gives each client the same renewal jitter, run after run (so the same
    virtual instants); another seed gives other instants."""
    once = await _renewal_times(7)
    again = await _renewal_times(7)
    assert once == again
    assert await _renewal_times(8) != once


@pytest.mark.trio
async def test_a_holder_that_stops_renewing_loses_the_key_at_expiry(autojump_clock, pinned_jitter):
    """When the owner stops renewing, a waiting holder gets the key within one retry of expiry, with generation + 1, and the old token is stale."""
    async with testing.serve() as rs:
        run = await rs.scopes.create()
        start = trio.current_time()
        lease = await run.claim("file:report.md").acquire(lease_seconds=5)
        await lease.aclose()  # the process "pauses": no more renewals
        taker = rs.new_client(holder="worker-2").scope(run.id).claim("file:report.md")
        second = await taker.acquire(wait=True, timeout_ms=30_000)
        took_over_after = trio.current_time() - start
        assert 5.0 <= took_over_after <= 5.3 + 1e-6
        assert second.generation == lease.generation + 1
        with pytest.raises(runstate.LeaseLostError) as caught:
            await lease.renew()
        assert caught.value.code == "STALE_CLAIM"
        await lease.release()  # a stale release is ignored
        await second.release()


@pytest.mark.trio
async def test_run_raises_lease_lost_when_renewals_stop_getting_through(autojump_clock, pinned_jitter):
    """A network drop that outlasts the lease: renewals are tried again until its end by the local
    clock (6 s less the 0.6 s margin), then run() cancels the work and raises LeaseLostError, and
    another holder takes over once the server's lease has run out."""
    async with testing.serve() as rs:
        flaky = Flaky(rs.transport)
        worker = runstate.AsyncRunstate(api_key="test-key", space_id="default", holder="worker-1", transport=flaky)
        run = await rs.scopes.create()
        start = trio.current_time()
        progress = []

        async def write_report(lease):
            flaky.down = True
            for section in range(100):
                lease.raise_if_lost()
                await trio.sleep(1)
                progress.append(section)

        with pytest.raises(runstate.LeaseLostError):
            await worker.scope(run.id).claim("file:report.md").run(write_report, lease_seconds=6)
        assert trio.current_time() - start == pytest.approx(5.4)
        assert progress == [0, 1, 2, 3, 4]  # sections finished at 1-5 s; cancelled during the sixth
        flaky.down = False
        takeover = await rs.scope(run.id).claim("file:report.md").acquire(wait=True)
        assert takeover.generation == 2
        await takeover.release()
        await worker.aclose()


@pytest.mark.trio
async def test_waiting_for_a_held_key_times_out(autojump_clock):
    """wait=True on a key held by another live holder raises WaitTimeoutError after timeout_ms of virtual time."""
    async with testing.serve() as rs:
        run = await rs.scopes.create()
        held = await run.claim("k").acquire()
        start = trio.current_time()
        with pytest.raises(runstate.WaitTimeoutError):
            await rs.new_client().scope(run.id).claim("k").acquire(wait=True, timeout_ms=2_000)
        assert trio.current_time() - start == pytest.approx(2.0)
        with pytest.raises(runstate.ConflictError) as caught:
            await rs.new_client().scope(run.id).claim("k").acquire()
        assert caught.value.code == "CLAIM_HELD"
        await held.release()


@pytest.mark.trio
async def test_the_kernel_refuses_what_the_contract_says(autojump_clock):
    """Bad lease lengths, a bad key, another space and a cancelled run get the documented error classes."""
    async with testing.serve() as rs:
        run = await rs.scopes.create()
        for seconds in (4, 601):
            with pytest.raises(runstate.RunstateError) as caught:
                await run.claim("k").acquire(lease_seconds=seconds)
            assert (type(caught.value), caught.value.code) == (runstate.ValidationError, "VALIDATION_FAILED")
        with pytest.raises(runstate.AuthenticationError):
            await rs.new_client(api_key="wrong").scopes.create()
        with pytest.raises(runstate.NotFoundError):
            await rs.with_space("elsewhere").scopes.create()
        with pytest.raises(runstate.NotFoundError):
            await rs.scope("sc_missing").status()
        child = await run.child(name="child")
        await run.cancel()
        assert (await child.status())["effective"] != "ACTIVE"
        with pytest.raises(runstate.ScopeCancelledError):
            await child.claim("k").acquire()


@pytest.mark.trio
async def test_lease_lost_event_is_a_trio_event_and_the_kernel_is_exposed(autojump_clock):
    """Under trio lost_event is a trio.Event; serve() exposes the app and its kernel."""
    async with testing.serve() as rs:
        assert rs.kernel is not None and rs.app is not None
        lease = await (await rs.scopes.create()).claim("k").acquire()
        assert isinstance(lease.lost_event, trio.Event)
        await lease.release()


class Counted:
    """Wraps a transport and refuses to send more than `limit` requests: a wait that keeps asking
    without the clock moving on fails the test instead of spinning for ever."""

    def __init__(self, inner, limit) -> None:
        self.inner = inner
        self.limit = limit
        self.sent = 0

    async def send(self, method, path, headers, body, timeout_s):
        self.sent += 1
        assert self.sent <= self.limit, f"{self.sent} requests, and the clock stands at {trio.current_time()}"
        return await self.inner.send(method, path, headers, body, timeout_s)


@pytest.mark.trio
@pytest.mark.parametrize("timeout_ms", [700, 1000, 1300, 2100, 3000])
async def test_every_wait_of_the_handles_times_out_at_its_timeout_in_virtual_time(autojump_clock, timeout_ms):
    """A claim, a pool, a quota, a task's result, a barrier, a timer and a group waited on for `timeout_ms`
    raise WaitTimeoutError when that much virtual time has passed, whatever the number: a wait
    whose last pause is what is left of it, worked out afresh as a difference of two clock
    readings, could come to a pause too small to move the clock on, and then asked again for ever."""
    async with testing.serve() as rs:
        run = await rs.scopes.create()
        await rs.mailboxes.ensure("jobs", mode="WORK")
        await rs.pools.ensure("gpu", capacity=1)
        await rs.quotas.ensure("search", units_per_window=1, window_seconds=86_400)
        await run.claim("k").acquire()
        await run.pool("gpu").acquire()
        await run.quota("search").take()
        counted = Counted(rs.transport, limit=500)
        worker = runstate.AsyncRunstate(api_key="test-key", space_id="default", holder="worker-2", transport=counted)
        other = worker.scope(run.id)
        ticket = await other.mailbox("jobs").submit({}, key="never-done")
        barrier = await other.barriers.create(target=2)
        timer = await other.timers.create(after_seconds=3600)
        group = await other.groups.create(mailbox="jobs", condition="ALL_TERMINAL", expected_members=1)
        waits = {
            "claim": lambda: other.claim("k").acquire(wait=True, timeout_ms=timeout_ms),
            "pool": lambda: other.pool("gpu").acquire(timeout_ms=timeout_ms),
            "quota": lambda: other.quota("search").take(timeout_ms=timeout_ms),
            "result": lambda: ticket.result(timeout_ms=timeout_ms),
            "admission": lambda: ticket.await_admission(timeout_ms=timeout_ms),
            "barrier": lambda: barrier.wait(timeout_ms=timeout_ms),
            "timer": lambda: timer.wait(timeout_ms=timeout_ms),
            "group": lambda: group.wait(timeout_ms=timeout_ms),
        }
        for name, wait in waits.items():
            counted.sent = 0
            started = trio.current_time()
            with pytest.raises(runstate.WaitTimeoutError):
                await wait()
            assert trio.current_time() - started == pytest.approx(timeout_ms / 1000, abs=0.002), name
        await worker.aclose()


# -- the product page's Python claim examples, as written --------------------------------------


async def research_company(name):
    await anyio.sleep(0.01)
    return f"report on {name}"


async def write_section(section, fencing_token):
    assert fencing_token
    await anyio.sleep(0.01)


sections = ["intro", "findings", "summary"]


async def product_page_claim_examples(rs, capsys):
    run = await rs.scopes.create()

    async def research(lease):
        print(f"researching acme as generation {lease.generation}")
        return await research_company("acme")

    report = await run.claim("company:acme").run(research, wait=True, timeout_ms=120_000)
    assert report == "report on acme"

    attempt = await run.claim("company:acme").try_acquire()
    if attempt["kind"] == "busy":
        print("another agent is already on acme")
    else:
        lease = attempt["lease"]
        try:
            await research_company("acme")
        finally:
            await lease.release()

    from runstate import LeaseLostError

    async def write_report(lease):
        for section in sections:
            lease.raise_if_lost()
            await write_section(section, fencing_token=lease.token())

    try:
        await run.claim("file:report.md").run(write_report)
    except LeaseLostError:
        print("lost ownership of report.md; another agent may own it now")

    out = capsys.readouterr().out
    assert "researching acme as generation 1" in out
    assert "another agent" not in out and "lost ownership" not in out
    return run


@pytest.mark.trio
async def test_product_page_claim_examples_under_trio(autojump_clock, capsys):
    """The product page's Python claim examples run as written under trio."""
    async with testing.serve() as rs:
        await product_page_claim_examples(rs, capsys)


@pytest.mark.anyio
async def test_product_page_claim_examples_under_asyncio(capsys):
    """The product page's Python claim examples run as written under asyncio, with the kernel as a trio guest."""
    async with testing.serve() as rs:
        run = await product_page_claim_examples(rs, capsys)
        lease = await run.claim("company:acme").acquire()
        assert isinstance(lease.lost_event, asyncio.Event)
        assert lease.generation == 3
        await lease.release()


@pytest.mark.anyio
async def test_asyncio_claims_against_the_kernel():
    """Under asyncio: busy for a second holder, WaitTimeoutError after a short wait, release hands over with generation + 1."""
    async with testing.serve() as rs:
        run = await rs.scopes.create()
        lease = await run.claim("k").acquire(lease_seconds=5)
        other = rs.new_client(holder="worker-2").scope(run.id).claim("k")
        assert await other.try_acquire() == {"kind": "busy"}
        with pytest.raises(runstate.WaitTimeoutError):
            await other.acquire(wait=True, timeout_ms=400)
        await lease.release()
        second = await other.acquire(wait=True, timeout_ms=2_000)
        assert second.generation == lease.generation + 1
        await second.release()


@pytest.mark.trio
async def test_product_page_setup_from_the_environment_over_real_http(monkeypatch, capsys):
    """`AsyncRunstate(holder=...)` configured only from the environment reaches a real server over HTTP."""
    from runstate.server.serve import serve
    from runstate.server.settings import Settings

    import os

    async with trio.open_nursery() as nursery:
        binds = await nursery.start(serve, Settings(port=0, api_key="env-key", space_id="env-space"))
        capsys.readouterr()
        monkeypatch.setenv("RUNSTATE_API_KEY", "env-key")
        monkeypatch.setenv("RUNSTATE_SPACE_ID", "env-space")
        monkeypatch.setenv("RUNSTATE_BASE_URL", binds[0])
        with trio.fail_after(10):
            while True:
                try:
                    async with runstate.AsyncRunstate() as probe:
                        monkeypatch.setenv("RUNSTATE_SCOPE_ID", (await probe.scopes.create()).id)
                    break
                except runstate.UnavailableError:
                    await trio.sleep(0.05)

        from runstate import AsyncRunstate

        rs = AsyncRunstate(holder="researcher-1")
        run = rs.scope(os.environ["RUNSTATE_SCOPE_ID"])  # or: await rs.scopes.create()

        async def research(lease):
            print(f"researching acme as generation {lease.generation}")
            return await research_company("acme")

        report = await run.claim("company:acme").run(research, wait=True, timeout_ms=120_000)
        assert report == "report on acme"
        assert "researching acme as generation 1" in capsys.readouterr().out
        await rs.aclose()
        nursery.cancel_scope.cancel()


@pytest.mark.trio
async def test_a_run_by_name_is_the_same_root_scope_for_every_client_and_stays_stopped(autojump_clock):
    """`scopes.ensure(name)` makes the run once (with its deadline) and gives every later caller,
    any client, the same one; a stopped run is answered as it is; another name is another run."""
    async with testing.serve() as rs:
        first = await rs.scopes.ensure("nightly report", deadline="2100-01-01T00:00:00Z")
        again = await rs.new_client(holder="worker-2").scopes.ensure("nightly report")
        assert again.id == first.id
        view = await again.status()
        assert view["name"] == "nightly report" and view["parentId"] is None and view["deadline"] == "2100-01-01T00:00:00.000Z"
        await first.cancel()
        stopped = await rs.scopes.ensure("nightly report")
        assert stopped.id == first.id and (await stopped.status())["effective"] == "CANCELLED"
        assert (await rs.scopes.ensure("another")).id != first.id


def resource_warnings_of_garbage():
    """The ResourceWarnings that collecting the garbage now raises (an unclosed stream's, say)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        gc.collect()
    return [str(warning.message) for warning in caught if issubclass(warning.category, ResourceWarning)]


@pytest.mark.trio
async def test_a_server_served_and_restarted_under_trio_leaves_nothing_unclosed(autojump_clock):
    """serve() and restart_server() close the lifespan's streams: a test run with warnings as
    errors is not failed by a ResourceWarning at the next garbage collection."""
    resource_warnings_of_garbage()
    async with testing.serve() as rs:
        await rs.scopes.create()
        await rs.restart_server(down_s=1)
        await rs.scopes.create()
    del rs
    assert resource_warnings_of_garbage() == []



@pytest.mark.trio
async def test_a_blocking_call_to_the_in_process_server_under_trio_is_a_config_error(autojump_clock):
    """The blocking forms run on a loop thread of their own, outside the test's trio run: their
    call is refused at once with ConfigError saying to use the async forms, and the server is
    left as it was (no 500, nothing half done)."""
    async with testing.serve() as rs:
        bound = rs.client(run="r1")
        with pytest.raises(runstate.ConfigError, match="async forms"):
            bound.run_id()
        with pytest.raises(runstate.ConfigError, match="async forms"):
            runstate.Runstate(transport=rs.transport, api_key="test-key", space_id="default").scopes.create()
        assert await bound.arun_id()  # the async form of the same client works


@pytest.mark.anyio
async def test_a_blocking_call_to_the_in_process_server_under_asyncio_is_a_config_error():
    """As under trio, with the server in a trio guest run on this loop."""
    async with testing.serve() as rs:
        bound = rs.client(run="r1")
        with pytest.raises(runstate.ConfigError, match="async forms"):
            bound.run_id()
        assert await bound.arun_id()


@pytest.mark.trio
async def test_a_server_with_a_data_directory_keeps_virtual_time_while_its_disk_works(autojump_clock, tmp_path):
    """With a data directory (fsync on every write), the journal's writes, its recovery and its
    snapshots run on the loop: the autojump clock stands still while the disk works, so requests
    take no virtual time, a restart takes its `down_s`, and a 30 s lease held through it stays
    held. (In worker threads the clock jumped to the next timer at every fsync: a request could
    take a minute of virtual time, and the lease was lost or not from one run to the next.)"""
    from runstate.server.settings import Settings

    settings = Settings(api_key="test-key", space_id="default", data_dir=str(tmp_path), fsync="always")
    async with testing.serve(settings=settings) as rs:
        start = trio.current_time()
        run = await rs.scopes.create()
        await rs.mailboxes.ensure("jobs", mode="WORK")
        for n in range(50):
            await run.mailbox("jobs").submit({"n": n}, key=f"task-{n}")
        lease = await run.claim("k").acquire(lease_seconds=30)
        assert trio.current_time() - start < 0.1
        restarted_at = trio.current_time()
        await rs.restart_server(down_s=6)
        assert trio.current_time() - restarted_at == pytest.approx(6, abs=0.1)
        other = rs.new_client(holder="worker-2").scope(run.id)
        assert await other.claim("k").try_acquire() == {"kind": "busy"}
        await trio.sleep(300)
        assert not lease.is_lost
        assert len((await other.tasks(limit=100))["tasks"]) == 50
        await lease.release()


@pytest.mark.trio
async def test_a_client_kept_past_serve_is_refused_as_by_a_closed_port_under_trio(autojump_clock):
    """Once `serve()` has ended its server is gone: a call through its client (or a second client
    of it) is refused as by a closed port, UnreachableError, not a 500 from a stopped kernel."""
    async with testing.serve() as rs:
        other = rs.new_client(holder="worker-2")
        await rs.scopes.create()
    for client in (rs, other):
        with pytest.raises(runstate.UnreachableError, match="connection refused"):
            await client.scopes.create()


@pytest.mark.anyio
async def test_a_client_kept_past_serve_is_refused_as_by_a_closed_port_under_asyncio():
    """As under trio, where the call would otherwise reach a trio run that has ended."""
    async with testing.serve() as rs:
        await rs.scopes.create()
    with pytest.raises(runstate.UnreachableError, match="connection refused"):
        await rs.scopes.create()


@pytest.mark.trio
async def test_settings_that_name_no_api_key_are_given_the_clients(autojump_clock, tmp_path):
    """`serve(settings=Settings(data_dir=...))`, as the docs write it: the server accepts the
    client's key for its space (it made a key of its own, and refused the client, before), and
    keeps accepting it after a restart."""
    from runstate.server.settings import Settings

    async with testing.serve(space_id="team", settings=Settings(data_dir=str(tmp_path), fsync="off")) as rs:
        run = await rs.scopes.create()
        await rs.restart_server(down_s=1)
        assert (await rs.scope(run.id).status())["effective"] == "ACTIVE"
        assert rs.space_id == "team"


@pytest.mark.anyio
async def test_a_second_server_at_once_under_asyncio_is_a_config_error_and_the_first_serves_on():
    """Under asyncio each server's kernel is a trio guest run, and trio hosts one per thread: a
    second serve() inside the first raises ConfigError saying so (it raised trio's "Attempted to
    call run() from inside a run()"), and the first server is untouched."""
    async with testing.serve() as first:
        with pytest.raises(runstate.ConfigError, match="one at a time"):
            async with testing.serve(space_id="other"):
                pass
        assert (await (await first.scopes.create()).status())["effective"] == "ACTIVE"
    async with testing.serve() as after:  # once the first has ended, another can start
        await after.scopes.create()


@pytest.mark.trio
async def test_several_servers_at_once_under_trio_each_have_their_own_kernel(autojump_clock):
    """Under trio any number of servers share the test's run, each with its own kernel and keys."""
    async with testing.serve() as first, testing.serve(api_key="key-2", space_id="other") as second:
        assert first.kernel is not second.kernel
        await first.scopes.create()
        await second.scopes.create()
        with pytest.raises(runstate.AuthenticationError):
            await second.new_client(api_key="test-key", space_id="default").scopes.create()
