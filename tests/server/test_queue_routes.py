"""The mailbox, message and task routes over HTTP (in-process ASGI), in virtual time.

What the official client depends on is checked literally: status codes (201/200/204), the
`mailboxes` wrapper, the recv shape, 204 with an empty body, error envelopes with the codes of
the v1 error table, Retry-After on BACKLOG_FULL. Bad input of any kind is a 4xx, never a 500.
"""

from __future__ import annotations

import pytest
import trio
import trio.testing

from runstate.actors.timestamps import parse_timestamp

from ..ops import KeyOps
from .asgi_client import SPACE, T0, AsgiClient, client  # noqa: F401 - the fixture

pytestmark = pytest.mark.trio


# -- mailboxes ------------------------------------------------------------------------------------


async def test_mailboxes_are_created_listed_and_duplicate_names_conflict(client, autojump_clock):
    created = await client.post("/mailboxes", {"name": "research", "mode": "WORK", "backlogLimit": 100})
    assert created.status == 201
    row = created.json
    assert row["id"].startswith("mb_") and row["name"] == "research" and row["mode"] == "WORK"
    assert row["backlogLimit"] == 100 and row["maxAttempts"] == 5 and row["backlog"] == 0
    other = await client.post("/mailboxes", {"name": "crawl", "maxAttempts": 2})
    assert other.status == 201 and other.json["mode"] == "WORK"
    duplicate = await client.post("/mailboxes", {"name": "research"})
    assert duplicate.status == 409 and duplicate.code == "CONFLICT"
    listing = await client.get("/mailboxes")
    assert listing.status == 200
    assert [m["name"] for m in listing.json["mailboxes"]] == ["research", "crawl"]
    assert (await client.get(f"/mailboxes/{row['id']}")).json["name"] == "research"


async def test_an_unsupported_mode_is_a_400_naming_the_supported_modes(client, autojump_clock):
    response = await client.post("/mailboxes", {"name": "x", "mode": "broadcast"})
    assert response.status == 400 and response.code == "VALIDATION_FAILED"
    assert "WORK" in response.json["error"]["message"]


# -- send -----------------------------------------------------------------------------------------


async def test_send_answers_the_message_id_and_replays_a_work_key(client, autojump_clock):
    run, mailbox = await client.run(), await client.mailbox()
    body = {"scopeId": run, "payload": {"company": "acme"}, "workKey": "crawl:acme"}
    first = await client.post(f"/mailboxes/{mailbox}/messages", body)
    assert first.status == 201
    assert first.json["id"].startswith("ms_") and first.json["replay"] is False
    assert first.json["mailboxId"] == mailbox and first.json["scopeId"] == run
    again = await client.post(f"/mailboxes/{mailbox}/messages", body)
    assert again.status == 200 and again.json["replay"] is True and again.json["id"] == first.json["id"]
    changed = await client.post(f"/mailboxes/{mailbox}/messages", {**body, "payload": {"company": "globex"}})
    assert changed.status == 409 and changed.code == "IDEMPOTENCY_CONFLICT"


async def test_a_payload_over_64_kib_is_refused_with_its_size_in_the_message(client, autojump_clock):
    run, mailbox = await client.run(), await client.mailbox()
    response = await client.post(f"/mailboxes/{mailbox}/messages", {"scopeId": run, "payload": "x" * 70_000})
    assert response.status == 400 and "exceeds 65536 bytes" in response.json["error"]["message"]


@pytest.mark.parametrize("deadline", ["tomorrow", "2027-01-16T08:00:00", "2027-13-01T00:00:00Z", 12345, ""])
async def test_a_deadline_that_is_not_iso_8601_with_a_zone_is_a_400(client, autojump_clock, deadline):
    run, mailbox = await client.run(), await client.mailbox()
    sent = await client.post(f"/mailboxes/{mailbox}/messages", {"scopeId": run, "deadline": deadline})
    assert sent.status == 400 and sent.code == "VALIDATION_FAILED"
    task = await client.post("/tasks", {"scopeId": run, "mailboxId": mailbox, "taskKey": "k", "deadline": deadline})
    assert task.status == 400 and task.code == "VALIDATION_FAILED"


