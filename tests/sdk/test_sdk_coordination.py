"""Barriers, timers, task groups and events through our SDK against a real kernel
(`runstate.testing`): trio in virtual time, and once under asyncio in real time."""

from __future__ import annotations

import pytest
import trio

import runstate
from runstate import testing
from runstate.errors import ConflictError, CursorExpiredError
from runstate.transport import TransportError

pytest.importorskip("runstate.server.app")


class WatchDrops:
    """Wraps a transport; the first `drops` watches fail as if the network dropped them."""

    def __init__(self, inner, drops: int) -> None:
        self.inner = inner
        self.drops = drops
        self.watches = 0

    async def send(self, method, path, headers, body, timeout_s):
        if "/watch" in path:
            self.watches += 1
            if self.drops:
                self.drops -= 1
                raise TransportError("connection reset")
        return await self.inner.send(method, path, headers, body, timeout_s)


class Counting:
    """Wraps a transport and counts timer polls."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.polls = 0

    async def send(self, method, path, headers, body, timeout_s):
        if path.endswith("/timers/poll"):
            self.polls += 1
        return await self.inner.send(method, path, headers, body, timeout_s)


@pytest.mark.trio
async def test_barriers_release_and_report_cancellation(autojump_clock):
    """wait() returns once the second distinct key arrives; a barrier of a cancelled run raises
    BarrierCancelledError from wait() as from arrive()."""
    async with testing.serve() as rs:
        run = await rs.scopes.create()
        barrier = await run.barriers.create(target=2)
        await barrier.arrive(key="a")
        released_at = []

        async def waiter():
            view = await barrier.wait(timeout_ms=10_000)
            released_at.append((view["state"], trio.current_time()))

        assert (await barrier.status())["arrived"] == 1  # a count of distinct keys, not the keys
        async with trio.open_nursery() as nursery:
            nursery.start_soon(waiter)
            await trio.sleep(3)
            await barrier.arrive(key="a")
            await trio.sleep(1)
            assert not released_at
            at = trio.current_time()
            await barrier.arrive(key="b")
        assert released_at[0][0] == "RELEASED" and released_at[0][1] - at < 0.3
        with pytest.raises(ConflictError) as late:
            await barrier.arrive(key="c")
        assert late.value.code == "BARRIER_RELEASED"
        other = await run.barriers.create(target=2)
        await run.cancel()
        with pytest.raises(ConflictError) as cancelled:
            await other.wait(timeout_ms=2_000)
        assert cancelled.value.code == "BARRIER_CANCELLED"
        # The class of its code, as an arrive at the same barrier is answered: a StoppedError too.
        assert isinstance(cancelled.value, runstate.BarrierCancelledError)
        assert isinstance(cancelled.value, runstate.StoppedError)
        with pytest.raises(runstate.BarrierCancelledError):
            await other.arrive(key="a")


@pytest.mark.trio
async def test_a_timer_wait_is_held_on_the_server_and_acks_at_the_firing(autojump_clock):
    """wait() holds its poll on the server: it returns at the firing instant after one or two
    requests (not one every 250 ms), and the timer is ACKED; a cancelled timer's wait raises."""
    async with testing.serve() as rs:
        counting = Counting(rs.transport)
        client = runstate.AsyncRunstate(api_key="test-key", space_id="default", transport=counting)
        run = client.scope((await rs.scopes.create()).id)
        timer = await run.timers.create(after_seconds=45)
        start = trio.current_time()
        fired = await timer.wait(timeout_ms=60_000)
        assert trio.current_time() - start == pytest.approx(45, abs=0.2)
        assert fired["fired_at"] >= timer.fire_at
        assert (await timer.status())["state"] == "ACKED"
        assert 1 <= counting.polls <= 3  # held 20 s at a time, not asked every 250 ms
        other = await run.timers.create(after_seconds=30)
        await other.cancel()
        with pytest.raises(ConflictError):
            await other.wait(timeout_ms=5_000)
        await client.aclose()


@pytest.mark.trio
async def test_groups_finalize_by_their_condition(autojump_clock):
    async with testing.serve() as rs:
        await rs.mailboxes.ensure("answers", mode="WORK")
        run = await rs.scopes.create()
        group = await run.groups.create(mailbox="answers", condition="FIRST_ACCEPTED", parent_scope_id=run.id)
        assert group.scope_id is not None and group.scope_id != run.id
        first = await group.submit({"n": 1}, key="a")
        second = await group.submit({"n": 2}, key="b")
        assert first.scope_id == group.scope_id
        await group.reject(second.id)
        assert (await group.status())["state"] == "OPEN"
        await group.accept(first.id)
        assert await group.wait(timeout_ms=1_000) == {"outcome": "SUCCEEDED", "outcomeReason": "threshold_reached"}
        with pytest.raises(ConflictError):
            await group.seal()
        assert (await group.close())["state"] == "FINALIZED"
        outside = await run.mailbox("answers").submit({"x": 1}, key="x")
        with pytest.raises(ConflictError):
            await group.join_task(outside.id)
        again = run.groups.by_id(group.id)
        assert (await again.status())["outcome"] == "SUCCEEDED"


