"""Admin endpoints and inspection reads: keys take effect at once, are journaled as digests, secrets never stored."""

from __future__ import annotations

import hashlib

import orjson
import pytest

import runstate.testing
from runstate.actors.kernel import Kernel
from runstate.server.app import create_app
from runstate.server.settings import Settings
from runstate.actors.journal import MemoryJournal
from runstate.testing import call_asgi

pytestmark = pytest.mark.trio

KEY = "test-key"
ADMIN = "admin-key-0123456789"


async def request(app, method, path, key=None, body=None, params=""):
    headers = {"authorization": f"Bearer {key}"} if key else {}
    raw_body = None
    if body is not None:
        raw_body = orjson.dumps(body)
        headers["content-type"] = "application/json"
    status, _, raw = await call_asgi(app, method, path + params, headers, raw_body)
    return status, orjson.loads(raw) if raw else None


@pytest.fixture
async def app():
    served = create_app(Settings(api_key=KEY, seed=1, admin_key=ADMIN))
    async with runstate.testing.serve_app(served):
        kernel: Kernel = served.runtime.kernel
        kernel.partition_of(None).journal = MemoryJournal(keep=True)  # see what the system partition writes from here on
        yield served


async def test_a_created_key_opens_its_space_at_once_and_a_revoked_one_is_shut_out_at_once(app):
    """Create a key for `research`: it works there, not in `default`; revoke it: the next request is 401."""
    status, made = await request(app, "POST", "/v1/admin/keys", ADMIN, {"space": "research", "name": "crawler"})
    assert status == 201
    assert made["id"].startswith("ak_") and made["key"].startswith("rs_")
    assert made["spaces"] == ["research"] and made["name"] == "crawler" and made["revokedAt"] is None
    secret = made["key"]
    assert (await request(app, "POST", "/v1/spaces/research/scopes", secret, {}))[0] == 201
    assert (await request(app, "POST", "/v1/spaces/default/scopes", secret, {}))[0] == 404

    status, revoked = await request(app, "POST", f"/v1/admin/keys/{made['id']}/revoke", ADMIN)
    assert status == 200 and revoked["revokedAt"] is not None
    status, refused = await request(app, "POST", "/v1/spaces/research/scopes", secret, {})
    assert status == 401 and refused["error"]["code"] == "UNAUTHENTICATED"


async def test_keys_are_journaled_as_digests_and_the_secret_is_written_nowhere(app):
    """The journal holds key.registered with the SHA-256 digest and key.revoked; never the key itself."""
    _, made = await request(app, "POST", "/v1/admin/keys", ADMIN, {"spaces": ["a", "b"]})
    await request(app, "POST", f"/v1/admin/keys/{made['id']}/revoke", ADMIN)
    records = app.runtime.kernel.partition_of(None).journal.records
    assert [r["type"] for r in records] == ["key.registered", "key.revoked"]
    assert records[0]["digest"] == hashlib.sha256(made["key"].encode()).hexdigest()
    assert records[0]["spaces"] == ["a", "b"]
    assert made["key"] not in orjson.dumps(records).decode()
    _, listed = await request(app, "GET", "/v1/admin/keys", ADMIN)
    assert made["key"] not in orjson.dumps(listed).decode()
    assert "digest" not in listed["keys"][0]


async def test_listing_keys_and_spaces(app):
    """Keys list with an optional space filter; spaces list with their keys, runs, live claims and operations."""
    await request(app, "POST", "/v1/admin/keys", ADMIN, {"space": "research"})
    _, run = await request(app, "POST", "/v1/spaces/default/scopes", KEY, {})
    claim = {"key": "k", "scopeId": run["id"], "holder": "h", "holderSession": "s"}
    await request(app, "POST", "/v1/spaces/default/claims", KEY, claim)
    _, every = await request(app, "GET", "/v1/admin/keys", ADMIN)
    _, research = await request(app, "GET", "/v1/admin/keys", ADMIN, params="?space=research")
    assert len(every["keys"]) == 2 and len(research["keys"]) == 1
    _, spaces = await request(app, "GET", "/v1/admin/spaces", ADMIN)
    assert spaces["spaces"] == [
        {"id": "default", "keys": 1, "runs": 1, "claimsLive": 1, "operations": 2},
        {"id": "research", "keys": 1, "runs": 0, "claimsLive": 0, "operations": 0},
    ]


