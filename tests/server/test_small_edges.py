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
