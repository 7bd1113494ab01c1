"""The batch route and the receive of many (our extensions), over HTTP in process, in virtual time.

A batch carries commands of one space, each answered as it would be alone (status, body, or the
error envelope's fields), in order per key; it is bounded, refuses waits, and each operation's
idempotencyKey replays its first answer. `recv-many` leases up to `maxMessages` deliveries in one
turn, and waits for the first like a recv.
"""

from __future__ import annotations

import pytest
import trio

from .asgi_client import AsgiClient, client  # noqa: F401 - the fixture

pytestmark = pytest.mark.trio


def acquire(run: str, key: str, holder: str, **fields: object) -> dict:
    body = {"scopeId": run, "key": key, "holder": holder, "holderSession": f"s-{holder}", "leaseSeconds": 30, **fields}
    return {"method": "POST", "path": "/claims", "body": body}


def release(key: str, token: str) -> dict:
    return {"method": "POST", "path": f"/claims/{key}/release", "body": {"token": token}}


async def batch(client: AsgiClient, *operations: dict) -> list[dict]:
    response = await client.post("/batch", {"operations": list(operations)})
    assert response.status == 200, response
    return response.json["results"]


async def test_each_operation_is_answered_as_alone_and_a_refusal_changes_nothing_for_the_others(client, autojump_clock):
    """Successes, a held claim, a stale token, an unknown route and a bad field in one batch:
    each gets the status and body (or envelope) the route alone gives, the rest run."""
    run, mailbox = await client.run(), await client.mailbox()
    held = (await client.post("/claims", acquire(run, "busy", "other")["body"])).json
    results = await batch(
        client,
        acquire(run, "free", "me"),
        acquire(run, "busy", "me"),
        release("busy", "not-the-token"),
        {"method": "POST", "path": "/nowhere", "body": {}},
        {"method": "POST", "path": f"/mailboxes/{mailbox}/messages", "body": {"scopeId": run, "payload": {"n": 1}}},
        {"method": "POST", "path": "/tasks", "body": {"scopeId": run, "mailboxId": mailbox, "taskKey": "t1", "input": 1}},
        acquire(run, "k" * 600, "me"),
        "not an object",
    )
    assert [r["status"] for r in results] == [200, 409, 409, 400, 201, 201, 400, 400]
    assert results[0]["body"]["key"] == "free" and results[0]["body"]["generation"] == 1
    assert results[1]["error"]["code"] == "CLAIM_HELD" and results[1]["error"]["details"]["holder"] == "other"
    assert results[1]["retryAfter"] == pytest.approx(30, abs=0.01)  # the holder's lease, as Retry-After alone
    assert results[2]["error"]["code"] == "STALE_CLAIM"
    assert "not a command of a space" in results[3]["error"]["message"]
    assert results[4]["body"]["id"].startswith("ms_") and results[5]["body"]["taskId"].startswith("tk_")
    assert results[6]["error"]["code"] == "VALIDATION_FAILED" and "key" in results[6]["error"]["message"]
    assert results[7]["error"]["message"].startswith("operations[7] must be an object")
    assert all(set(r["error"]) >= {"code", "message", "requestId"} for r in results if "error" in r)
    # The held claim is untouched by the stale release; the free one is held by `me`.
    view = (await client.get(f"/scopes/{run}/claims")).json
    holders = {c["key"]: c["holder"] for c in view["claims"]}
    assert holders == {"busy": "other", "free": "me"} and held["generation"] == 1


async def test_operations_on_one_key_run_in_the_order_given(client, autojump_clock):
    """A release then an acquire of the same key hands it over within the batch; the other way
    round, the acquire finds it held and only the release takes effect."""
    run = await client.run()
    first = (await client.post("/claims", acquire(run, "k", "a")["body"])).json
    handed = await batch(client, release("k", first["token"]), acquire(run, "k", "b"))
    assert [r["status"] for r in handed] == [200, 200]
    assert handed[1]["body"]["holder"] == "b" and handed[1]["body"]["generation"] == 2
    second = handed[1]["body"]
    late = await batch(client, acquire(run, "k", "c"), release("k", second["token"]))
    assert [r["status"] for r in late] == [409, 200]
    assert late[0]["error"]["code"] == "CLAIM_HELD"
    again = (await client.post("/claims", acquire(run, "k", "c")["body"])).json
    assert again["generation"] == 3


