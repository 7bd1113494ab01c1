"""Barriers, timers, task groups, events and watch through the official `runstate-sdk==0.2.0`
client, against a real `runstate serve` process (real time, every wait bounded)."""

from __future__ import annotations

import uuid

import pytest

from ..servers import ServerProcess
from .official_scripts import Clients, clients  # noqa: F401 - the fixture

pytestmark = [pytest.mark.compat, pytest.mark.e2e]


def unique(name: str) -> str:
    return f"{name}-{uuid.uuid4().hex[:8]}"


def test_barriers_release_at_their_target_and_are_cancelled_with_their_run(clients: Clients):
    """create / arrive / status / wait; a later arrival is BARRIER_RELEASED; wait on a barrier of a
    cancelled run raises BARRIER_CANCELLED."""
    result = clients.run(
        """
        async def main():
            rs = AsyncRunstate()
            run = await rs.scopes.create()
            barrier = await run.barriers.create(target=2)
            first = await barrier.arrive(key="planner-1")
            again = await barrier.arrive(key="planner-1")
            waiter = asyncio.create_task(barrier.wait(timeout_ms=10_000))
            await asyncio.sleep(0.5)
            assert not waiter.done()
            released = await barrier.arrive(key="planner-2")
            waited = await waiter
            try:
                await barrier.arrive(key="planner-3")
                late = None
            except ConflictError as error:
                late = [error.code, error.status]
            other = await run.barriers.create(target=3)
            await run.cancel()
            try:
                await other.wait(timeout_ms=5_000)
                cancelled = None
            except ConflictError as error:
                cancelled = [error.code, error.status]
            status = await run.barriers.get(barrier.id).status()
            emit(first=first, again=again, released=released, waited=waited, late=late, cancelled=cancelled, status=status)

        asyncio.run(main())
        """
    )
    assert result["first"]["arrived"] == 1 and result["again"]["arrived"] == 1
    assert result["released"]["state"] == "RELEASED" and result["waited"]["state"] == "RELEASED"
    assert result["late"] == ["BARRIER_RELEASED", 409]
    assert result["cancelled"] == ["BARRIER_CANCELLED", 409]
    assert result["status"]["state"] == "RELEASED" and result["status"]["epoch"] == 1


def test_timers_fire_once_are_acked_by_wait_and_can_be_cancelled(clients: Clients):
    """create(after_seconds=) and create(at=) fire and `wait` acks them; two handles in one scope
    each find their own timer; a cancelled timer never fires (its wait times out)."""
    result = clients.run(
        """
        from datetime import datetime, timedelta, timezone

        async def main():
            rs = AsyncRunstate()
            run = await rs.scopes.create()
            started = time.time()
            soon = await run.timers.create(after_seconds=1)
            at = (datetime.now(timezone.utc) + timedelta(seconds=2)).isoformat().replace("+00:00", "Z")
            later = await run.timers.create(at=at)
            first, second = await asyncio.gather(soon.wait(timeout_ms=10_000), later.wait(timeout_ms=10_000))
            cancelled = await run.timers.create(after_seconds=1)
            view = await cancelled.cancel()
            try:
                await cancelled.wait(timeout_ms=2_500)
                timed_out = False
            except WaitTimeoutError:
                timed_out = True
            emit(
                soon_after=first["fired_at"].timestamp() - soon.fire_at.timestamp(),
                later_after=second["fired_at"].timestamp() - later.fire_at.timestamp(),
                soon_fire=soon.fire_at.timestamp() - started,
                cancelled=view["state"], timed_out=timed_out, ids=[soon.id, later.id],
            )

        asyncio.run(main())
        """
    )
    assert 0 <= result["soon_after"] < 1 and 0 <= result["later_after"] < 1
    assert 0.5 < result["soon_fire"] < 2
    assert result["cancelled"] == "CANCELLED" and result["timed_out"] is True
    for timer_id in result["ids"]:
        assert clients.get(f"/timers/{timer_id}").json()["state"] == "ACKED"


