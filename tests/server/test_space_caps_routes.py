"""The caps of a space over HTTP, in process and in virtual time: `GET /caps` shows how full the
space is, and past each cap a route answers 409 BACKLOG_FULL with the error envelope,
`Retry-After: 1` and a message naming the setting; the space goes on once something ends."""

from __future__ import annotations

import pytest
import trio

from runstate.actors import Limits
from runstate.server.settings import Settings

from .asgi_client import API_KEY, SPACE, AsgiClient, Response, start_runtime

pytestmark = pytest.mark.trio

LIMITS = Limits().replace(space_scopes_max=2, space_claims_max=1, space_tasks_max=1, backlog_limit_max=2, space_payload_bytes_max=64)


@pytest.fixture
async def client(nursery, autojump_clock) -> AsgiClient:
    return AsgiClient(await start_runtime(nursery, Settings(api_key=API_KEY, space_id=SPACE, seed=7, limits=LIMITS)))


def assert_full(response: Response, setting: str) -> str:
    assert response.status == 409, response
    assert response.code == "BACKLOG_FULL"
    assert response.headers["retry-after"] == "1"
    message = response.json["error"]["message"]
    flag, variable = "--" + setting.replace("_", "-"), "RUNSTATE_" + setting.upper()
    assert message.endswith(f"(limit {setting}; raise it with {flag} / {variable})"), message
    return message


async def test_runs_past_the_cap_and_a_run_by_name_too(client):
    first = await client.run()
    await client.run()
    assert assert_full(await client.post("/scopes", {}), "space_scopes_max").startswith("space holds 2 live scopes")
    assert_full(await client.request("PUT", "/runs/nightly", {}), "space_scopes_max")
    assert (await client.post(f"/scopes/{first}/cancel")).status == 200
    assert (await client.post("/scopes", {})).status == 201


async def test_claims_tasks_messages_and_bytes_past_their_caps(client):
    run = await client.run()
    claim = {"scopeId": run, "holder": "h", "holderSession": "s", "leaseSeconds": 30}
    held = await client.post("/claims", {**claim, "key": "a"})
    assert held.status in (200, 201), held
    assert_full(await client.post("/claims", {**claim, "key": "b"}), "space_claims_max")
    assert (await client.post("/claims/a/release", {"token": held.json["token"]})).status == 200
    assert (await client.post("/claims", {**claim, "key": "b"})).status in (200, 201)

    mailbox = await client.mailbox()
    task = {"scopeId": run, "mailboxId": mailbox, "input": {"n": 1}}
    assert (await client.post("/tasks", {**task, "taskKey": "one"})).status in (200, 201)
    assert_full(await client.post("/tasks", {**task, "taskKey": "two"}), "space_tasks_max")

    await client.post(f"/mailboxes/{mailbox}/messages", {"scopeId": run, "payload": 1})
    message = assert_full(await client.post(f"/mailboxes/{mailbox}/messages", {"scopeId": run}), "backlog_limit_max")
    assert message.startswith("mailbox 'research' holds 2 unsettled messages")

    other = await client.mailbox("other")
    large = await client.post(f"/mailboxes/{other}/messages", {"scopeId": run, "payload": "x" * 60})
    assert_full(large, "space_payload_bytes_max")

    delivery = await client.recv(mailbox, run)  # the task: its end lets the next one in
    assert delivery.status == 200, delivery
    done = await client.post(f"/messages/{delivery.json['message']['id']}/complete", {"token": delivery.json["token"]})
    assert done.status == 200, done
    assert (await client.post("/tasks", {**task, "taskKey": "two"})).status in (200, 201)


async def test_a_bad_list_limit_is_quoted_short_and_never_a_500(client):
    """`?limit=` is echoed at most ~100 characters; digits that `int()` refuses are a 400 too."""
    for text in ("1" * 5000, "%C2%B2", "0", "1001"):  # %C2%B2 is "²", a digit to str.isdigit()
        response = await client.get(f"/scopes?limit={text}")
        assert response.status == 400, (text[:10], response)
        message = response.json["error"]["message"]
        assert message.startswith("limit must be an integer from 1 to 1000, got ")
        assert len(message) < 200
    assert "... (5002 characters)" in (await client.get("/scopes?limit=" + "1" * 5000)).json["error"]["message"]