async def test_many_renewals_in_one_request_answer_per_lease(client, autojump_clock):
    """Claims, deliveries and grants renewed together: each answer is that lease's own."""
    run, mailbox = await client.run(), await client.mailbox()
    claims = [(await client.post("/claims", acquire(run, f"k{i}", "me")["body"])).json for i in range(3)]
    await client.post(f"/mailboxes/{mailbox}/messages", {"scopeId": run, "payload": 1})
    delivery = (await client.recv(mailbox, run)).json
    pool = (await client.post("/permits", {"name": "gpu", "units": 2})).json
    grant = (await client.post(f"/permits/{pool['id']}/acquire", {"scopeId": run, "holder": "me", "holderSession": "s"})).json
    await trio.sleep(10)
    operations = [{"path": f"/claims/{c['key']}/renew", "body": {"token": c["token"], "leaseSeconds": 60}} for c in claims]
    operations.append({"path": f"/messages/{delivery['message']['id']}/renew", "body": {"token": delivery["token"]}})
    operations.append({"path": f"/grants/{grant['grantId']}/renew", "body": {"token": grant["token"]}})
    operations.append({"path": "/claims/k0/renew", "body": {"token": "stale"}})
    results = await batch(client, *operations)
    assert [r["status"] for r in results] == [200] * 5 + [409]
    assert {r["body"]["leaseExpiresAt"] for r in results[:3]} == {"2027-01-15T08:01:10.000Z"}
    assert results[3]["body"]["leaseExpiresAt"] == "2027-01-15T08:00:40.000Z"
    assert results[4]["body"]["leaseExpiresAt"] == "2027-01-15T08:00:40.000Z"


async def test_a_wait_is_refused_in_a_batch_and_a_receive_without_one_answers_204(client, autojump_clock):
    """A long poll inside a batch would hold every answer back: waitMs is refused per operation."""
    run, mailbox = await client.run(), await client.mailbox()
    recv = {"scopeId": run, "holder": "w", "holderSession": "s"}
    results = await batch(
        client,
        acquire(run, "k", "me", waitMs=1000),
        {"path": f"/mailboxes/{mailbox}/recv", "body": {**recv, "waitMs": 1000}},
        {"path": f"/mailboxes/{mailbox}/recv", "body": recv},
    )
    assert [r["status"] for r in results] == [400, 400, 204]
    assert "waitMs" in results[0]["error"]["message"] and "body" not in results[2]


async def test_a_batch_is_bounded_and_a_bad_envelope_is_a_400(client, autojump_clock):
    """No operations, not a list, or more than batch_operations_max: the whole batch is refused."""
    for body in ({}, {"operations": []}, {"operations": {"path": "/claims"}}, {"operations": "x"}):
        response = await client.post("/batch", body)
        assert response.status == 400 and response.code == "VALIDATION_FAILED", body
    run = await client.run()
    too_many = [acquire(run, f"k{i}", "me") for i in range(1001)]
    response = await client.post("/batch", {"operations": too_many})
    assert response.status == 400 and "at most 1000 operations" in response.json["error"]["message"]
    assert (await client.get(f"/scopes/{run}/claims")).json["claims"] == []


async def test_an_operations_idempotency_key_replays_its_first_answer(client, autojump_clock):
    """The same operation sent again with its key gets the first answer; another with it is refused."""
    run, mailbox = await client.run(), await client.mailbox()
    task = {"scopeId": run, "mailboxId": mailbox, "taskKey": "t", "input": {"n": 1}}
    first = await batch(client, {"path": "/tasks", "body": task, "idempotencyKey": "op-1"}, {**acquire(run, "k", "a"), "idempotencyKey": "op-2"})
    again = await batch(client, {"path": "/tasks", "body": task, "idempotencyKey": "op-1"}, {**acquire(run, "k", "a"), "idempotencyKey": "op-2"})
    assert again == first  # the acquire too: not CLAIM_HELD, its first answer
    other = await batch(client, {**acquire(run, "other", "a"), "idempotencyKey": "op-2"})
    assert other[0]["status"] == 409 and other[0]["error"]["code"] == "IDEMPOTENCY_CONFLICT"
    bad = await batch(client, {**acquire(run, "x", "a"), "idempotencyKey": ""})
    assert bad[0]["status"] == 400