@pytest.mark.trio
async def test_watch_resumes_after_network_errors_without_gaps_or_repeats(autojump_clock):
    """Two dropped watches in a row: the iterator retries with the same cursor and yields every
    event once, in order; list() pages the same log; an expired cursor raises CursorExpiredError."""
    async with testing.serve() as rs:
        flaky = WatchDrops(rs.transport, drops=2)
        watcher = runstate.AsyncRunstate(api_key="test-key", space_id="default", transport=flaky)
        start = await rs.events.list()
        seen = []
        stop = trio.Event()

        async def follow():
            async for event in watcher.events.watch(cursor=start["nextCursor"], wait_seconds=5, stop_event=stop):
                seen.append(event)
                if event["type"] == "barrier.released":
                    stop.set()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(follow)
            run = await rs.scopes.create()
            barrier = await run.barriers.create(target=2)
            await trio.sleep(2)
            await barrier.arrive(key="a")
            await barrier.arrive(key="b")
        kinds = ["scope.created", "barrier.created", "barrier.arrived", "barrier.arrived", "barrier.released"]
        assert [event["type"] for event in seen] == kinds
        assert len({event["eventId"] for event in seen}) == 5 and flaky.watches >= 3
        listed = await rs.events.list(cursor=start["nextCursor"], limit=2)
        assert [event["eventId"] for event in listed["events"]] == [event["eventId"] for event in seen[:2]]
        with pytest.raises(CursorExpiredError):
            await rs.events.list(cursor="99999")
        await watcher.aclose()


@pytest.mark.trio
async def test_every_event_of_a_watched_page_carries_the_cursor_after_the_page(autojump_clock):
    """The `cursor` a watched event carries is its page's: resuming from that of the page's last
    event goes on from there, and resuming from that of its first skips the rest of the page, as
    the docstring says (the official clients' cursor, PROTOCOL.md 3.11)."""
    async with testing.serve() as rs:
        start = (await rs.events.list(latest=0))["nextCursor"]
        run = await rs.scopes.create()
        for key in ("a", "b"):
            await (await run.claim(key).acquire()).release()
        page = []
        async for event in rs.events.watch(cursor=start, wait_seconds=1):
            page.append(event)
            if len(page) == 5:
                break
        assert [event["type"] for event in page] == ["scope.created"] + ["claim.acquired", "claim.released"] * 2
        assert {event["cursor"] for event in page} == {(await rs.events.list(cursor=start))["nextCursor"]}
        await (await run.claim("c").acquire()).release()
        after = []
        async for event in rs.events.watch(cursor=page[0]["cursor"], wait_seconds=1):
            after.append(event["type"])
            if len(after) == 2:
                break
        assert after == ["claim.acquired", "claim.released"]


@pytest.mark.anyio
async def test_timers_and_barriers_under_asyncio():
    """Under asyncio (real time): a 1 s timer is waited for and acked; a barrier releases."""
    async with testing.serve() as rs:
        run = await rs.scopes.create()
        timer = await run.timers.create(after_seconds=1)
        fired = await timer.wait(timeout_ms=5_000)
        assert fired["fired_at"] >= timer.fire_at
        barrier = await run.barriers.create(target=1)
        assert (await barrier.arrive(key="only"))["state"] == "RELEASED"
        assert (await barrier.wait(timeout_ms=1_000))["state"] == "RELEASED"


def test_the_blocking_client_watches_with_a_thread_safe_stop_flag():
    """`Runstate.watch()` iterates without await; each event carries its page's cursor; the cursor
    is sent back on the next request; setting the stop flag ends the iteration."""
    from sdk_fakes import Scripted, ok

    pages = iter([
        {"events": [{"eventId": "ev_1", "type": "scope.created"}], "nextCursor": "1"},
        {"events": [], "nextCursor": "1"},
        {"events": [{"eventId": "ev_2", "type": "scope.cancelled"}], "nextCursor": "2"},
    ])
    transport = Scripted(lambda sent: ok(next(pages)))
    rs = runstate.Runstate(api_key="k", space_id="sp1", transport=transport)
    stop = rs.new_event()
    seen = []
    for event in rs.watch(wait_seconds=1, stop_event=stop):
        seen.append(event)
        if event["eventId"] == "ev_2":
            stop.set()
    rs.close()
    assert [(event["eventId"], event["cursor"]) for event in seen] == [("ev_1", "1"), ("ev_2", "2")]
    paths = [sent.path for sent in transport.sent]
    assert "cursor" not in paths[0] and "cursor=1" in paths[1] and "cursor=1" in paths[2]
