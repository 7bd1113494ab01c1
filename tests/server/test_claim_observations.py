"""A claim release's observation, in the release's event (`claim.released`), as the API reads it
and as recovery rebuilds it from the journal. In virtual time, in process."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from runstate.actors import Clock
from runstate.actors.claiming import OBSERVATION_EVENT_BYTES_MAX
from runstate.actors.events import payload_of
from runstate.server.runtime import Runtime
from runstate.server.settings import Settings
from runstate.snapshots import load
from runstate.snapshots.datadir import partition_dir
from runstate.snapshots.wal import inline

from ..durability.helpers import MODEL
from .asgi_client import API_KEY, SPACE, T0, AsgiClient

pytestmark = pytest.mark.trio


async def _release(client: AsgiClient, run: str, key: str, **fields) -> None:
    body = {"scopeId": run, "key": key, "holder": "a", "holderSession": "s", "leaseSeconds": 60}
    held = await client.post("/claims", body)
    assert held.status == 200, held
    released = await client.post(f"/claims/{key}/release", {"token": held.json["token"], **fields})
    assert released.status in (200, 204), released


async def test_a_release_event_carries_the_observation_and_recovery_keeps_it(nursery, autojump_clock, tmp_path):
    """A small observation is in its release's event whole, with its size; one past
    OBSERVATION_EVENT_BYTES_MAX only by its size (the journal keeps it whole); a release without
    one says none. A recovery from the journal makes the very same events."""
    data_dir = str(tmp_path / "data")
    # (the journal written inline: virtual time does not jump past a lease while a worker thread writes)
    settings = Settings(api_key=API_KEY, space_id=SPACE, seed=7, data_dir=data_dir)
    runtime = Runtime(settings, clock=Clock(wall_anchor_ms=T0), run_blocking=inline)
    await nursery.start(runtime.run)
    while not runtime.ready:
        await trio.testing.wait_all_tasks_blocked()
    client = AsgiClient(runtime)
    run = await client.run()
    small = {"saw": "<b>3 rows</b>", "rows": [1, 2, 3]}
    large = "x" * OBSERVATION_EVENT_BYTES_MAX  # (its JSON has the two quotes more)
    await _release(client, run, "small", observation=small)
    await _release(client, run, "large", observation=large)
    await _release(client, run, "none")
    page = await client.get("/watch?types=claim.released&waitSeconds=0")
    assert page.status == 200, page
    events = page.json["events"]
    said = {event["aggregate"]["id"]: event["payload"] for event in events}
    assert said == {
        "small": {"generation": 1, "observation": small, "observationBytes": 38},
        "large": {"generation": 1, "observation": None, "observationBytes": OBSERVATION_EVENT_BYTES_MAX + 2},
        "none": {"generation": 1, "observation": None, "observationBytes": None},
    }

    number = runtime.kernel.partition_of(SPACE).number
    loaded = load(partition_dir(data_dir, number), MODEL, repair=False, partition=number)
    replayed = {change[3]: payload_of(change[0], change[4]) for _, change, _ in loaded.state.spaces[SPACE].events.scan()
                if change[0] == "claim.released"}
    assert replayed == said
