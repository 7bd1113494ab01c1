"""HEAD is served wherever GET is (RFC 9110 9.3.2): the GET's status and headers, no body.

In process on a real socket (`listener.serve_app`, as `runstate serve` runs it), so that what goes
on the wire is checked: a HEAD's answer says the GET's Content-Length and carries no body, and the
next request on the connection is answered intact. A path with a GET names HEAD in its 405's Allow.
"""

from __future__ import annotations

from contextlib import asynccontextmanager
from functools import partial
from typing import AsyncIterator

import h11
import orjson
import pytest
import trio

from runstate.server.app import create_app
from runstate.server.http import serve_whole
from runstate.server.listener import Listening, serve_app
from runstate.server.routes import ROUTER
from runstate.server.settings import Settings

pytestmark = pytest.mark.trio

KEY = "k"


@asynccontextmanager
async def serving() -> AsyncIterator[int]:
    """A server in this process on a free port of 127.0.0.1: its port."""
    app = create_app(Settings(api_key=KEY, space_id="s", seed=3))
    app.lifecycle.external = True
    async with trio.open_nursery() as nursery:
        await nursery.start(app.lifecycle.run_runtime)
        await app.runtime.became_ready.wait()
        stop = trio.Event()
        binds = await nursery.start(partial(
            serve_app, app, Listening(port=0), app.runtime.doors, shutdown_trigger=stop.wait,
            plain=partial(serve_whole, app.runtime, ROUTER),
        ))
        yield int(binds[0].rsplit(":", 1)[1])
        stop.set()
        await app.runtime.doors.all_closed.wait()
        await app.lifecycle.stop_runtime()
        nursery.cancel_scope.cancel()


async def exchange(stream: trio.SocketStream, client: h11.Connection, method: str, target: str) -> tuple[int, dict[str, str], bytes]:
    """One request on the connection and its answer: status, headers, body (as h11 frames it)."""
    headers = [("host", "x"), ("authorization", f"Bearer {KEY}")]
    await stream.send_all(client.send(h11.Request(method=method, target=target, headers=headers)) + client.send(h11.EndOfMessage()))
    status, answer_headers, body = 0, {}, b""
    while True:
        event = client.next_event()
        if event is h11.NEED_DATA:
            client.receive_data(await stream.receive_some(65536))
        elif isinstance(event, h11.Response):
            status = event.status_code
            answer_headers = {name.decode(): value.decode() for name, value in event.headers}
        elif isinstance(event, h11.Data):
            body += event.data
        elif isinstance(event, h11.EndOfMessage):
            client.start_next_cycle()
            return status, answer_headers, body


async def test_a_head_answers_the_gets_head_without_its_body_and_the_connection_goes_on():
    """HEAD of a read, of /healthz and of an unknown id: the status and Content-Length its GET
    answers, no byte of body (the next request on the connection is answered whole)."""
    async with serving() as port:
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        client = h11.Connection(h11.CLIENT)
        made = await exchange(stream, client, "GET", "/v1/spaces/s/mailboxes")
        assert made[0] == 200
        for target in ("/v1/spaces/s/scopes", "/healthz", "/v1/spaces/s/scopes/sc_nope", "/v1/openapi.json"):
            status, headers, body = await exchange(stream, client, "GET", target)
            head_status, head_headers, head_body = await exchange(stream, client, "HEAD", target)
            assert head_status == status and head_status in (200, 404), target
            assert head_headers["content-length"] == headers["content-length"] == str(len(body)), target
            assert head_headers["content-type"] == headers["content-type"] == "application/json"
            assert head_body == b""
        # The connection is still in step: the next answer is whole.
        status, _, body = await exchange(stream, client, "GET", "/v1/spaces/s/scopes")
        assert status == 200 and orjson.loads(body)["scopes"] == []
        await stream.aclose()


async def test_a_head_where_there_is_no_get_is_a_405_and_allow_names_head_beside_get():
    """HEAD of a path with no GET is 405 naming what it takes; a 405 of a path with a GET names HEAD."""
    async with serving() as port:
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        client = h11.Connection(h11.CLIENT)
        status, headers, body = await exchange(stream, client, "HEAD", "/v1/spaces/s/claims")
        assert status == 405 and headers["allow"] == "POST" and body == b""
        status, headers, body = await exchange(stream, client, "DELETE", "/v1/spaces/s/scopes")
        assert status == 405 and headers["allow"] == "GET, HEAD, POST"
        assert orjson.loads(body)["error"]["message"].endswith("use GET, HEAD, POST")
        await stream.aclose()
