"""The operator's actions over HTTP (in-process ASGI), in virtual time: a forced claim release.

Each answer is checked literally, as a console or a script reads it; bad input is a 4xx with the
envelope, and a refused action writes nothing.
"""

from __future__ import annotations

from urllib.parse import quote

import pytest

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