async def test_an_operation_with_a_field_it_does_not_take_is_refused_naming_it(client, autojump_clock):
    """An operation's field other than method, path, body and idempotencyKey is refused alone,
    naming it and the nearest one (a mistyped idempotencyKey would otherwise leave the operation
    without its replay), and what it asked is not done; the others run. A field of the batch
    other than operations refuses the batch."""
    run = await client.run()
    results = await batch(
        client, {**acquire(run, "typo", "a"), "idempotency_key": "op-1"}, {**acquire(run, "extra", "a"), "extra": 1},
        acquire(run, "fine", "a"),
    )
    assert [r["status"] for r in results] == [400, 400, 200]
    assert results[0]["error"]["code"] == "VALIDATION_FAILED"
    assert results[0]["error"]["message"] == (
        "operations[0]: unknown field 'idempotency_key' (did you mean 'idempotencyKey'?): "
        "this request takes body, idempotencyKey, method, path"
    )
    assert results[1]["error"]["message"].startswith("operations[1]: unknown field 'extra'")
    held = (await client.get(f"/scopes/{run}/claims")).json["claims"]
    assert [claim["key"] for claim in held] == ["fine"]
    # A field of the batch itself other than operations refuses the whole batch.
    response = await client.post("/batch", {"operations": [acquire(run, "whole", "a")], "operation": []})
    assert response.status == 400 and response.json["error"]["message"].startswith(
        "unknown field 'operation' (did you mean 'operations'?)")
    assert [claim["key"] for claim in (await client.get(f"/scopes/{run}/claims")).json["claims"]] == ["fine"]


async def test_another_spaces_key_and_no_key_are_refused_for_the_whole_batch(client, autojump_clock):
    response = await AsgiClient(client.runtime, space="elsewhere").post("/batch", {"operations": [{"path": "/scopes"}]})
    assert response.status == 404
    response = await AsgiClient(client.runtime, api_key="nope").post("/batch", {"operations": [{"path": "/scopes"}]})
    assert response.status == 401


# -- receive many -----------------------------------------------------------------------------------


async def test_recv_many_leases_up_to_max_messages_oldest_first_with_distinct_tokens(client, autojump_clock):
    run, mailbox = await client.run(), await client.mailbox()
    for n in range(5):
        await client.post(f"/mailboxes/{mailbox}/messages", {"scopeId": run, "payload": n})
    body = {"scopeId": run, "holder": "w", "holderSession": "s", "leaseSeconds": 30, "maxMessages": 3}
    first = await client.post(f"/mailboxes/{mailbox}/recv-many", body)
    assert first.status == 200
    deliveries = first.json["deliveries"]
    assert [d["message"]["payload"] for d in deliveries] == [0, 1, 2]
    assert len({d["token"] for d in deliveries}) == 3
    rest = (await client.post(f"/mailboxes/{mailbox}/recv-many", body)).json["deliveries"]
    assert [d["message"]["payload"] for d in rest] == [3, 4]
    empty = await client.post(f"/mailboxes/{mailbox}/recv-many", body)
    assert empty.status == 204 and empty.raw == b""
    # Each lease is its own: complete one, renew another, the third runs out and comes back.
    done = await client.post(f"/messages/{deliveries[0]['message']['id']}/complete", {"token": deliveries[0]["token"]})
    assert done.status == 200
    stale = await client.post(f"/messages/{deliveries[1]['message']['id']}/complete", {"token": deliveries[2]["token"]})
    assert stale.status == 409 and stale.code == "STALE_CLAIM"
    await trio.sleep(20)
    renewed = await client.post(f"/messages/{deliveries[1]['message']['id']}/renew", {"token": deliveries[1]["token"]})
    assert renewed.status == 200
    await trio.sleep(11)
    again = (await client.post(f"/mailboxes/{mailbox}/recv-many", {**body, "maxMessages": 10})).json["deliveries"]
    assert sorted(d["message"]["payload"] for d in again) == [2, 3, 4]
    assert all(d["message"]["attempt"] == 2 for d in again)


