"""The operator's actions over HTTP (in-process ASGI), in virtual time: a forced claim release,
dead letters listed page by page and filtered, requeued and deleted.

Each answer is checked literally, as a console or a script reads it; bad input is a 4xx with the
envelope, and a refused action writes nothing.
"""

from __future__ import annotations

from urllib.parse import quote

import pytest
import trio

from .asgi_client import AsgiClient, client  # noqa: F401 - the fixture

pytestmark = pytest.mark.trio


async def acquire(client: AsgiClient, run: str, key: str, holder: str = "a", **fields) -> dict:
    body = {"scopeId": run, "key": key, "holder": holder, "holderSession": "s-" + holder, "leaseSeconds": 60, **fields}
    response = await client.post("/claims", body)
    assert response.status == 200, response
    return response.json


async def test_force_release_answers_the_claim_and_fences_the_old_holder(client, autojump_clock):
    """The answer is the claim's view without a token; the old token is STALE_CLAIM; the event says why."""
    run = await client.run()
    held = await acquire(client, run, "company:acme/1")
    path = f"/claims/{quote('company:acme/1', safe='')}"
    forced = await client.post(path + "/force-release", {"scopeId": run, "reason": "worker hung"})
    assert forced.status == 200, forced
    view = forced.json
    assert view["key"] == "company:acme/1" and view["scopeId"] == run and view["holder"] == "a"
    assert view["token"] is None and view["released"] is True and view["forced"] is True
    assert view["generation"] == held["generation"] and view["reason"] == "worker hung"
    assert view["releasedAt"] == "2027-01-15T08:00:00.000Z"
    stale = await client.post(path + "/renew", {"token": held["token"]})
    assert stale.status == 409 and stale.code == "STALE_CLAIM"
    nxt = await acquire(client, run, "company:acme/1", holder="b")
    assert nxt["generation"] == held["generation"] + 1
    events = (await client.get("/watch?types=claim.force_released&waitSeconds=0")).json["events"]
    assert [event["payload"]["reason"] for event in events] == ["worker hung"]
    assert events[0]["aggregate"] == {"type": "claim", "id": "company:acme/1"}


async def test_force_release_refusals_are_4xx_with_the_envelope(client, autojump_clock):
    run = await client.run()
    await acquire(client, run, "k")
    cases = [
        ("/claims/k/force-release", {}, 400, "VALIDATION_FAILED"),
        ("/claims/k/force-release", {"scopeId": 7}, 400, "VALIDATION_FAILED"),
        ("/claims/k/force-release", {"scopeId": run, "reason": "x" * 2001}, 400, "VALIDATION_FAILED"),
        ("/claims/nobody/force-release", {"scopeId": run}, 404, "NOT_FOUND"),
        ("/claims/k/force-release", {"scopeId": "sc_nope"}, 404, "NOT_FOUND"),
    ]
    for path, body, status, code in cases:
        response = await client.post(path, body)
        assert (response.status, response.code) == (status, code), (path, body, response)
    assert (await client.post("/claims/k/force-release", {"scopeId": run})).status == 200
    again = await client.post("/claims/k/force-release", {"scopeId": run})
    assert again.status == 409 and again.code == "CONFLICT" and "not held" in again.json["error"]["message"]


async def test_a_forced_release_retried_with_its_idempotency_key_answers_the_same(client, autojump_clock):
    """A retry after a lost answer does not turn into a 409 (the key has been free since)."""
    run = await client.run()
    await acquire(client, run, "k")
    first = await client.post("/claims/k/force-release", {"scopeId": run}, idempotency_key="retry-me")
    again = await client.post("/claims/k/force-release", {"scopeId": run}, idempotency_key="retry-me")
    assert first.status == again.status == 200 and first.json == again.json


async def dead_letter(client: AsgiClient, mailbox: str, run: str, payload, error: str = "bad input") -> str:
    sent = await client.post(f"/mailboxes/{mailbox}/messages", {"scopeId": run, "payload": payload})
    delivery = (await client.recv(mailbox, run)).json
    assert delivery["message"]["id"] == sent.json["id"]
    nack = await client.post(f"/messages/{sent.json['id']}/nack", {"token": delivery["token"], "retry": False, "error": error})
    assert nack.status == 200, nack
    return sent.json["id"]


async def test_dead_letters_are_listed_newest_first_a_page_at_a_time(client, autojump_clock):
    """`deadLetters` (with payloads), `total`, `matched`, `truncated`, `nextCursor`; filters in the query."""
    run, mailbox = await client.run(), await client.mailbox(maxAttempts=1)
    letters = []
    for n in range(5):
        letters.append(await dead_letter(client, mailbox, run, {"n": n}, "timeout" if n % 2 else "malformed"))
        await trio.sleep(10)
    base = f"/mailboxes/{mailbox}/dead-letters"
    first = (await client.get(base + "?limit=2")).json
    assert [letter["id"] for letter in first["deadLetters"]] == [letters[4], letters[3]]
    assert first["deadLetters"][0]["payload"] == {"n": 4} and first["deadLetters"][0]["state"] == "DEAD"
    assert (first["total"], first["matched"], first["truncated"]) == (5, 5, True)
    rest = (await client.get(base + f"?limit=2&cursor={first['nextCursor']}")).json
    last = (await client.get(base + f"?limit=2&cursor={rest['nextCursor']}")).json
    assert [letter["id"] for letter in rest["deadLetters"] + last["deadLetters"]] == [letters[2], letters[1], letters[0]]
    assert last["nextCursor"] is None and last["truncated"] is False
    timeouts = (await client.get(base + "?reason=timeout")).json
    assert [letter["id"] for letter in timeouts["deadLetters"]] == [letters[3], letters[1]] and timeouts["matched"] == 2
    old = (await client.get(base + "?olderThanSeconds=25&reason=malformed")).json
    assert [letter["id"] for letter in old["deadLetters"]] == [letters[2], letters[0]]
    fresh = (await client.get(base + "?newerThanSeconds=20")).json  # died at 40 s and 30 s; it is 50 s
    assert [letter["id"] for letter in fresh["deadLetters"]] == [letters[4], letters[3]]
    default = (await client.get(base)).json  # no limit: the first hundred
    assert len(default["deadLetters"]) == 5 and default["nextCursor"] is None
    for query, words in [("?limit=0", "limit"), ("?limit=1001", "limit"), ("?cursor=abc", "cursor"),
                         ("?olderThanSeconds=-1", "olderThanSeconds"), (f"?reason={'x' * 2001}", "reason")]:
        refused = await client.get(base + query)
        assert refused.status == 400 and refused.code == "VALIDATION_FAILED" and words in refused.json["error"]["message"]
    assert (await client.get("/mailboxes/mb_nope/dead-letters")).status == 404


