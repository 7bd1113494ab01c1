"""What a client can read about a run and a refusal without asking twice, against a real kernel
in process, in virtual time: the run's claims (`run.claims()`) and tasks (`run.tasks()`), the
space's newest events (`rs.events.list(latest=)`), and the facts of a refusal (`err.details`:
who holds a claim and until when), whether the refusal came alone or inside a batch.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import trio

import runstate
import runstate.testing
from sdk_fakes import error, make_client, ok

pytest.importorskip("runstate.server.app")


@pytest.mark.trio
async def test_claims_lists_who_holds_each_key_of_the_run_without_tokens(autojump_clock):
    """Two holders' claims in one run, and one in another run: claims() gives the run's two, with
    holder, generation and lease end, never a token; limit cuts the list and says so."""
    async with runstate.testing.serve() as rs:
        run, other = await rs.scopes.create(name="reads"), await rs.scopes.create()
        mine = await run.claim("file:a.py").acquire(lease_seconds=30)
        theirs = await rs.new_client(holder="agent-b").scope(run.id).claim("file:b.py").acquire(lease_seconds=60)
        await other.claim("file:c.py").acquire()
        page = await run.claims()
        assert page["scopeId"] == run.id and page["truncated"] is False
        rows = sorted(page["claims"], key=lambda row: row["key"])
        assert [(r["key"], r["holder"], r["generation"], r["leaseSeconds"]) for r in rows] == [
            ("file:a.py", rs.holder, 1, 30), ("file:b.py", "agent-b", 1, 60),
        ]
        assert rows[0]["leaseExpiresAt"] == runstate_stamp(mine.expires_at)
        assert rows[1]["leaseExpiresAt"] == runstate_stamp(theirs.expires_at)
        assert all("token" not in row for row in rows)
        short = await run.claims(limit=1)
        assert len(short["claims"]) == 1 and short["truncated"] is True
        await mine.release()
        assert [row["key"] for row in (await run.claims())["claims"]] == ["file:b.py"]


@pytest.mark.trio
async def test_tasks_lists_the_runs_tasks_newest_first(autojump_clock):
    """Three tasks submitted one after another: tasks() gives them newest first with their key and
    state (one taken is RUNNING); limit keeps the newest."""
    async with runstate.testing.serve() as rs:
        await rs.mailboxes.ensure("research", mode="WORK")
        run = await rs.scopes.create()
        for company in ("acme", "globex", "initech"):
            await run.mailbox("research").submit({"company": company}, key=f"research:{company}")
            await trio.sleep(1)
        taken = await run.mailbox("research").receive()
        page = await run.tasks()
        assert [(t["taskKey"], t["state"]) for t in page["tasks"]] == [
            ("research:initech", "QUEUED"), ("research:globex", "QUEUED"), ("research:acme", "RUNNING"),
        ]
        assert page["tasks"][2]["id"] == taken.task_id and page["truncated"] is False
        newest = await run.tasks(limit=2)
        assert [t["taskKey"] for t in newest["tasks"]] == ["research:initech", "research:globex"] and newest["truncated"]


@pytest.mark.anyio
async def test_a_limit_out_of_range_is_refused_before_anything_is_sent():
    """limit must be 1 to 1000, as the server says; a bad one sends nothing."""
    rs, transport = make_client(lambda sent: error(500, "INTERNAL"))
    for limit in (0, 1001, True, "5"):
        with pytest.raises(runstate.ValidationError, match="limit must be an integer from 1 to 1000"):
            await rs.scope("sc_1").claims(limit=limit)  # type: ignore[arg-type]
        with pytest.raises(runstate.ValidationError):
            await rs.scope("sc_1").tasks(limit=limit)  # type: ignore[arg-type]
    assert transport.sent == []


@pytest.mark.trio
async def test_events_latest_gives_the_newest_events_and_the_cursor_after_them(autojump_clock):
    """latest=2 gives the two newest events, oldest first, and a cursor from which nothing older
    comes back; latest=0 the cursor alone; latest with a cursor or a limit is refused on this side."""
    async with runstate.testing.serve() as rs:
        run = await rs.scopes.create()
        for key in ("k1", "k2", "k3"):
            await (await run.claim(key).acquire()).release()
        page = await rs.events.list(latest=2)
        assert [(e["type"], e["aggregate"]["id"]) for e in page["events"]] == [("claim.acquired", "k3"), ("claim.released", "k3")]
        assert (await rs.events.list(cursor=page["nextCursor"]))["events"] == []
        assert (await rs.events.list(latest=0)) == {"events": [], "nextCursor": page["nextCursor"]}
        with pytest.raises(ValueError, match="not both"):
            await rs.events.list(cursor=page["nextCursor"], latest=2)
        with pytest.raises(ValueError, match="give limit without it"):  # (the server refuses the two together)
            await rs.events.list(latest=2, limit=5)


@pytest.mark.trio
async def test_claim_held_says_who_holds_the_key_and_until_when(autojump_clock):
    """A refused acquire's ConflictError carries the holder, generation and lease end in
    `details`; so does the WaitTimeoutError of a wait that ran out (from its last try)."""
    async with runstate.testing.serve() as rs:
        run = await rs.scopes.create()
        held = await rs.new_client(holder="agent-a").scope(run.id).claim("file:app.py").acquire(lease_seconds=60)
        with pytest.raises(runstate.ConflictError) as refused:
            await run.claim("file:app.py").acquire()
        expected = {"holder": "agent-a", "generation": 1, "leaseExpiresAt": runstate_stamp(held.expires_at)}
        assert refused.value.code == "CLAIM_HELD" and refused.value.details == expected
        with pytest.raises(runstate.WaitTimeoutError) as timed_out:
            await run.claim("file:app.py").acquire(wait=True, timeout_ms=2000)
        # Renewed meanwhile (at most once in 2 s of a 60 s lease): the same holder and generation.
        assert {k: timed_out.value.details[k] for k in ("holder", "generation")} == {"holder": "agent-a", "generation": 1}
        assert timed_out.value.details["leaseExpiresAt"] >= expected["leaseExpiresAt"]


@pytest.mark.trio
async def test_a_refusal_inside_a_batch_keeps_its_details(autojump_clock):
    """Five views claim one key at the same moment: the first goes alone and wins, the other four
    go out in one batch and each gets its own CLAIM_HELD naming the winner."""
    async with runstate.testing.serve() as rs:
        run = await rs.scopes.create()
        views = [rs.with_holder(f"agent-{n}") for n in range(5)]
        outcomes: dict[int, Any] = {}

        async def claim(n: int) -> None:
            try:
                outcomes[n] = await views[n].scope(run.id).claim("file:shared.py").acquire()
            except runstate.ConflictError as err:
                outcomes[n] = err

        async with trio.open_nursery() as nursery:
            for n in range(5):
                nursery.start_soon(claim, n)
        winners = [n for n, got in outcomes.items() if isinstance(got, runstate.ClaimLease)]
        assert len(winners) == 1
        assert rs._ctx.requester.coalescer.batched_calls == 4
        for n, got in outcomes.items():
            if n != winners[0]:
                assert got.details["holder"] == f"agent-{winners[0]}" and got.details["generation"] == 1


@pytest.mark.trio
async def test_the_runs_read_says_who_waits_for_each_claim(autojump_clock):
    """Two holders wait (acquire with wait=True) for a key another holds: the run's diagnostics
    list the parked acquires on that key with the waiting holders, oldest first, and the space's
    waits too; once the key is released and taken, nothing waits."""
    async with runstate.testing.serve() as rs:
        run = await rs.scopes.create()
        held = await rs.new_client(holder="agent-a").scope(run.id).claim("file:app.py").acquire()
        got: list[Any] = []

        async def wait_for_it(holder: str) -> None:
            got.append(await rs.new_client(holder=holder).scope(run.id).claim("file:app.py").acquire(wait=True, timeout_ms=60_000))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(wait_for_it, "agent-b")
            await trio.sleep(1)
            nursery.start_soon(wait_for_it, "agent-c")
            await trio.sleep(1)
            claims = [row for row in (await rs.diagnostics.run(run.id))["parked"] if row["on"] == "claim"]
            assert claims == [{"on": "claim", "calls": 2, "scopeId": run.id, "key": "file:app.py", "holders": ["agent-b", "agent-c"]}]
            assert [row for row in (await rs.diagnostics.waits())["waits"] if row["on"] == "claim"] == claims
            await held.release()
            await trio.sleep(1)
            assert [row for row in (await rs.diagnostics.run(run.id))["parked"] if row["on"] == "claim"] == [
                {"on": "claim", "calls": 1, "scopeId": run.id, "key": "file:app.py", "holders": ["agent-c"]}
            ]
            await got[0].release()
        assert [lease.generation for lease in got] == [2, 3]
        assert [row for row in (await rs.diagnostics.run(run.id))["parked"] if row["on"] == "claim"] == []


@pytest.mark.anyio
async def test_an_envelope_without_details_gives_an_empty_dict_and_a_malformed_one_is_dropped():
    """No `details`, or details that are not an object: `details` is {} and the code still counts."""
    for envelope in ({"code": "CLAIM_HELD", "message": "held"}, {"code": "CLAIM_HELD", "message": "held", "details": [1, 2]}):
        rs, _ = make_client(lambda sent, body=json.dumps({"error": envelope}).encode(): (409, {}, body))
        with pytest.raises(runstate.ConflictError) as refused:
            await rs.scope("sc_1").claim("k").acquire()
        assert refused.value.details == {} and refused.value.code == "CLAIM_HELD"
    assert runstate.map_error("CONFLICT", 409, "taken", details={"id": "pp_1"}).details == {"id": "pp_1"}
    assert runstate.RunstateError("X", 0, "made here").details == {}


def runstate_stamp(moment) -> str:
    """A lease end as the server writes it: milliseconds and Z."""
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


@pytest.mark.trio
async def test_iter_claims_and_iter_tasks_read_every_page_as_claims_come_and_go(autojump_clock):
    """Seven claims and seven tasks, read two a page: iter_claims() gives every key once in the
    order of the keys although claims are taken and released while it reads; iter_tasks() every
    task once, newest first, a task submitted while it reads left for the next reading. A page
    carries nextCursor, None on the last."""
    async with runstate.testing.serve() as rs:
        await rs.mailboxes.ensure("research", mode="WORK")
        run = await rs.scopes.create()
        leases = {key: await run.claim(key).acquire(lease_seconds=60) for key in ("k4", "k2", "k6", "k1", "k5", "k3", "k7")}
        seen = []
        async for claim in run.iter_claims(page_size=2):
            seen.append(claim["key"])
            if claim["key"] == "k2":  # between pages: one shown already and one not yet reached go
                await leases["k1"].release()
                await leases["k5"].release()
        assert seen == ["k1", "k2", "k3", "k4", "k6", "k7"]
        first = await run.claims(limit=2)
        assert first["truncated"] is True and first["nextCursor"] is not None
        last = await run.claims(limit=2, cursor=first["nextCursor"])
        assert [c["key"] for c in last["claims"]] == ["k4", "k6"]

        made = []
        for n in range(7):
            made.append((await run.mailbox("research").submit({"n": n}, key=f"t{n}")).id)
            await trio.sleep(0.001)
        listed = []
        async for task in run.iter_tasks(page_size=2):
            listed.append(task["id"])
            if len(listed) == 3:
                await run.mailbox("research").submit({"n": "late"}, key="late")
        assert listed == made[::-1]
        assert (await run.tasks(limit=1000))["nextCursor"] is None


@pytest.mark.anyio
async def test_iterating_against_a_server_without_paging_reads_its_one_page_once():
    """A server that writes no nextCursor (its listing is one page): iter_claims() and iter_tasks()
    give that page's rows and stop, rather than asking for the first page again forever."""
    def answer(sent):  # type: ignore[no-untyped-def]
        if sent.suffix.startswith("/scopes/sc_1/claims"):
            return ok({"scopeId": "sc_1", "claims": [{"key": "a"}, {"key": "b"}], "truncated": False})
        return ok({"scopeId": "sc_1", "tasks": [{"id": "tk_1"}], "truncated": False})

    rs, transport = make_client(answer)
    assert [claim["key"] async for claim in rs.scope("sc_1").iter_claims()] == ["a", "b"]
    assert [task["id"] async for task in rs.scope("sc_1").iter_tasks()] == ["tk_1"]
    assert [sent.suffix for sent in transport.sent] == ["/scopes/sc_1/claims?limit=100", "/scopes/sc_1/tasks?limit=100"]