async def test_a_full_backlog_is_409_backlog_full_with_retry_after(client, autojump_clock):
    run, mailbox = await client.run(), await client.mailbox(backlogLimit=1)
    assert (await client.post(f"/mailboxes/{mailbox}/messages", {"scopeId": run})).status == 201
    full = await client.post(f"/mailboxes/{mailbox}/messages", {"scopeId": run})
    assert full.status == 409 and full.code == "BACKLOG_FULL"
    assert float(full.headers["retry-after"]) == 1.0


# -- recv and settling ----------------------------------------------------------------------------


async def test_recv_answers_204_with_an_empty_body_when_there_is_nothing(client, autojump_clock):
    run, mailbox = await client.run(), await client.mailbox()
    response = await client.recv(mailbox, run)
    assert response.status == 204 and response.raw == b""


async def test_recv_answers_the_delivery_shape_of_the_protocol(client, autojump_clock):
    run, mailbox = await client.run(), await client.mailbox()
    await client.post(f"/mailboxes/{mailbox}/messages", {"scopeId": run, "payload": None, "workKey": "w"})
    response = await client.recv(mailbox, run, leaseSeconds=45)
    assert response.status == 200
    delivery = response.json
    assert set(delivery) >= {"message", "token", "leaseExpiresAt"}
    assert set(delivery["message"]) >= {"id", "mailboxId", "scopeId", "payload", "attempt", "workKey", "deadline", "taskId"}
    assert delivery["message"]["payload"] is None and delivery["message"]["attempt"] == 1
    assert delivery["leaseExpiresAt"] == "2027-01-15T08:00:45.000Z"


async def test_a_long_poll_is_answered_by_the_arrival_of_a_message(client, autojump_clock):
    run, mailbox = await client.run(), await client.mailbox()
    got = {}

    async def receiver():
        got["response"] = await client.recv(mailbox, run, waitMs=20_000)
        got["at"] = trio.current_time()

    start = trio.current_time()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(receiver)
        await trio.sleep(2.5)
        await client.post(f"/mailboxes/{mailbox}/messages", {"scopeId": run, "payload": 1})
    assert got["response"].status == 200 and got["at"] - start == pytest.approx(2.5)


async def test_a_client_that_disconnects_mid_poll_is_not_handed_a_lease(client, autojump_clock):
    run, mailbox = await client.run(), await client.mailbox()
    gone = trio.Event()
    result = {}

    async def receiver():
        body = {"scopeId": run, "holder": "w", "holderSession": "s", "leaseSeconds": 30, "waitMs": 20_000}
        result["response"] = await client.request("POST", f"/mailboxes/{mailbox}/recv", body, disconnect=gone)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(receiver)
        await trio.sleep(1)
        gone.set()
    assert result["response"] is None
    await client.post(f"/mailboxes/{mailbox}/messages", {"scopeId": run, "payload": 1})
    assert (await client.recv(mailbox, run)).json["message"]["attempt"] == 1


async def test_recv_with_the_same_idempotency_key_returns_the_same_delivery(client, autojump_clock):
    run, mailbox = await client.run(), await client.mailbox()
    for n in (1, 2):
        await client.post(f"/mailboxes/{mailbox}/messages", {"scopeId": run, "payload": n})
    body = {"scopeId": run, "holder": "w", "holderSession": "s", "leaseSeconds": 30, "waitMs": 1000}
    first = await client.post(f"/mailboxes/{mailbox}/recv", body, idempotency_key="0123456789abcdef01234567")
    again = await client.post(f"/mailboxes/{mailbox}/recv", body, idempotency_key="0123456789abcdef01234567")
    assert again.json == first.json
    assert (await client.recv(mailbox, run)).json["message"]["payload"] == 2


