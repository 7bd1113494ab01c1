"""The event stream over real HTTP: who may open it, how a reconnect resumes, one watch per space
however many tabs, and a shutdown that does not wait for open streams."""

from __future__ import annotations

import contextlib
import signal
import time

import httpx
import pytest

from ..servers import ServerProcess
from .conftest import ADMIN_KEY, API_KEY, Console

pytestmark = pytest.mark.e2e
# A kernel of several partitions: spaces spread over them, each with its own journal and actors.
SERVER_ARGS = ("--partitions", "3")


def _frames(response: httpx.Response, count: int, timeout_s: float = 10) -> list[dict]:
    """The next `count` event frames of an open stream, as {id, event, data}."""
    frames: list[dict] = []
    current: dict = {}
    deadline = time.monotonic() + timeout_s
    for line in response.iter_lines():
        if time.monotonic() > deadline:
            break
        if not line:
            if "event" in current:
                frames.append(current)
                if len(frames) == count:
                    return frames
            current = {}
            continue
        name, _, value = line.partition(": ")
        if name in ("id", "event", "data"):
            current[name] = value
    raise AssertionError(f"only {len(frames)} of {count} frames came: {frames}")


def test_the_stream_needs_a_session_that_opens_the_space(console: Console):
    assert httpx.get(console.url + "/console/s/default/stream").status_code == 303
    other = console.session(console.key_for("elsewhere"))
    assert other.get("/console/s/default/stream").status_code == 404
    assert console.session().get("/console/s/default/stream?after=-1").status_code == 400


def test_ids_are_cursors_and_a_reconnect_with_last_event_id_resumes_exactly(console: Console):
    """The stream sends each event with its number as `id:`; reconnecting with Last-Event-ID
    (which wins over the page's `after`) gets exactly the events after it."""
    session = console.session()
    newest = int(console.api.get("/v1/spaces/default/events", params={"cursor": "0", "limit": 1000}).json()["nextCursor"])
    run = console.run("resume")
    with session.stream("GET", f"/console/s/default/stream?after={newest}") as first:
        assert first.headers["content-type"].startswith("text/event-stream")
        for n in range(3):
            console.claim(run["id"], f"resume:{n}", "w")
        frames = _frames(first, 4)
    ids = [int(frame["id"]) for frame in frames]
    assert ids == list(range(newest + 1, newest + 5)) and all(frame["event"] == "change" for frame in frames)
    for n in range(3, 5):
        console.claim(run["id"], f"resume:{n}", "w")
    with session.stream("GET", "/console/s/default/stream?after=0", headers={"last-event-id": str(ids[-1])}) as again:
        resumed = _frames(again, 2)
    assert [int(frame["id"]) for frame in resumed] == [ids[-1] + 1, ids[-1] + 2]
    assert '"aggregate":{"type":"claim","id":"resume:3"}' in resumed[0]["data"]


def test_many_tabs_of_a_space_park_one_watch(console: Console):
    """Three open streams of `default` park one watch on its event log (GET /ops/waits)."""
    sessions = [console.session() for _ in range(3)]
    with contextlib.ExitStack() as open_streams:
        for session in sessions:
            response = open_streams.enter_context(session.stream("GET", "/console/s/default/stream?after=0"))
            assert response.status_code == 200
        deadline = time.monotonic() + 5
        while True:
            waits = console.api.get("/v1/spaces/default/ops/waits").json()["waits"]
            watches = [w for w in waits if w["on"] == "events"]
            if watches or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert watches == [{"on": "events", "calls": 1}]
        admin = console.session(ADMIN_KEY)
        assert "3 live stream(s) open" in admin.get("/console/spaces").text


def test_a_shutdown_ends_open_streams_at_once():
    """SIGTERM with a console stream open: the server stops within a few seconds, exit 0."""
    with ServerProcess(api_key=API_KEY) as server:
        client = httpx.Client(base_url=server.base_url, follow_redirects=False, timeout=10)
        assert client.post("/console/login", data={"key": API_KEY}, headers={"origin": server.base_url}).status_code == 303
        with client.stream("GET", "/console/s/default/stream?after=0") as response:
            assert response.status_code == 200
            started = time.monotonic()
            assert server.stop(signal.SIGTERM, timeout_s=10) == 0
            assert time.monotonic() - started < 5
