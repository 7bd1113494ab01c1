"""Small edges of the HTTP shell: the probe a health check names, the key `/metrics` asks away
from loopback as the document declares it, a path's bad percent escape, and where the 201 of a
pool or a budget says what it made is read.
"""

from __future__ import annotations

import pytest

from .asgi_client import AsgiClient, client  # noqa: F401 - the fixture


@pytest.mark.trio
async def test_a_probe_other_than_live_or_ready_is_refused_naming_the_probes(client: AsgiClient, autojump_clock):
    """A mistyped liveness probe answered readiness, so a check that meant liveness restarted a
    server that was only recovering; it is 400 naming both probes now."""
    assert (await client.get("/healthz?probe=live")).json == {"status": "live"}
    assert (await client.get("/healthz?probe=ready")).json == {"status": "ok"}
    assert (await client.get("/healthz")).json == {"status": "ok"}
    for probe in ("liev", "readiness", ""):
        refused = await client.get(f"/healthz?probe={probe}")
        assert (refused.status, refused.code) == (400, "VALIDATION_FAILED"), probe
        message = refused.json["error"]["message"]
        assert repr(probe) in message and "live" in message and "ready" in message


ADMIN_KEY = "small-edges-admin-key-0123456789"


@pytest.mark.trio
async def test_metrics_away_from_loopback_needs_the_admin_key_as_the_document_says(nursery, autojump_clock):
    """The document declared `/metrics` open to all (`security: []`), though from any address
    but loopback it answers 401 without the admin key: it says a key is optional (none from
    loopback, the admin key elsewhere), and the server does what it says."""
    from runstate.server.http import serve_http
    from runstate.server.openapi import openapi
    from runstate.server.routes import ROUTER
    from runstate.server.settings import Settings
    from runstate.testing import call_asgi

    from .asgi_client import API_KEY, SPACE, start_runtime

    operation = openapi()["paths"]["/metrics"]["get"]
    assert operation["security"] == [{}, {"bearer": []}]
    assert "loopback" in operation["description"] and "admin key" in operation["description"]
    assert {"401", "403"} <= set(operation["responses"])
    runtime = await start_runtime(nursery, Settings(api_key=API_KEY, space_id=SPACE, admin_key=ADMIN_KEY, seed=7))

    async def app(scope, receive, send):  # type: ignore[no-untyped-def]
        await serve_http(runtime, ROUTER, scope, receive, send)

    async def scrape(address: str, key: str | None) -> int:
        headers = {} if key is None else {"authorization": f"Bearer {key}"}
        status, _, _ = await call_asgi(app, "GET", "/metrics", headers, b"", client=(address, 40000))
        return status

    assert await scrape("127.0.0.1", None) == 200
    assert await scrape("10.1.2.3", None) == 401
    assert await scrape("10.1.2.3", API_KEY) == 403
    assert await scrape("10.1.2.3", ADMIN_KEY) == 200


@pytest.mark.trio
async def test_a_path_with_a_bad_percent_escape_is_refused_naming_it(client: AsgiClient, autojump_clock):
    """`%ZZ` is no escape: it was read as the three characters, so `/claims/a%ZZ/release` named
    the key `a%ZZ`, which a client that escapes its keys never sends. It is 400 naming it now;
    a good escape (`%25`, a '%') still reads as its character."""
    run = await client.run()
    for tail in (f"/scopes/{run}%ZZ", "/claims/a%ZZ/release", "/claims/a%2/release", "/claims/a%/release", "/scopes%zz"):
        refused = await client.post(tail, {"token": "ct_x"}) if "claims" in tail else await client.get(tail)
        assert (refused.status, refused.code) == (400, "VALIDATION_FAILED"), tail
        assert "'%" in refused.json["error"]["message"] and "percent escape" in refused.json["error"]["message"], tail
    acquired = await client.post("/claims", {"key": "50%", "scopeId": run, "holder": "h", "holderSession": "s", "leaseSeconds": 30})
    assert acquired.status == 200, acquired
    released = await client.post("/claims/50%25/release", {"token": acquired.json["token"]})
    assert released.status == 200, released