async def test_the_caps_read_shows_what_the_space_holds_against_each_limit(client):
    run = await client.run()
    mailbox = await client.mailbox()
    await client.post(f"/mailboxes/{mailbox}/messages", {"scopeId": run, "payload": "x" * 8})  # 10 bytes of JSON
    await client.post("/claims", {"scopeId": run, "key": "a", "holder": "h", "holderSession": "s", "leaseSeconds": 30})
    response = await client.get("/caps")
    assert response.status == 200, response
    # The client sent an Idempotency-Key with each change: their stored answers are counted too,
    # in the room the payload leaves (a newest answer past it is kept: here, the claim's).
    answers = client.runtime.kernel.space_view(SPACE).idempotency
    assert len(answers) >= 1 and answers.bytes > 0
    assert response.json == {
        "spaceId": SPACE,
        "caps": [
            {"setting": "space_scopes_max", "held": 1, "limit": 2},
            {"setting": "space_claims_max", "held": 1, "limit": 1},
            {"setting": "space_tasks_max", "held": 0, "limit": 1},
            {"setting": "space_payload_bytes_max", "held": 10 + answers.bytes, "limit": 64},
            # The run, the message, the claim's key, and the answers stored.
            {"setting": "space_entities_max", "held": 3 + len(answers), "limit": 1_000_000},
        ],
        "pendingRemoval": {
            "endedRunRetentionSeconds": 604_800, "runs": 0, "scopes": 0, "tasks": 0, "messages": 0, "nextRemovalAt": None,
            "overdueRuns": 0,
        },
    }


async def test_an_ended_run_is_pending_removal_then_removed_and_its_ids_answer_404(nursery, autojump_clock):
    """With a minute's retention: an ended run and its task show in `/caps` as pending removal, with
    when; a sweep after the minute they are gone: the run's and the task's ids answer 404 NOT_FOUND
    naming the retention, the run's name makes a new run, and the entities held fall back."""
    limits = Limits().replace(ended_run_retention_s=60)
    client = AsgiClient(await start_runtime(nursery, Settings(api_key=API_KEY, space_id=SPACE, seed=7, limits=limits)))
    mailbox = await client.mailbox()
    entities = lambda: client.runtime.kernel.space_view(SPACE).entities()  # noqa: E731 (stored answers aside)
    before = entities()
    run = (await client.request("PUT", "/runs/nightly", {})).json["id"]
    task = await client.post("/tasks", {"scopeId": run, "mailboxId": mailbox, "taskKey": "t", "input": {"n": 1}})
    assert task.status in (200, 201), task
    assert (await client.post(f"/scopes/{run}/cancel")).status == 200
    caps = await client.get("/caps")
    pending = caps.json["pendingRemoval"]
    assert {k: pending[k] for k in ("endedRunRetentionSeconds", "runs", "scopes", "tasks", "messages", "overdueRuns")} == {
        "endedRunRetentionSeconds": 60, "runs": 1, "scopes": 1, "tasks": 1, "messages": 1, "overdueRuns": 0,
    }
    assert pending["nextRemovalAt"] == "2027-01-15T08:01:00.000Z"  # its end (T0) + 60 s, a sweep instant
    assert entities() == before + 3  # the run, its task and the task's message
    await trio.sleep(61)
    for path in (f"/scopes/{run}", f"/tasks/{task.json['id']}"):
        gone = await client.get(path)
        assert gone.status == 404 and gone.code == "NOT_FOUND", (path, gone)
    message = (await client.get(f"/scopes/{run}")).json["error"]["message"]
    assert "an ended run is removed 60 s after its end: ended_run_retention_s" in message, message
    again = await client.request("PUT", "/runs/nightly", {})
    assert again.json["id"] != run and again.json["effective"] == "ACTIVE", again
    assert (await client.get("/caps")).json["pendingRemoval"]["runs"] == 0
    assert entities() == before + 1  # the new run


