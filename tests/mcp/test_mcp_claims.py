"""Claims through `runstate mcp`: real processes over stdio against a real server, 5 s leases.

Two agents claim one key: the second hears who holds it, and waits (the holder's status shows
who waits for its key); an agent killed outright
loses its claim only when its lease runs out, and the next one gets the next generation; a claim
outlives three lease lengths while its session lives; a lost claim is named in the next answer.
"""

from __future__ import annotations

import time

import anyio
import pytest

from .agents import LEASE_SECONDS, agent, agents, eventually, unique

pytestmark = [pytest.mark.e2e, pytest.mark.anyio]


async def test_the_second_agent_hears_who_holds_the_key_then_waits_for_it(module_server):
    """B's claim answers "held by" A's holder; B's waiting claim gets the key as soon as A releases it."""
    run = unique("run")
    async with agents(module_server, run, unique("agent-a"), unique("agent-b")) as (a, b):
        mine = await a.ok("claim", key="file:src/app.py")
        assert mine["acquired"] is True and mine["generation"] == 1 and mine["token"]

        busy = await b.ok("claim", key="file:src/app.py")
        assert busy["acquired"] is False and busy["held_by"] == a.holder and busy["generation"] == 1
        assert f"held by {a.holder}" in busy["message"]

        started = time.monotonic()
        timed_out = await b.ok("claim", key="file:src/app.py", wait_seconds=1)
        assert timed_out["acquired"] is False and timed_out["held_by"] == a.holder and timed_out["waited_seconds"] == 1
        assert time.monotonic() - started >= 1

        got: dict = {}

        async def wait_for_it() -> None:
            got.update(await b.ok("claim", key="file:src/app.py", wait_seconds=30))

        async with anyio.create_task_group() as group:
            group.start_soon(wait_for_it)
            await eventually(lambda: _waits(b, "file:src/app.py"), 10)
            # The holder sees who waits for its key: the server's parked acquire, with B's name.
            status = await a.ok("status")
            assert [c["waiting"] for c in status["claims"] if c["key"] == "file:src/app.py"] == [[b.holder]]
            assert any(line.startswith(f"1 call(s) wait for claim file:src/app.py ({b.holder}, oldest first): held by {a.holder}")
                       for line in status["waiting"]), status["waiting"]
            released = time.monotonic()
            assert (await a.ok("release", key="file:src/app.py"))["released"] is True
        assert got["acquired"] is True and got["generation"] == 2
        assert time.monotonic() - released < 3, "a waiting claim is served when the key is released, not later"
        assert [c["key"] for c in (await b.ok("held"))["claims"]] == ["file:src/app.py"]
        assert (await a.ok("held"))["claims"] == []


async def _waits(b, key: str) -> bool:
    """B's own status says it waits for `key`, and the server holds its acquire (one call in all)."""
    status = await b.ok("status")
    return any(line.startswith(f"you wait for claim {key} (1 of your calls; 1 in all: {b.holder}, oldest first)")
               for line in status["waiting"])


async def test_a_killed_agents_claim_goes_to_the_next_with_the_next_generation_when_its_lease_ends(module_server):
    """SIGKILL gives nothing back: B gets the key once A's lease runs out (not before), at generation 2."""
    run = unique("run")
    async with agents(module_server, run, unique("agent-a"), unique("agent-b")) as (a, b):
        assert (await a.ok("claim", key="file:README.md"))["generation"] == 1
        killed = a.kill()
        got = await b.ok("claim", key="file:README.md", wait_seconds=30)
        waited = time.monotonic() - killed
        assert got["acquired"] is True and got["generation"] == 2
        # Served when A's lease ran out on the server, at most a lease after its last renewal.
        assert waited <= LEASE_SECONDS + 3, waited
        events = [(e["type"], e.get("generation")) for e in (await b.ok("status"))["recent_events"] if e["on"] == "file:README.md"]
        assert events == [("claim.acquired", 1), ("claim.expired", 1), ("claim.taken_over", 2)], "expired, not released"