async def test_dead_letters_are_requeued_and_deleted_with_a_dry_run_first(client, autojump_clock):
    run, mailbox = await client.run(), await client.mailbox(maxAttempts=1)
    letters = [await dead_letter(client, mailbox, run, {"n": n}) for n in range(3)]
    base = f"/mailboxes/{mailbox}/dead-letters"
    dry = await client.post(base + "/requeue", {"reason": "bad input", "dryRun": True})
    assert dry.status == 200 and dry.json == {
        "matched": 3, "requeued": 3, "skipped": {"task": 0, "runEnded": 0, "deadlinePassed": 0}, "remaining": 0,
        "dryRun": True, "requeuedAs": {},
    }
    assert (await client.get(base)).json["total"] == 3
    done = await client.post(base + "/requeue", {"messageIds": letters[:2]})
    assert done.status == 200 and done.json["requeued"] == 2 and list(done.json["requeuedAs"]) == letters[:2]
    delivery = (await client.recv(mailbox, run)).json
    assert delivery["message"]["id"] == done.json["requeuedAs"][letters[0]] and delivery["message"]["attempt"] == 1
    assert delivery["message"]["payload"] == {"n": 0}
    deleted = await client.post(base + "/delete", {"all": True})
    assert deleted.json == {"matched": 1, "deleted": 1, "remaining": 0, "dryRun": False, "deletedIds": [letters[2]]}
    assert (await client.get(base)).json["total"] == 0
    events = (await client.get("/watch?waitSeconds=0&types=dead_letters.requeued,dead_letters.deleted")).json["events"]
    assert [(e["type"], e["payload"]["count"]) for e in events] == [("dead_letters.requeued", 2), ("dead_letters.deleted", 1)]
    assert events[0]["aggregate"] == {"type": "mailbox", "id": mailbox}
    usage = (await client.get("/usage")).json["operations"]
    assert usage["dead_letters.requeue"] == 1 and usage["dead_letters.delete"] == 1


async def test_dead_letter_actions_refuse_bad_input_with_the_envelope(client, autojump_clock):
    run, mailbox = await client.run(), await client.mailbox(maxAttempts=1)
    letter = await dead_letter(client, mailbox, run, 1)
    base = f"/mailboxes/{mailbox}/dead-letters"
    cases = [
        ("/requeue", {}, 400, "VALIDATION_FAILED"),
        ("/delete", {"all": True, "reason": "x"}, 400, "VALIDATION_FAILED"),
        ("/delete", {"messageIds": []}, 400, "VALIDATION_FAILED"),
        ("/delete", {"messageIds": "ms_x"}, 400, "VALIDATION_FAILED"),
        ("/delete", {"messageIds": ["ms_x"] * 1001}, 400, "VALIDATION_FAILED"),
        ("/requeue", {"olderThanSeconds": "5"}, 400, "VALIDATION_FAILED"),
        ("/requeue", {"all": True, "dryRun": "yes"}, 400, "VALIDATION_FAILED"),
        ("/requeue", {"messageIds": [letter, "ms_unknown"]}, 404, "NOT_FOUND"),
    ]
    for tail, body, status, code in cases:
        response = await client.post(base + tail, body)
        assert (response.status, response.code) == (status, code), (tail, body, response)
    missing = await client.post("/mailboxes/mb_nope/dead-letters/delete", {"all": True})
    assert missing.status == 404
    assert (await client.get(base)).json["total"] == 1


async def test_a_mailbox_is_purged_of_what_waits(client, autojump_clock):
    run, mailbox = await client.run(), await client.mailbox()
    task = (await client.post("/tasks", {"scopeId": run, "mailboxId": mailbox, "taskKey": "k"})).json["taskId"]
    await client.post(f"/mailboxes/{mailbox}/messages", {"scopeId": run, "payload": 1})
    dry = await client.post(f"/mailboxes/{mailbox}/purge", {"dryRun": True})
    assert dry.status == 200 and dry.json == {"matched": 2, "purged": 2, "remaining": 0, "dryRun": True}
    done = await client.post(f"/mailboxes/{mailbox}/purge")  # no body: everything, in every run
    assert done.json == {"matched": 2, "purged": 2, "remaining": 0, "dryRun": False}
    view = (await client.get(f"/tasks/{task}")).json
    assert view["state"] == "CANCELLED" and view["outcomeReason"] == "purged"
    assert (await client.get(f"/mailboxes/{mailbox}")).json["backlog"] == 0
    for body, status in (({"scopeId": "sc_nope"}, 404), ({"scopeId": 5}, 400), ({"dryRun": "no"}, 400)):
        assert (await client.post(f"/mailboxes/{mailbox}/purge", body)).status == status
    assert (await client.post("/mailboxes/mb_nope/purge", {})).status == 404

