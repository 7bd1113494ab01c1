"""The SDK's operator tools: a forced claim release, dead letters (list, iterate, requeue, delete)
and a purge, in process and in virtual time; and claim keys `.` and `..` over real HTTP, which
the HTTP client would drop from the path as dot segments unless they are percent-encoded."""

from __future__ import annotations

import pytest
import trio

import runstate
from runstate import testing
from runstate.claims import encode_claim_key
from runstate.errors import ConflictError, LeaseLostError, NotFoundError

pytest.importorskip("runstate.server.app")


async def dead_letters(run, rs, name: str, count: int) -> str:
    """`count` messages sent to a new mailbox and rejected: its id."""
    row = await rs.mailboxes.ensure(name)
    box = run.mailbox_by_id(row["id"])
    for n in range(count):
        await box.send({"n": n})
        delivery = await box.receive()
        await delivery.reject()
    return row["id"]


@pytest.mark.trio
async def test_a_forced_release_fences_the_holder_whose_lease_is_then_lost(autojump_clock):
    async with testing.serve() as rs:
        run = await rs.scopes.create()
        lease = await run.claim("report").acquire(lease_seconds=30)
        operator = rs.new_client(holder="operator")
        view = await operator.scope(run.id).claim("report").force_release("hung")
        assert view["token"] is None and view["forced"] is True and view["holder"] == rs.holder
        assert view["generation"] == lease.generation and view["reason"] == "hung"
        with pytest.raises(LeaseLostError):
            await lease.renew()
        assert lease.is_lost
        nxt = await operator.scope(run.id).claim("report").acquire()
        assert nxt.generation == lease.generation + 1
        await nxt.release()
        with pytest.raises(ConflictError):
            await run.claim("report").force_release()
        with pytest.raises(NotFoundError):
            await run.claim("never").force_release()


@pytest.mark.trio
async def test_a_forced_release_inside_run_raises_lease_lost_from_run(autojump_clock):
    """An operator forces the key free while fn runs, and fn returns before the next renewal: run()
    raises LeaseLostError instead of reporting success, the lease is lost, and the next holder's
    generation follows."""
    async with testing.serve() as rs:
        run = await rs.scopes.create()
        operator = rs.new_client(holder="operator")
        held = []

        async def research(lease):
            held.append(lease)
            await trio.sleep(0.5)
            await operator.scope(run.id).claim("company:initech").force_release("hung")
            await trio.sleep(0.5)
            return "report"

        with pytest.raises(LeaseLostError) as caught:
            await run.claim("company:initech").run(research, lease_seconds=30)
        assert caught.value.code == "STALE_CLAIM"
        assert held[0].is_lost
        nxt = await operator.scope(run.id).claim("company:initech").acquire()
        assert nxt.generation == held[0].generation + 1
        await nxt.release()


def test_a_forced_release_inside_a_blocking_run_raises_lease_lost(module_server):
    """The blocking client's run() raises the same way, over HTTP."""
    url, key, space = module_server.base_url, module_server.api_key, module_server.space_id
    with runstate.Runstate(api_key=key, space_id=space, base_url=url, holder="worker") as rs, \
            runstate.Runstate(api_key=key, space_id=space, base_url=url, holder="operator") as operator:
        run = rs.scopes.create()

        def research(lease):
            operator.scope(run.id).claim("k").force_release()
            return "report"

        with pytest.raises(LeaseLostError):
            run.claim("k").run(research)


@pytest.mark.trio
async def test_dead_letters_are_paged_requeued_and_deleted(autojump_clock):
    async with testing.serve() as rs:
        run = await rs.scopes.create()
        mailbox = await dead_letters(run, rs, "fragile", 3)
        page = await rs.mailboxes.dead_letters(mailbox, limit=2)
        assert [letter["payload"] for letter in page["deadLetters"]] == [{"n": 2}, {"n": 1}]
        assert page["total"] == 3 and page["nextCursor"] is not None
        rest = await rs.mailboxes.dead_letters(mailbox, limit=2, cursor=page["nextCursor"])
        assert [letter["payload"] for letter in rest["deadLetters"]] == [{"n": 0}] and rest["nextCursor"] is None
        every = [letter["id"] async for letter in rs.mailboxes.iter_dead_letters(mailbox, page_size=1)]
        assert len(every) == 3 and len(set(every)) == 3
        assert (await rs.mailboxes.dead_letters(mailbox, reason="rejected", older_than_s=0))["matched"] == 3
        dry = await rs.mailboxes.requeue_dead_letters(mailbox, all=True, dry_run=True)
        assert (dry["matched"], dry["requeued"], dry["dryRun"]) == (3, 3, True)
        done = await rs.mailboxes.requeue_dead_letters(mailbox, message_ids=[every[-1]])
        assert done["requeued"] == 1 and done["remaining"] == 0
        delivery = await run.mailbox_by_id(mailbox).receive()
        assert delivery.id == done["requeuedAs"][every[-1]] and delivery.attempt == 1 and delivery.data == {"n": 0}
        await delivery.complete()
        deleted = await rs.mailboxes.delete_dead_letters(mailbox, reason="rejected")
        assert deleted["deleted"] == 2 and sorted(deleted["deletedIds"]) == sorted(every[:2])
        assert (await rs.mailboxes.dead_letters(mailbox))["total"] == 0


