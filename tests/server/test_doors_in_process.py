"""What the server does with a request before and while it reads its body, and what it echoes back.

In process and in virtual time: the body is read only for a key the server knows, held bytes are
bounded across requests, integers it cannot keep exactly are refused, bad values are quoted short.
"""

from __future__ import annotations

import pytest

from runstate.server.settings import Settings

from .asgi_client import API_KEY, SPACE, AsgiClient, client, start_runtime  # noqa: F401 - the fixture

pytestmark = pytest.mark.trio


async def test_an_unknown_key_is_refused_before_the_body_is_read(client: AsgiClient):
    """401 for a key the server does not know, even with a body that is not JSON and over the limit."""
    stranger = AsgiClient(client.runtime, api_key="not-a-key")
    answer = await stranger.post("/scopes", raw=b"{" * (2 * 1024 * 1024))
    assert answer.status == 401 and answer.code == "UNAUTHENTICATED"
    assert client.runtime.doors.body_bytes_in_flight == 0


async def test_a_declared_length_over_the_limit_is_413_before_reading(client: AsgiClient):
    """Content-Length above request_bytes_max: 413 with the envelope, the connection kept (the body was drained)."""
    answer = await client.post("/scopes", raw=b"x" * (1024 * 1024 + 1))
    assert answer.status == 413 and answer.code == "VALIDATION_FAILED"
    assert "connection" not in answer.headers
    assert (await client.post("/scopes", {})).status == 201


async def test_bytes_held_across_requests_are_bounded(nursery, autojump_clock):
    """With body_bytes_in_flight_max of 4096, a 5000-byte body gets 503 with Retry-After; smaller ones pass."""
    runtime = await start_runtime(nursery, Settings(api_key=API_KEY, space_id=SPACE, seed=7, body_bytes_in_flight_max=4096))
    client = AsgiClient(runtime)
    refused = await client.post("/scopes", raw=b'{"name": "%s"}' % (b"n" * 5000))
    assert refused.status == 503 and refused.code == "UNAVAILABLE"
    assert "body_bytes_in_flight_max" in refused.json["error"]["message"]
    assert refused.headers["retry-after"] == "1"
    assert (await client.post("/scopes", {"name": "small"})).status == 201
    assert runtime.doors.body_bytes_in_flight == 0  # every held byte was given back


async def test_an_integer_past_64_bits_is_refused_naming_the_field(client: AsgiClient):
    """2**100 in a payload was silently a float; now it is a 400 that names payload.id and says what to do."""
    run = await client.run()
    box = await client.mailbox()
    raw = b'{"scopeId": "%s", "payload": {"id": %d}}' % (run.encode(), 2**100)
    answer = await client.post(f"/mailboxes/{box}/messages", raw=raw)
    assert answer.status == 400 and answer.code == "VALIDATION_FAILED"
    message = answer.json["error"]["message"]
    assert "'payload.id'" in message and str(2**100) in message and "as a string" in message
    nested = b'{"scopeId": "%s", "payload": [1, {"n": -%d}]}' % (run.encode(), 2**63 + 1)
    assert "'payload[1].n'" in (await client.post(f"/mailboxes/{box}/messages", raw=nested)).json["error"]["message"]


async def test_integers_within_64_bits_come_back_exactly(client: AsgiClient):
    """The edges orjson keeps (2**64-1, -2**63) and a digit string survive a send and a recv unchanged."""
    run = await client.run()
    box = await client.mailbox()
    raw = b'{"scopeId": "%s", "payload": {"big": %d, "small": %d, "text": "%d"}}' % (run.encode(), 2**64 - 1, -(2**63), 2**100)
    assert (await client.post(f"/mailboxes/{box}/messages", raw=raw)).status == 201
    delivery = await client.recv(box, run)
    assert delivery.json["message"]["payload"] == {"big": 2**64 - 1, "small": -(2**63), "text": str(2**100)}


async def test_a_100_kb_id_is_quoted_short(client: AsgiClient):
    """A refusal quotes at most about 100 characters of the bad value and says how long it was."""
    answer = await client.post(
        "/claims", {"key": "k", "scopeId": "s" * 100_000, "holder": "h", "holderSession": "s", "leaseSeconds": 30}
    )
    assert answer.status == 404
    message = answer.json["error"]["message"]
    assert len(message) < 200
    assert "(100002 characters)" in message


async def test_the_admin_key_on_a_space_write_is_403_not_401(nursery, autojump_clock):
    """The admin key is valid and reads every space; a write with it is 403 FORBIDDEN saying so."""
    runtime = await start_runtime(nursery, Settings(api_key=API_KEY, space_id=SPACE, seed=7, admin_key="admin-key-0123456789"))
    admin = AsgiClient(runtime, api_key="admin-key-0123456789")
    answer = await admin.post("/scopes", {})
    assert answer.status == 403 and answer.code == "FORBIDDEN"
    assert "API key" in answer.json["error"]["message"]
    assert (await admin.get("/usage")).status == 200