async def test_admin_routes_refuse_api_keys_and_bad_requests(app):
    """No key or a wrong one: 401; an API key: 403; bad bodies (space and spaces together too): 400;
    an unknown key id: 404."""
    assert (await request(app, "GET", "/v1/admin/keys"))[0] == 401
    assert (await request(app, "GET", "/v1/admin/keys", "wrong"))[0] == 401
    status, body = await request(app, "GET", "/v1/admin/keys", KEY)
    assert status == 403 and body["error"]["code"] == "FORBIDDEN"
    assert (await request(app, "POST", "/v1/admin/keys", ADMIN, {}))[0] == 400
    assert (await request(app, "POST", "/v1/admin/keys", ADMIN, {"spaces": []}))[0] == 400
    assert (await request(app, "POST", "/v1/admin/keys", ADMIN, {"space": "no spaces allowed"}))[0] == 400
    # space and spaces together: refused, not a key for spaces alone (space was dropped).
    status, body = await request(app, "POST", "/v1/admin/keys", ADMIN, {"space": "a", "spaces": ["b"]})
    assert status == 400 and body["error"]["message"].startswith("give space or spaces, not both")
    assert (await request(app, "GET", "/v1/admin/keys", ADMIN, params="?space=b"))[1]["keys"] == []
    assert (await request(app, "POST", "/v1/admin/keys/ak_missing/revoke", ADMIN))[0] == 404


async def test_inspection_reads_runs_claims_without_tokens_and_usage(app):
    """Runs newest first with a limit; claims of a run without their fencing token; usage of the space."""
    runs = [(await request(app, "POST", "/v1/spaces/default/scopes", KEY, {"name": f"r{n}"}))[1] for n in range(3)]
    claim = {"key": "company:acme", "scopeId": runs[0]["id"], "holder": "h", "holderSession": "s"}
    _, lease = await request(app, "POST", "/v1/spaces/default/claims", KEY, claim)
    await request(app, "POST", "/v1/spaces/default/claims/company%3Aacme/renew", KEY, {"token": lease["token"]})

    _, listed = await request(app, "GET", "/v1/spaces/default/scopes", KEY, params="?limit=2")
    newest = sorted(runs, key=lambda run: (run["createdAt"], run["id"]), reverse=True)  # (those of one millisecond by id)
    assert [s["name"] for s in listed["scopes"]] == [run["name"] for run in newest[:2]] and listed["truncated"] is True
    _, claims = await request(app, "GET", f"/v1/spaces/default/scopes/{runs[0]['id']}/claims", KEY)
    assert [c["key"] for c in claims["claims"]] == ["company:acme"]
    assert "token" not in claims["claims"][0] and claims["claims"][0]["holder"] == "h"
    assert lease["token"] not in orjson.dumps(claims).decode()
    _, usage = await request(app, "GET", "/v1/spaces/default/usage", KEY)
    assert usage["operations"] == {"claims.acquire": 1, "scopes.create": 3}
    assert usage["total"] == 4 and usage["free"] == {"claims.renew": 1}

    assert (await request(app, "GET", "/v1/spaces/default/scopes", KEY, params="?limit=0"))[0] == 400
    assert (await request(app, "GET", "/v1/spaces/default/scopes/sc_nope/claims", KEY))[0] == 404


async def test_the_admin_key_reads_any_known_space_and_an_api_key_only_its_own(app):
    """Admin: any space the server knows (404 for an unknown one, none is made); API key: 404 elsewhere."""
    _, made = await request(app, "POST", "/v1/admin/keys", ADMIN, {"space": "research"})
    assert (await request(app, "GET", "/v1/spaces/research/usage", ADMIN))[0] == 200
    assert (await request(app, "GET", "/v1/spaces/default/usage", ADMIN))[0] == 200
    assert (await request(app, "GET", "/v1/spaces/nowhere/usage", ADMIN))[0] == 404
    assert not app.runtime.kernel.space_known("nowhere")
    assert (await request(app, "GET", "/v1/spaces/default/usage", made["key"]))[0] == 404
    # The admin key reads, and does an operator's actions; it does no other work inside a space:
    # valid, but not allowed there (403, not 401).
    status, refused = await request(app, "POST", "/v1/spaces/default/scopes", ADMIN, {})
    assert status == 403 and refused["error"]["code"] == "FORBIDDEN"
    assert "reads inside a space and performs the operator's actions" in refused["error"]["message"]


async def test_a_key_is_not_made_from_a_body_with_a_field_it_does_not_read(app):
    status, refused = await request(app, "POST", "/v1/admin/keys", ADMIN, {"space": "research", "nmae": "crawler"})
    assert status == 400 and refused["error"]["code"] == "VALIDATION_FAILED" and "'nmae'" in refused["error"]["message"]


async def test_a_key_sent_to_another_space_is_told_which_spaces_it_opens(app):
    """A `default` key with space "research" got "space 'research' not found" though research exists:
    the answer is still 404 (a key learns nothing of other spaces), and says which spaces it opens."""
    await request(app, "POST", "/v1/admin/keys", ADMIN, {"space": "research"})
    status, refused = await request(app, "POST", "/v1/spaces/research/scopes", KEY, {})
    assert status == 404 and refused["error"]["code"] == "NOT_FOUND"
    message = refused["error"]["message"]
    assert "not found for this API key, which opens 'default'" in message and "keys create --space research" in message
    status, unknown = await request(app, "POST", "/v1/spaces/nowhere/scopes", KEY, {})
    assert status == 404 and unknown["error"]["message"].replace("nowhere", "research") == message