async def test_complete_nack_and_renew_with_a_stale_token_are_409_stale_claim(client, autojump_clock):
    run, mailbox = await client.run(), await client.mailbox()
    await client.post(f"/mailboxes/{mailbox}/messages", {"scopeId": run})
    delivery = (await client.recv(mailbox, run, leaseSeconds=5)).json
    message = delivery["message"]["id"]
    await trio.sleep(5)
    await trio.testing.wait_all_tasks_blocked()  # the lease's expiry is due now: let it be recorded
    for action, body in (("complete", {}), ("nack", {"retry": True}), ("renew", {})):
        response = await client.post(f"/messages/{message}/{action}", {"token": delivery["token"], **body})
        assert response.status == 409 and response.code == "STALE_CLAIM", (action, response)
    retaken = (await client.recv(mailbox, run)).json
    assert retaken["message"]["attempt"] == 2
    # The refusal says what holds the message, whether the token is an earlier delivery's or none at all.
    for token in (delivery["token"], "dt_made_up"):
        refused = await client.post(f"/messages/{message}/renew", {"token": token})
        assert refused.code == "STALE_CLAIM" and refused.json["error"]["message"] == (
            f"token is not the current one for message {message}: it is leased under another token (attempt 2)")
    renewed = await client.post(f"/messages/{message}/renew", {"token": retaken["token"], "leaseSeconds": 60})
    assert renewed.status == 200 and renewed.json["leaseSeconds"] == 60
    done = await client.post(f"/messages/{message}/complete", {"token": retaken["token"]})
    assert done.status == 200 and done.json["state"] == "COMPLETED"


async def test_nack_retry_backs_off_and_reject_dead_letters_into_the_listing(client, autojump_clock):
    run, mailbox = await client.run(), await client.mailbox()
    await client.post(f"/mailboxes/{mailbox}/messages", {"scopeId": run, "payload": {"n": 1}})
    delivery = (await client.recv(mailbox, run)).json
    retried = await client.post(f"/messages/{delivery['message']['id']}/nack", {"token": delivery["token"], "retry": True})
    assert retried.status == 200 and retried.json["state"] == "DELAYED"
    assert 800 <= parse_timestamp(retried.json["visibleAt"]) - T0 <= 1000
    assert (await client.recv(mailbox, run)).status == 204
    again = (await client.recv(mailbox, run, waitMs=5000)).json
    assert again["message"]["attempt"] == 2
    rejected = await client.post(
        f"/messages/{again['message']['id']}/nack", {"token": again["token"], "retry": False, "error": "unparseable"}
    )
    assert rejected.json["state"] == "DEAD"
    letters = (await client.get(f"/mailboxes/{mailbox}/dead-letters")).json
    assert letters["total"] == 1
    assert letters["deadLetters"][0]["payload"] == {"n": 1}
    assert letters["deadLetters"][0]["reason"] == "handler_error: unparseable"
    row = (await client.get("/mailboxes")).json["mailboxes"][0]
    assert row["counts"]["deadLetters"] == 1 and row["backlog"] == 0


# -- tasks ----------------------------------------------------------------------------------


async def test_tasks_are_created_replayed_read_and_completed_with_the_payload(client, autojump_clock):
    run, mailbox = await client.run(), await client.mailbox()
    body = {"scopeId": run, "mailboxId": mailbox, "taskKey": "research:acme", "input": {"company": "acme"}, "subscriberId": "planner-7"}
    created = await client.post("/tasks", body)
    assert created.status == 201 and created.json["taskId"].startswith("tk_")
    task_id = created.json["taskId"]
    replay = await client.post("/tasks", {**body, "subscriberId": "planner-8"})
    assert replay.status == 200 and replay.json["taskId"] == task_id and replay.json["created"] is False
    conflict = await client.post("/tasks", {**body, "input": {"company": "globex"}})
    assert conflict.status == 409 and conflict.code == "IDEMPOTENCY_CONFLICT"
    delivery = (await client.recv(mailbox, run)).json
    assert delivery["message"]["taskId"] == task_id and delivery["message"]["payload"] == {"company": "acme"}
    running = (await client.get(f"/tasks/{task_id}")).json
    assert running["state"] == "RUNNING" and running["attempt"] == 1
    await client.post(f"/messages/{delivery['message']['id']}/complete", {"token": delivery["token"], "result": {"payload": "report"}})
    view = (await client.get(f"/tasks/{task_id}")).json
    expected_keys = {"id", "taskKey", "scopeId", "mailboxId", "state", "attempt", "outcome", "outcomeReason",
                     "deadline", "subscribers", "createdAt", "updatedAt", "tombstoned"}
    assert expected_keys <= set(view)
    assert view["id"] == task_id and view["state"] == "SUCCEEDED" and view["outcome"] == "report"
    assert view["subscribers"] == ["planner-7", "planner-8"] and view["tombstoned"] is False


