"""A read at a past point takes `at` and the query parameters of the read it twins, and no other
(the same rule as every route of the API): a known one still narrows the answer there."""

from __future__ import annotations

import pytest

from tests.history.helpers import start
from tests.server.asgi_client import AsgiClient

pytestmark = pytest.mark.trio


async def test_a_twin_takes_its_reads_parameters_and_refuses_others(nursery, autojump_clock, tmp_path):
    runtime = await start(nursery, str(tmp_path / "data"))
    client = AsgiClient(runtime)
    for _ in range(3):
        await client.run()
    newest = (await client.get("/events?latest=1")).json["events"][0]["eventId"]
    past = await client.get(f"/history/scopes?at={newest}&limit=2")
    assert past.status == 200, past
    assert len(past.json["scopes"]) == 2 and past.json["truncated"] is True, past
    events = await client.get(f"/history/events?at={newest}&latest=1")
    assert events.status == 200 and [event["eventId"] for event in events.json["events"]] == [newest], events
    refused = await client.get(f"/history/scopes?at={newest}&limits=2")
    assert refused.status == 400 and refused.code == "VALIDATION_FAILED", refused
    assert refused.json["error"]["message"] == (
        "unknown query parameter 'limits' (did you mean 'limit'?): this request takes at, cursor, limit"
    )