@pytest.mark.trio
async def test_a_purge_cancels_waiting_tasks(autojump_clock):
    async with testing.serve() as rs:
        run = await rs.scopes.create()
        row = await rs.mailboxes.ensure("work")
        ticket = await run.mailbox("work").submit({"n": 1}, key="k")
        assert (await rs.mailboxes.purge(row["id"], dry_run=True))["matched"] == 1
        assert (await rs.mailboxes.purge(row["id"], scope_id=run.id, reason="drain"))["purged"] == 1
        view = await ticket.status()
        assert view["state"] == "CANCELLED" and view["outcomeReason"] == "purged: drain"


def test_the_blocking_client_has_the_same_tools_over_http(module_server):
    with runstate.Runstate(api_key=module_server.api_key, space_id=module_server.space_id, base_url=module_server.base_url) as rs:
        run = rs.scopes.create()
        row = rs.mailboxes.ensure("blocking-tools")
        mailbox = run.mailbox_by_id(row["id"])
        mailbox.send({"n": 1})
        delivery = mailbox.receive()
        assert delivery is not None
        delivery.reject()
        assert rs.mailboxes.dead_letters(row["id"])["total"] == 1
        assert rs.mailboxes.requeue_dead_letters(row["id"], all=True)["requeued"] == 1
        assert rs.mailboxes.delete_dead_letters(row["id"], all=True)["deleted"] == 0
        assert rs.mailboxes.purge(row["id"])["purged"] == 1
        lease = run.claim("k").acquire()
        assert run.claim("k").force_release()["generation"] == lease.generation


def test_dot_keys_are_percent_encoded():
    assert encode_claim_key(".") == "%2E" and encode_claim_key("..") == "%2E%2E"
    assert encode_claim_key("...") == "..." and encode_claim_key("a/.") == "a%2F."


def test_claim_keys_dot_and_dot_dot_renew_and_release_over_http(module_server):
    """Over real HTTP: without the encoding, renew and release of `.` reach `/claims/renew` (404)
    and the claim stays held until its lease ends."""
    with runstate.Runstate(api_key=module_server.api_key, space_id=module_server.space_id, base_url=module_server.base_url) as rs:
        run = rs.scopes.create()
        for key in (".", ".."):
            lease = run.claim(key).acquire(lease_seconds=10)
            lease.renew()
            lease.release()
            again = run.claim(key).acquire(lease_seconds=10)
            assert again.generation == lease.generation + 1
            again.release()


@pytest.mark.trio
async def test_a_result_past_its_retention_says_it_expired(autojump_clock):
    """After retention, `result()` was `{'state': 'SUCCEEDED', 'outcome': None}`, which reads as a
    success with an empty result; it now says `tombstoned: True`, as `status()` does."""
    from runstate.actors import Limits
    from runstate.server.settings import Settings

    settings = Settings(api_key="test-key", space_id="default", seed=1, limits=Limits().replace(retention_s=60))
    async with testing.serve(settings=settings) as rs:
        run = await rs.scopes.create()
        await rs.mailboxes.ensure("work")
        ticket = await run.mailbox("work").submit({"n": 1}, key="k")
        delivery = await run.mailbox("work").receive()
        await delivery.complete({"payload": "report"})
        assert await ticket.result() == {"state": "SUCCEEDED", "outcome": "report", "reason": None}
        await anyio_sleep(61)
        expired = await ticket.result()
        assert expired == {"state": "SUCCEEDED", "outcome": None, "reason": None, "tombstoned": True}
        assert (await ticket.status())["tombstoned"] is True


async def anyio_sleep(seconds: float) -> None:
    import anyio

    await anyio.sleep(seconds)


@pytest.mark.trio
async def test_receive_waits_its_whole_wait_past_the_servers_cap(autojump_clock):
    """receive(wait_ms=60000) gave up after 30 s (the server's cap) with nothing said; it now waits
    the whole 60 s, one long poll after another, and a message sent at 45 s is delivered."""
    import trio

    async with testing.serve() as rs:
        run = await rs.scopes.create()
        await rs.mailboxes.ensure("work")
        box = run.mailbox("work")
        started = trio.current_time()
        assert await box.receive(wait_ms=60_000) is None
        assert trio.current_time() - started == pytest.approx(60, abs=0.5)
        got = []
        async with trio.open_nursery() as nursery:
            async def wait() -> None:
                got.append(await box.receive(wait_ms=60_000))

            nursery.start_soon(wait)
            await trio.sleep(45)
            await box.send({"late": True})
        assert got[0] is not None and got[0].data == {"late": True}