async def test_cancel_join_and_detach(client, autojump_clock):
    run, mailbox = await client.run(), await client.mailbox()
    task_id = (await client.post("/tasks", {"scopeId": run, "mailboxId": mailbox, "taskKey": "k"})).json["taskId"]
    joined = await client.post(f"/tasks/{task_id}/join", {"subscriberId": "s1", "scopeId": run})
    assert joined.status == 200 and joined.json["subscribers"] == ["s1"]
    detached = await client.post(f"/tasks/{task_id}/detach", {"subscriberId": "s1"})
    assert detached.json["subscribers"] == [] and detached.json["state"] == "QUEUED"
    cancelled = await client.post(f"/tasks/{task_id}/cancel", {})
    assert cancelled.status == 200 and cancelled.json["state"] == "CANCELLED"
    assert cancelled.json["outcomeReason"] == "cancelled"
    other = (await client.post("/tasks", {"scopeId": run, "mailboxId": mailbox, "taskKey": "k2"})).json["taskId"]
    bodyless = await client.post(f"/tasks/{other}/cancel")
    assert bodyless.status == 200 and bodyless.json["state"] == "CANCELLED"


async def test_requirements_naming_a_pool_that_does_not_exist_are_refused(client, autojump_clock):
    run, mailbox = await client.run(), await client.mailbox()
    body = {"scopeId": run, "mailboxId": mailbox, "taskKey": "k", "requirements": {"pools": [{"name": "gpu", "units": 1}]}}
    response = await client.post("/tasks", body)
    assert response.status == 404 and "gpu" in response.json["error"]["message"]


async def test_a_cancelled_run_answers_409_scope_cancelled_to_recv_send_and_submit(client, autojump_clock):
    run, mailbox = await client.run(), await client.mailbox()
    task_id = (await client.post("/tasks", {"scopeId": run, "mailboxId": mailbox, "taskKey": "k"})).json["taskId"]
    await client.post(f"/scopes/{run}/cancel")
    for response in (
        await client.recv(mailbox, run),
        await client.post(f"/mailboxes/{mailbox}/messages", {"scopeId": run}),
        await client.post("/tasks", {"scopeId": run, "mailboxId": mailbox, "taskKey": "k3"}),
    ):
        assert response.status == 409 and response.code == "SCOPE_CANCELLED"
    view = (await client.get(f"/tasks/{task_id}")).json
    assert view["state"] == "CANCELLED" and view["outcomeReason"] == "scope_cancelled"


async def test_another_spaces_ids_answer_404(client, autojump_clock):
    run, mailbox = await client.run(), await client.mailbox()
    task_id = (await client.post("/tasks", {"scopeId": run, "mailboxId": mailbox, "taskKey": "k"})).json["taskId"]
    await KeyOps(client.runtime.kernel).register("rs_other", frozenset({"other"}))
    stranger = AsgiClient(client.runtime, api_key="rs_other", space="other")
    assert (await stranger.get(f"/tasks/{task_id}")).status == 404
    assert (await stranger.get(f"/mailboxes/{mailbox}")).status == 404
    assert (await stranger.get("/mailboxes")).json == {"mailboxes": []}
    assert (await stranger.post(f"/mailboxes/{mailbox}/messages", {"scopeId": run})).status == 404


async def test_unknown_ids_are_404_with_the_envelope(client, autojump_clock):
    for response in (
        await client.get("/tasks/tk_nope"),
        await client.get("/mailboxes/mb_nope"),
        await client.post("/messages/ms_nope/complete", {"token": "t"}),
        await client.post("/tasks/tk_nope/cancel", {}),
        await client.recv("mb_nope", "sc_nope"),
    ):
        assert response.status == 404 and response.code == "NOT_FOUND", response


# -- bad input is never a 500 -----------------------------------------------------------------

WRONG_VALUES = [None, 0, -1, 10**18, 1.5, True, "", "x" * 600, [], {}, [1, "a"], {"a": [None]}]