def test_task_groups_follow_their_conditions(clients: Clients):
    """N_ACCEPTED with threshold 2 succeeds at the second accept; a repeated verdict is harmless,
    the other verdict a ConflictError; ALL_TERMINAL with expected_members seals itself and
    succeeds once its member is completed by a worker; seal on a finalized group is a conflict;
    join_task after sealing too."""
    result = clients.run(
        """
        async def main():
            rs = AsyncRunstate()
            run = await rs.scopes.create()
            await rs.mailboxes.ensure(ARGS["mailbox"], mode="WORK")
            group = await run.groups.create(mailbox=ARGS["mailbox"], condition="N_ACCEPTED", threshold=2, parent_scope_id=run.id)
            tickets = [await group.submit({"n": n}, key=f"answer-{n}") for n in range(3)]
            outsider = await run.mailbox(ARGS["mailbox"]).submit({"n": "outside"}, key="outsider")
            joined_open = await group.join_task(outsider.id)
            await group.accept(tickets[0].id)
            await group.accept(tickets[0].id)
            await group.reject(tickets[1].id)
            try:
                await group.accept(tickets[1].id)
                conflict = None
            except ConflictError as error:
                conflict = [error.code, error.status]
            before = await group.status()
            await group.accept(tickets[2].id)
            done = await group.wait(timeout_ms=5_000)
            try:
                await group.seal()
                sealed = None
            except ConflictError as error:
                sealed = error.code
            closed = await group.close()

            single = await run.groups.create(mailbox=ARGS["mailbox"], condition="ALL_TERMINAL", expected_members=1)
            member = await single.submit({"q": "only"}, key="only")
            state = await single.status()
            gate = rs.scope(state["scopeId"])
            delivery = await gate.mailbox(ARGS["mailbox"]).receive(wait_ms=2_000)
            await delivery.complete(result={"payload": "fine"})
            outcome = await single.wait(timeout_ms=5_000)
            outside = await run.mailbox(ARGS["mailbox"]).submit({"x": 1}, key="outside")
            try:
                await single.join_task(outside.id)
                joined = None
            except ConflictError as error:
                joined = error.code
            emit(joined_open=[m["taskId"] for m in joined_open["members"]], outsider=outsider.id, before=before["state"], conflict=conflict, done=done, sealed=sealed, closed=closed,
                 sealed_state=state["state"], outcome=outcome, joined=joined, parent=state["parentScopeId"], run=run.id,
                 member=member.id, member_result=await member.result(timeout_ms=2_000))

        asyncio.run(main())
        """,
        mailbox=unique("answers"),
    )
    assert result["before"] == "OPEN" and result["conflict"] == ["CONFLICT", 409]
    assert len(result["joined_open"]) == 4 and result["joined_open"][-1] == result["outsider"]
    assert result["done"] == {"outcome": "SUCCEEDED", "outcomeReason": "threshold_reached"}
    assert result["sealed"] == "CONFLICT" and result["closed"]["state"] == "FINALIZED"
    assert result["sealed_state"] == "SEALED" and result["parent"] is None
    assert result["outcome"] == {"outcome": "SUCCEEDED", "outcomeReason": "all_terminal"}
    assert result["joined"] == "CONFLICT"
    assert result["member_result"]["state"] == "SUCCEEDED"


def test_events_list_and_watch(clients: Clients):
    """events.list() pages the log; events.watch() yields what happens after its cursor, filtered
    by type and scope, holding between events, each event once."""
    result = clients.run(
        """
        async def main():
            rs = AsyncRunstate()
            page = await rs.events.list(limit=1000)
            cursor = page["nextCursor"]
            run = await rs.scopes.create()
            seen = []

            async def follow():
                async for event in rs.events.watch(cursor=cursor, scope_id=run.id, types=["barrier.arrived", "barrier.released"], wait_seconds=5):
                    seen.append(event)
                    if event["type"] == "barrier.released":
                        return

            watcher = asyncio.create_task(follow())
            barrier = await run.barriers.create(target=2)
            await asyncio.sleep(1)
            await barrier.arrive(key="a")
            await asyncio.sleep(0.5)
            await barrier.arrive(key="b")
            await asyncio.wait_for(watcher, 15)
            listed = await rs.events.list(cursor=cursor)
            emit(seen=seen, listed=listed, run=run.id, barrier=barrier.id)

        asyncio.run(main())
        """,
        timeout_s=60,
    )
    assert [event["type"] for event in result["seen"]] == ["barrier.arrived", "barrier.arrived", "barrier.released"]
    assert len({event["eventId"] for event in result["seen"]}) == 3
    assert all(event["aggregate"] == {"type": "barrier", "id": result["barrier"]} for event in result["seen"])
    listed = [event["type"] for event in result["listed"]["events"]]
    assert listed[:2] == ["scope.created", "barrier.created"] and listed.count("barrier.arrived") == 2