async def test_stored_idempotent_answers_count_against_the_byte_cap_and_stay_within_it(nursery, autojump_clock):
    """Keyed receives of 60 KB messages, each completed: the answers, which keep the payloads, are
    counted in `/caps` and take only the room the space's values leave (the oldest go first), so
    they never pass the cap by more than the newest answer; the retry of the newest still gets its
    first answer, and a value is never refused for the answers' sake."""
    limits = Limits().replace(space_payload_bytes_max=200_000)
    client = AsgiClient(await start_runtime(nursery, Settings(api_key=API_KEY, space_id=SPACE, seed=7, limits=limits)))
    run, mailbox = await client.run(), await client.mailbox()
    payload = "x" * 60_000
    body = {"scopeId": run, "holder": "w", "holderSession": "s", "leaseSeconds": 30}
    for n in range(20):
        sent = await client.post(f"/mailboxes/{mailbox}/messages", {"scopeId": run, "payload": payload})
        assert sent.status in (200, 201), (n, sent)
        key = f"recv-{n:020d}"
        first = await client.post(f"/mailboxes/{mailbox}/recv", body, idempotency_key=key)
        assert first.status == 200 and first.json["message"]["payload"] == payload, (n, first)
        again = await client.post(f"/mailboxes/{mailbox}/recv", body, idempotency_key=key)
        assert again.json == first.json
        done = await client.post(f"/messages/{first.json['message']['id']}/complete", {"token": first.json["token"]})
        assert done.status == 200, (n, done)
        held = {row["setting"]: row["held"] for row in (await client.get("/caps")).json["caps"]}
        assert 60_000 < held["space_payload_bytes_max"] <= limits.space_payload_bytes_max + 61_000, (n, held)
    space = client.runtime.kernel.space_view(SPACE)
    assert space.values_bytes() == 0 and space.idempotency.bytes == held["space_payload_bytes_max"]
    assert len(space.idempotency) < 10, "the answers are bounded by the byte cap, not only by their count"


async def test_every_count_cap_of_a_space_is_refused_in_the_one_shape(nursery, autojump_clock):
    """Mailboxes, pools, allowances, budgets, work limits, barriers, timers and the waiters of a
    pool or an allowance: past each cap, 409 BACKLOG_FULL with Retry-After and the setting named,
    as the other caps of a space (they answered 400 VALIDATION_FAILED or 409 CONFLICT)."""
    limits = Limits().replace(
        mailboxes_max=1, pools_max=1, allowances_max=1, budgets_max=1, work_limits_max=1, barriers_max=1,
        timers_per_scope_max=1, waiters_max=1,
    )
    client = AsgiClient(await start_runtime(nursery, Settings(api_key=API_KEY, space_id=SPACE, seed=7, limits=limits)))
    run = await client.run()
    pool = (await client.post("/permits", {"name": "p", "units": 1})).json
    allowance = (await client.post("/allowances", {"name": "a", "unitsLimit": 1, "windowSeconds": 60})).json
    assert (await client.post(f"/permits/{pool['id']}/acquire", {"scopeId": run, "units": 1, "holder": "h", "holderSession": "s", "leaseSeconds": 60})).status == 200
    assert (await client.post(f"/allowances/{allowance['id']}/consume", {"scopeId": run, "units": 1, "holder": "h"})).status == 200
    wait = {"scopeId": run, "units": 1, "holder": "w", "ttlSeconds": 30}
    for path in (f"/permits/{pool['id']}/wait", f"/allowances/{allowance['id']}/wait"):
        assert (await client.post(path, wait)).status == 200
    firsts_then_one_more = [
        ("/mailboxes", {"name": "m1"}, {"name": "m2"}, "mailboxes_max"),
        ("/permits", None, {"name": "p2", "units": 1}, "pools_max"),
        ("/allowances", None, {"name": "a2", "unitsLimit": 1, "windowSeconds": 60}, "allowances_max"),
        ("/budgets", {"name": "b1", "currency": "USD", "scale": 2, "limitMinor": "100"},
         {"name": "b2", "currency": "USD", "scale": 2, "limitMinor": "100"}, "budgets_max"),
        ("/work-limits", {"name": "w1", "scopeId": run, "maxOutstanding": 1}, {"name": "w2", "scopeId": run, "maxOutstanding": 1},
         "work_limits_max"),
        ("/barriers", {"scopeId": run, "target": 2}, {"scopeId": run, "target": 2}, "barriers_max"),
        ("/timers", {"scopeId": run, "afterSeconds": 60}, {"scopeId": run, "afterSeconds": 60}, "timers_per_scope_max"),
        (f"/permits/{pool['id']}/wait", None, {**wait, "holder": "x"}, "waiters_max"),
        (f"/allowances/{allowance['id']}/wait", None, {**wait, "holder": "x"}, "waiters_max"),
    ]
    for path, first, more, setting in firsts_then_one_more:
        if first is not None:
            made = await client.post(path, first)
            assert made.status in (200, 201), (path, made)
        assert_full(await client.post(path, more), setting)