@pytest.mark.parametrize("value", WRONG_VALUES, ids=repr)
async def test_any_value_in_any_field_is_answered_without_a_500(client, autojump_clock, value):
    run, mailbox = await client.run(), await client.mailbox()
    await client.post(f"/mailboxes/{mailbox}/messages", {"scopeId": run})
    delivery = (await client.recv(mailbox, run)).json
    message = delivery["message"]["id"]
    task_id = (await client.post("/tasks", {"scopeId": run, "mailboxId": mailbox, "taskKey": "t"})).json["taskId"]
    cases = [
        ("/mailboxes", {"name": "n", "mode": "WORK", "backlogLimit": 5, "maxAttempts": 3}),
        (f"/mailboxes/{mailbox}/messages", {"scopeId": run, "payload": 1, "workKey": "w", "deadline": "2030-01-01T00:00:00Z"}),
        (f"/mailboxes/{mailbox}/recv", {"scopeId": run, "holder": "h", "holderSession": "s", "leaseSeconds": 30, "waitMs": 10}),
        (f"/messages/{message}/renew", {"token": delivery["token"], "leaseSeconds": 30}),
        (f"/messages/{message}/nack", {"token": delivery["token"], "retry": True, "error": "e"}),
        (f"/messages/{message}/complete", {"token": delivery["token"], "result": {"payload": 1}}),
        ("/tasks", {"scopeId": run, "mailboxId": mailbox, "taskKey": "k", "input": 1, "subscriberId": "s", "deadline": "2030-01-01T00:00:00Z"}),
        (f"/tasks/{task_id}/join", {"subscriberId": "s", "scopeId": run}),
        (f"/tasks/{task_id}/detach", {"subscriberId": "s"}),
        (f"/tasks/{task_id}/cancel", {"reason": "r"}),
    ]
    for tail, good in cases:
        for field in good:
            response = await client.post(tail, {**good, field: value})
            assert response.status < 500, (tail, field, value, response)
            if response.status >= 400:
                assert response.code is not None
    for raw in (b"{", b"[]", b"null", b'"s"', b"\xff\xfe"):
        response = await client.request("POST", "/tasks", raw=raw)
        assert response.status == 400 and response.code == "VALIDATION_FAILED"


async def test_a_wait_over_the_cap_is_said_in_the_answer(client, autojump_clock):
    """waitMs over wait_ms_max is held the cap and no longer; the answer says so in a header, so a
    caller knows to ask again rather than take the 204 for its whole wait."""
    run, mailbox = await client.run(), await client.mailbox()
    started = trio.current_time()
    capped = await client.recv(mailbox, run, waitMs=60_000)
    assert capped.status == 204 and capped.headers["runstate-wait-capped-ms"] == "30000"
    assert trio.current_time() - started == pytest.approx(30)
    short = await client.recv(mailbox, run, waitMs=1_000)
    assert short.status == 204 and "runstate-wait-capped-ms" not in short.headers
    run_claim = {"scopeId": run, "key": "k", "holder": "h", "holderSession": "s", "leaseSeconds": 600}
    await client.post("/claims", run_claim)
    held = await client.post("/claims", {**run_claim, "holder": "other", "waitMs": 45_000})
    assert held.status == 409 and held.headers["runstate-wait-capped-ms"] == "30000"
    # The long polls with routes of their own say it as well: a task, a once key, a timer poll.
    task = (await client.post("/tasks", {"scopeId": run, "mailboxId": mailbox, "taskKey": "t"})).json["taskId"]
    slot = {"scopeId": run, "key": "o", "holder": "h", "holderSession": "s", "leaseSeconds": 600}
    await client.post("/once/acquire", slot)
    for answer in (
        await client.get(f"/tasks/{task}?waitMs=60000"),
        await client.get(f"/once?scopeId={run}&key=o&waitMs=60000"),
        await client.post("/timers/poll", {"scopeId": run, "waitMs": 60_000}),
    ):
        assert answer.status == 200 and answer.headers.get("runstate-wait-capped-ms") == "30000", answer
    assert "runstate-wait-capped-ms" not in (await client.get(f"/tasks/{task}?waitMs=1000")).headers