def test_an_empty_watch_is_held_under_the_clients_timeout(clients: Clients):
    """The 0.2.0 client asks for waitSeconds=30: the server holds it 8 s at most, under the
    client's own 10 s timeout, and answers an empty page with nextCursor (it watches a type no
    call here makes)."""
    result = clients.run(
        """
        async def main():
            rs = AsyncRunstate()
            page = await rs.events.list(limit=1000)
            stop = asyncio.Event()
            started = time.monotonic()
            got = []

            async def follow():
                async for event in rs.events.watch(cursor=page["nextCursor"], types=["timer.acked"], wait_seconds=30, stop_event=stop):
                    got.append(event)

            task = asyncio.create_task(follow())
            await asyncio.sleep(9)
            stop.set()
            await asyncio.wait_for(task, 15)
            emit(got=got, elapsed=time.monotonic() - started)

        asyncio.run(main())
        """,
        timeout_s=60,
    )
    assert result["got"] == [] and 9 <= result["elapsed"] < 20


def test_a_watch_resumed_after_a_restart_sees_no_gap_and_no_duplicate(official_client, tmp_path):
    """Events read up to a cursor before a kill, then read from that cursor after the restart:
    together, every event once, in order, the ones made after the restart included."""
    data = str(tmp_path / "data")
    script = """
        async def main():
            rs = AsyncRunstate()
            cursor = ARGS.get("cursor")
            run = await rs.scopes.create()
            barrier = await run.barriers.create(target=2)
            await barrier.arrive(key=ARGS["key"])
            events = []
            while True:
                page = await rs.events.list(cursor=cursor, limit=2)
                events.extend(page["events"])
                if page["nextCursor"] == cursor:
                    break
                cursor = page["nextCursor"]
            emit(events=events, cursor=cursor)

        asyncio.run(main())
    """
    server = ServerProcess("--data-dir", data).start()
    try:
        before = Clients(official_client, server).run(script, key="a")
    finally:
        server.kill()
    server = ServerProcess("--data-dir", data).start()
    try:
        after = Clients(official_client, server).run(script, key="b", cursor=before["cursor"])
    finally:
        server.stop()
    ids = [event["eventId"] for event in before["events"] + after["events"]]
    assert len(ids) == len(set(ids)) == 6
    assert [int(eid.split("_")[1]) for eid in ids] == list(range(1, 7))


def test_diagnostics_run_workers_and_waits(clients: Clients):
    """diagnostics.run() returns the run's view, workers() its claim holders with their keys,
    waits() the calls held now."""
    result = clients.run(
        """
        async def main():
            rs = AsyncRunstate(holder="diag-worker")
            run = await rs.scopes.create()
            lease = await run.claim("company:acme").acquire(lease_seconds=30)
            view = await rs.diagnostics.run(run.id)
            workers = await rs.diagnostics.workers(run.id)
            waits = await rs.diagnostics.waits()
            await lease.release()
            emit(view=view, workers=workers, waits=waits, run=run.id)

        asyncio.run(main())
        """
    )
    assert result["view"]["scopeId"] == result["run"]
    (worker,) = result["workers"]
    assert worker["holder"] == "diag-worker" and worker["keys"] == ["company:acme"] and worker["earliestLeaseExpiry"]
    assert isinstance(result["waits"]["waits"], list)