async def test_recv_many_waits_for_the_first_message_and_takes_what_is_there(client, autojump_clock):
    run, mailbox = await client.run(), await client.mailbox()
    body = {"scopeId": run, "holder": "w", "holderSession": "s", "maxMessages": 4, "waitMs": 5000}
    got: list = []

    async def receive() -> None:
        got.append((await client.post(f"/mailboxes/{mailbox}/recv-many", body), trio.current_time()))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(receive)
        await trio.sleep(1)
        started = trio.current_time()
        await client.post(f"/mailboxes/{mailbox}/messages", {"scopeId": run, "payload": "a"})
    response, at = got[0]
    assert response.status == 200 and at == started
    assert [d["message"]["payload"] for d in response.json["deliveries"]] == ["a"]


@pytest.mark.parametrize("count", [0, 101, "3", 2.5, True])
async def test_recv_many_refuses_a_count_outside_its_limit(client, autojump_clock, count):
    run, mailbox = await client.run(), await client.mailbox()
    body = {"scopeId": run, "holder": "w", "holderSession": "s", "maxMessages": count}
    response = await client.post(f"/mailboxes/{mailbox}/recv-many", body)
    assert response.status == 400 and response.code == "VALIDATION_FAILED"


# -- one group commit -------------------------------------------------------------------------------


async def test_a_batchs_commands_go_out_in_one_group_commit(tmp_path, autojump_clock):
    """Forty commands on forty keys, submitted together, are written and fsynced once (alone,
    each would be its own write), and every answer comes once they are durable."""
    from runstate.actors import commands as c
    from runstate.snapshots import Disk

    from ..durability.helpers import running

    disk = Disk()
    async with running(str(tmp_path), fsync="always", disk=disk) as run:
        scope_id = (await run.scopes.create("s1"))["id"]
        kernel, journal = run.kernel, run.store.journal
        body = {"scopeId": scope_id, "holder": "h", "holderSession": "x", "leaseSeconds": 60}
        commands = [(kernel.parse(c.AcquireClaim, {**body, "key": f"k{i}"}, {"space": "s1"}), None) for i in range(40)]
        batches, fsyncs = journal.batches, disk.fsyncs
        answers = await kernel.submit_all("s1", commands)
        assert journal.batches - batches == 1 and disk.fsyncs - fsyncs == 1
        assert [a.value.key for a in answers] == [f"k{i}" for i in range(40)]  # (typed views: `ClaimView`)
        assert journal.durable_lsn == journal.appended_lsn
        # The same forty one after another: forty writes.
        batches = journal.batches
        for i in range(40):
            await kernel.submit(kernel.parse(c.AcquireClaim, {**body, "key": f"j{i}"}, {"space": "s1"}))
        assert journal.batches - batches == 40


async def test_an_operators_action_is_sent_alone_and_a_batch_records_who_sent_it(client, autojump_clock):
    """A forced release (an operator's action) is not carried by a batch; a run completed in a
    batch records who completed it, as the same request alone does."""
    run = await client.run()
    got = await batch(client, acquire(run, "k", "me"))
    assert got[0]["status"] == 200
    refused = await batch(client, {"method": "POST", "path": "/claims/k/force-release", "body": {"scopeId": run}})
    assert refused[0]["status"] == 400 and "not a command of a space that a batch can carry" in refused[0]["error"]["message"]
    assert (await client.get(f"/scopes/{run}/claims")).json["claims"][0]["holder"] == "me"  # untouched
    alone, batched = await client.run(), await client.run()
    assert (await client.post(f"/scopes/{alone}/complete")).status == 200
    assert (await batch(client, {"method": "POST", "path": f"/scopes/{batched}/complete"}))[0]["status"] == 200
    events = (await client.get("/watch?waitSeconds=0&types=scope.completed")).json["events"]
    by = {event["payload"]["scopeId"] if "scopeId" in event["payload"] else event.get("scopeId"): event["payload"].get("by") for event in events}
    assert by[alone] is not None and by[batched] == by[alone], events