async def test_a_claim_stays_held_for_three_lease_lengths_while_its_session_lives(module_server):
    """Nobody renews by hand: A's claim is still generation 1 after B waited 3 lease lengths for it."""
    run = unique("run")
    async with agents(module_server, run, unique("agent-a"), unique("agent-b")) as (a, b):
        first = await a.ok("claim", key="company:acme")
        started = time.monotonic()
        busy = await b.ok("claim", key="company:acme", wait_seconds=3 * LEASE_SECONDS + 1)
        assert time.monotonic() - started >= 3 * LEASE_SECONDS
        assert busy["acquired"] is False and busy["held_by"] == a.holder and busy["generation"] == 1
        held = (await a.ok("held"))["claims"]
        assert [(c["key"], c["generation"], c["token"]) for c in held] == [("company:acme", 1, first["token"])]
        assert held[0]["lease_ends_at"] > first["lease_ends_at"], "the lease was renewed"
        status = await b.ok("status")
        assert [(c["key"], c["held_by"]) for c in status["claims"]] == [("company:acme", a.holder)]


async def test_a_lost_claim_is_named_in_the_next_answer_once(module_server):
    """An operator force-releases A's claim: A's next answer, whatever the tool, says it was lost."""
    run = unique("run")
    async with agent(module_server, run, unique("agent-a")) as a:
        await a.ok("claim", key="file:setup.py")
        run_id = (await a.ok("status"))["run"]["id"]
        with module_server.client() as http:
            answer = http.post(f"/v1/spaces/{module_server.space_id}/claims/file%3Asetup.py/force-release",
                               json={"scopeId": run_id, "reason": "holder hung"})
            assert answer.status_code == 200, answer.text

        async def lost() -> list:
            return (await a.ok("held")).get("lost", [])

        losses = await eventually(lost, 3 * LEASE_SECONDS)
        assert [(loss["kind"], loss["key"], loss["generation"]) for loss in losses] == [("claim", "file:setup.py", 1)]
        assert "no longer hold file:setup.py" in losses[0]["message"]
        again = await a.ok("held")
        assert again["claims"] == [] and "lost" not in again


async def test_releasing_a_claim_lost_before_its_renewal_noticed_says_it_was_lost(module_server):
    """An operator force-releases A's claim and B takes it (generation 2); A releases it before a
    renewal of its 60 s lease finds out. A is told that it had lost the key, not that it released
    it, and the key stays B's."""
    run = unique("run")
    async with agents(module_server, run, unique("agent-a"), unique("agent-b")) as (a, b):
        await a.ok("claim", key="file:setup.py", lease_seconds=60)
        run_id = (await a.ok("status"))["run"]["id"]
        with module_server.client() as http:
            answer = http.post(f"/v1/spaces/{module_server.space_id}/claims/file%3Asetup.py/force-release",
                               json={"scopeId": run_id, "reason": "holder hung"})
            assert answer.status_code == 200, answer.text
        assert (await b.ok("claim", key="file:setup.py"))["generation"] == 2

        body, error = await a.call("release", key="file:setup.py")
        assert error and "released" not in body, body
        assert "file:setup.py was lost" in body["error"], body
        assert [(loss["kind"], loss["key"], loss["generation"]) for loss in body["lost"]] == [("claim", "file:setup.py", 1)]
        assert "lost" not in await a.ok("held")
        held_by = {claim["key"]: claim["held_by"] for claim in (await b.ok("status"))["claims"]}
        assert held_by == {"file:setup.py": b.holder}


async def test_the_status_summary_counts_every_claim_and_holder_not_only_the_rows_listed(module_server):
    """55 holders hold a claim each: status lists 50 rows of each, and says so, but its summary
    counts all 55."""
    run = unique("run")
    async with agent(module_server, run, unique("agent-a")) as a:
        run_id = (await a.ok("status"))["run"]["id"]
        with module_server.client() as http:
            for n in range(55):
                body = {"scopeId": run_id, "key": f"file:{n:02d}.py", "holder": f"worker-{n:02d}",
                        "holderSession": f"worker-{n:02d}-session", "leaseSeconds": 60}
                answer = http.post(f"/v1/spaces/{module_server.space_id}/claims", json=body)
                assert answer.status_code in (200, 201), answer.text
        status = await a.ok("status")
        assert (len(status["claims"]), status["claims_not_shown"], len(status["holders"])) == (50, 5, 50)
        assert "55 holder(s) hold something" in status["summary"] and "55 claim(s) held." in status["summary"], status["summary"]
