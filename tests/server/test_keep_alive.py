"""How long a connection waits for its next request: the keep-alive sweep and the stop.

In process, on a real socket (`listener.serve_app`, as `runstate serve` runs it), in virtual time:
a connection asked nothing for `keep_alive_s` is closed by the server's one keep-alive sweep, not
before and at most a tenth of the bound later (below 10 s); each connection counts from its own last
answer; one that keeps asking stays open; a stop of the server ends an idle wait at once, and a
request that came just before the stop is still answered (with `Connection: close`). Plain and TLS.
"""

from __future__ import annotations

import socket
import ssl
import subprocess
from contextlib import asynccontextmanager
from functools import partial
from typing import Any, AsyncIterator

import pytest
import trio
import trio.testing

from runstate.server.doors import LINGER_BYTES_MAX, LINGER_S, Doors
from runstate.server.listener import Listening, serve_app

from ..tools import require_tool

pytestmark = pytest.mark.trio

KEEP_ALIVE_S = 5.0
STEP_S = KEEP_ALIVE_S / 10  # how late the sweep may be, for a bound under 10 s
REQUEST = b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"


async def ok(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """An application that answers every request 200 "ok" (and speaks no lifespan)."""
    if scope["type"] != "http":
        raise RuntimeError("no lifespan here")
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
    await send({"type": "http.response.body", "body": b"ok"})


@asynccontextmanager
async def serving(listening: Listening) -> AsyncIterator[tuple[int, Doors, trio.Event]]:
    """The server in this process: its port, its doors, and the event that stops it."""
    doors = Doors(connections_max=100, body_bytes_in_flight_max=1 << 20, linger_bytes_max=LINGER_BYTES_MAX, linger_s=LINGER_S)
    stop = trio.Event()
    async with trio.open_nursery() as nursery:
        binds = await nursery.start(partial(serve_app, ok, listening, doors, shutdown_trigger=stop.wait))
        yield int(binds[0].rsplit(":", 1)[1]), doors, stop
        stop.set()


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    """A self-signed certificate for 127.0.0.1: (certfile, keyfile)."""
    openssl = require_tool("openssl", "openssl")
    folder = tmp_path_factory.mktemp("tls")
    cert, key = str(folder / "server.pem"), str(folder / "server.key")
    subprocess.run(
        [openssl, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2",
         "-subj", "/CN=runstate test", "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", key, "-out", cert],
        check=True, capture_output=True, timeout=60,
    )
    return cert, key


@pytest.fixture(params=["plain", "tls"])
def secure(request: pytest.FixtureRequest, certificate: tuple[str, str]) -> tuple[str, str] | None:
    return certificate if request.param == "tls" else None


def listening(secure: tuple[str, str] | None, keep_alive_s: float = KEEP_ALIVE_S) -> Listening:
    cert, key = secure if secure is not None else (None, None)
    return Listening(port=0, keep_alive_s=keep_alive_s, read_timeout_s=90, certfile=cert, keyfile=key)


async def connect(port: int, secure: tuple[str, str] | None) -> trio.abc.Stream:
    if secure is None:
        return await trio.open_tcp_stream("127.0.0.1", port)
    context = ssl.create_default_context(cafile=secure[0])
    return await trio.open_ssl_over_tcp_stream("127.0.0.1", port, ssl_context=context)


async def ask(stream: trio.abc.Stream) -> bytes:
    """One request and its whole answer (head and body)."""
    await stream.send_all(REQUEST)
    received = b""
    while not received.endswith(b"\r\n\r\nok"):
        chunk = await stream.receive_some(4096)
        assert chunk, f"the connection closed in the middle of an answer: {received!r}"
        received += chunk
    return received


async def closed_after(stream: trio.abc.Stream) -> float:
    """Seconds until the server closes the connection (nothing else may arrive), at most 10 times the bound."""
    began = trio.current_time()
    with trio.fail_after(10 * KEEP_ALIVE_S):
        try:
            data = await stream.receive_some(4096)
        except trio.BrokenResourceError:  # TLS: the server closed without a close_notify
            data = b""
    assert data == b"", f"the server sent {data!r} to an idle connection"
    return trio.current_time() - began


async def test_an_idle_connection_is_closed_by_the_sweep_after_keep_alive_and_not_before(secure, autojump_clock):
    """Connections gone idle at 0, 0.4 and 2.3 s each close between keep_alive_s and keep_alive_s
    + a tenth of it after their own last answer (the second is 4.6 s into its wait when the sweep
    ends the first's); one asked every 3 s is still served after 4 bounds."""
    async with serving(listening(secure)) as (port, doors, _):
        first, second, third, busy = [await connect(port, secure) for _ in range(4)]
        idle_for: dict[str, float] = {}

        async def idle(name: str, stream: trio.abc.Stream, after_s: float) -> None:
            await trio.sleep(after_s)
            assert (await ask(stream)).startswith(b"HTTP/1.1 200 ")
            idle_for[name] = await closed_after(stream)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(idle, "first", first, 0.0)
            nursery.start_soon(idle, "second", second, 0.4)
            nursery.start_soon(idle, "third", third, 2.3)
            for _ in range(int(4 * KEEP_ALIVE_S / 3)):
                assert (await ask(busy)).startswith(b"HTTP/1.1 200 ")
                await trio.sleep(3.0)
        for name in ("first", "second", "third"):
            assert KEEP_ALIVE_S <= idle_for[name] <= KEEP_ALIVE_S + STEP_S, (name, idle_for[name])
        assert (await ask(busy)).startswith(b"HTTP/1.1 200 ")
        assert doors.connections == 1
        await busy.aclose()


async def test_a_stop_ends_an_idle_wait_at_once(secure, autojump_clock):
    """With a keep-alive of 60 s, a connection waiting for its next request closes the moment the
    server stops, and the serving ends with it."""
    async with serving(listening(secure, keep_alive_s=60)) as (port, doors, stop):
        stream = await connect(port, secure)
        assert (await ask(stream)).startswith(b"HTTP/1.1 200 ")
        await trio.sleep(1.0)
        stopped = trio.current_time()
        stop.set()
        assert await closed_after(stream) == 0.0
        with trio.fail_after(1.0):
            await doors.all_closed.wait()
        assert trio.current_time() == stopped


async def test_a_request_that_came_just_before_the_stop_is_answered(autojump_clock):
    """The bytes of a request are in the server's socket when its idle wait is ended by the stop:
    it is read and answered, with `Connection: close`, and the connection then closes."""
    async with serving(listening(None, keep_alive_s=60)) as (port, doors, _):
        client = socket.create_connection(("127.0.0.1", port))
        client.setblocking(False)
        await trio.testing.wait_all_tasks_blocked()
        assert doors.connections == 1
        client.send(REQUEST)  # no checkpoint from here to the stop: the server's wait is not over yet
        doors.stop()
        received = b""
        with trio.fail_after(1.0):
            while True:
                await trio.lowlevel.wait_readable(client)
                chunk = client.recv(4096)
                if not chunk:
                    break
                received += chunk
        client.close()
        head, _, body = received.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200 ") and b"connection: close" in head.lower() and body == b"ok"
