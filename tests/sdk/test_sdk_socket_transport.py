"""`SocketTransport`, the default transport for an `http://` server, against scripted TCP servers.

Each test starts a small server on 127.0.0.1 (a free port) that answers with exact bytes, so what
the transport makes of keep-alive, `content-length`, chunked coding, a body up to the end of the
stream, `connection: close`, a pooled connection the server has closed, a malformed answer, a
refused connection and a silent server is checked byte for byte. Each request is answered at
once, so nothing here waits on time, except the silent server, in virtual time.
"""

from __future__ import annotations

import asyncio
from typing import Callable

import pytest
import trio
import trio.testing

import runstate
from runstate import AsyncRunstate, SocketTransport, TransportError
from runstate.transport import HTTPTransport, default_transport


class Server:
    """Reads requests (head and content-length body) and writes what `answer(request, n)` gives:
    bytes to send, or None to close the connection without a word; after the answers numbered
    in `close_after` (or every one, with True) it closes the connection."""

    def __init__(self, answer: Callable[[bytes, int], bytes | None], close_after: set[int] | bool = False) -> None:
        self.answer = answer
        self.close_after = close_after
        self.requests: list[bytes] = []
        self.connections = 0
        self.port = 0

    async def handle(self, stream: trio.SocketStream) -> None:
        self.connections += 1
        buffer = b""
        async with stream:
            while True:
                while b"\r\n\r\n" not in buffer:
                    chunk = await stream.receive_some(65536)
                    if not chunk:
                        return
                    buffer += chunk
                head, _, buffer = buffer.partition(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n")[1:]:
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value)
                while len(buffer) < length:
                    buffer += await stream.receive_some(65536)
                request, buffer = head + b"\r\n\r\n" + buffer[:length], buffer[length:]
                self.requests.append(request)
                answer = self.answer(request, len(self.requests))
                if answer is None:
                    return
                await stream.send_all(answer)
                if self.close_after is True or (self.close_after and len(self.requests) in self.close_after):
                    return

    async def start(self, nursery: trio.Nursery) -> str:
        listeners = await nursery.start(trio.serve_tcp, self.handle, 0)
        self.port = listeners[0].socket.getsockname()[1]
        return f"http://127.0.0.1:{self.port}"


def ok(body: bytes = b'{"ok":true}', extra: bytes = b"") -> bytes:
    return b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n%s\r\n%s" % (len(body), extra, body)


@pytest.mark.trio
async def test_requests_share_one_keep_alive_connection_and_carry_their_headers_and_body():
    server = Server(lambda request, n: ok(b'{"n":%d}' % n))
    async with trio.open_nursery() as nursery:
        url = await server.start(nursery)
        transport = SocketTransport(url)
        for n in (1, 2, 3):
            status, headers, body = await transport.send("POST", "/v1/x", {"authorization": "Bearer k"}, b'{"a":1}', 5)
            assert (status, body) == (200, b'{"n":%d}' % n) and headers["content-type"] == "application/json"
        assert server.connections == 1 and transport.requests == 3
        first = server.requests[0]
        assert first.startswith(b"POST /v1/x HTTP/1.1\r\nhost: 127.0.0.1:%d\r\n" % server.port)
        assert b"authorization: Bearer k\r\n" in first and b"content-length: 7\r\n" in first and first.endswith(b'{"a":1}')
        await transport.aclose()
        nursery.cancel_scope.cancel()


@pytest.mark.trio
async def test_chunked_bodies_bodies_to_the_end_and_connection_close_are_read_as_sent():
    answers = {
        1: b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n4\r\n{\"a\"\r\n3;ext=1\r\n:1}\r\n0\r\nx-trailer: 1\r\n\r\n",
        2: ok(extra=b"connection: close\r\n"),
        3: b"HTTP/1.1 200 OK\r\nx-twice: a\r\nX-Twice: b\r\n\r\n{\"to\":\"the end\"}",
        4: b"HTTP/1.1 204 No Content\r\n\r\n",
    }
    server = Server(lambda request, n: answers[n], close_after={2, 3})
    async with trio.open_nursery() as nursery:
        url = await server.start(nursery)
        transport = SocketTransport(url)
        assert (await transport.send("GET", "/a", {}, None, 5))[2] == b'{"a":1}'
        assert (await transport.send("GET", "/b", {}, None, 5))[2] == b'{"ok":true}'
        status, headers, body = await transport.send("GET", "/c", {}, None, 5)
        assert body == b'{"to":"the end"}' and headers["x-twice"] == "a, b"
        assert (await transport.send("GET", "/d", {}, None, 5))[:1] == (204,)
        assert server.connections == 3  # a new one after each answer that closed
        await transport.aclose()
        nursery.cancel_scope.cancel()


@pytest.mark.trio
async def test_a_pooled_connection_the_server_closed_is_replaced_without_an_error():
    """The server ends each connection after one answer (as at its keep-alive timeout or its
    request limit) without saying so: the next request is written again on a new connection."""
    server = Server(lambda request, n: ok(), close_after=True)
    async with trio.open_nursery() as nursery:
        url = await server.start(nursery)
        transport = SocketTransport(url)
        for _ in range(4):
            assert (await transport.send("GET", "/x", {}, None, 5))[0] == 200
        assert server.connections == 4 and len(server.requests) == 4
        await transport.aclose()
        nursery.cancel_scope.cancel()


@pytest.mark.trio
@pytest.mark.parametrize("answer", [
    b"SMTP ready\r\n\r\n",
    b"HTTP/1.1 abc\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n",
    b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nshort",
    b"HTTP/1.1 200 OK\r\ncontent-length: -1\r\n\r\n",
    b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n",
])
async def test_a_malformed_answer_is_a_transport_error(answer):
    server = Server(lambda request, n: answer, close_after=True)
    async with trio.open_nursery() as nursery:
        url = await server.start(nursery)
        transport = SocketTransport(url)
        with pytest.raises(TransportError):
            await transport.send("GET", "/x", {}, None, 5)
        nursery.cancel_scope.cancel()


@pytest.mark.trio
async def test_a_refused_connection_and_a_bad_header_are_transport_errors():
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]
    await listeners[0].aclose()  # nothing listens there now
    transport = SocketTransport(f"http://127.0.0.1:{port}")
    with pytest.raises(TransportError, match="cannot connect"):
        await transport.send("GET", "/x", {}, None, 5)
    with pytest.raises(TransportError, match="line break"):
        await transport.send("GET", "/x", {"authorization": "Bearer a\r\nx-evil: 1"}, None, 5)


@pytest.mark.trio
async def test_a_silent_server_times_out_as_a_transport_error(autojump_clock):
    """The server reads the request and never answers: the request fails after `timeout_s`."""
    async def silent(stream: trio.SocketStream) -> None:
        await trio.sleep_forever()

    server = Server(lambda request, n: None)
    server.handle = silent  # type: ignore[method-assign]
    async with trio.open_nursery() as nursery:
        url = await server.start(nursery)
        transport = SocketTransport(url)
        started = trio.current_time()
        with pytest.raises(TransportError, match="TimeoutError"):
            await transport.send("GET", "/x", {}, None, 7)
        assert trio.current_time() - started == pytest.approx(7)
        nursery.cancel_scope.cancel()


@pytest.mark.trio
async def test_a_path_outside_ascii_is_percent_encoded_and_a_base_path_is_kept():
    server = Server(lambda request, n: ok())
    async with trio.open_nursery() as nursery:
        url = await server.start(nursery)
        transport = SocketTransport(url + "/prefix/")
        await transport.send("GET", "/v1/spaces/é t/x?a=1", {}, None, 5)
        assert server.requests[0].startswith(b"GET /prefix/v1/spaces/%C3%A9%20t/x?a=1 HTTP/1.1\r\n")
        nursery.cancel_scope.cancel()


def test_the_default_transport_is_ours_for_plain_http_and_httpx_for_tls_or_a_proxy(monkeypatch):
    for name in ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY", "no_proxy", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
    assert isinstance(default_transport("http://127.0.0.1:8080"), SocketTransport)
    assert isinstance(default_transport("https://runstate.example"), HTTPTransport)
    monkeypatch.setenv("HTTP_PROXY", "http://proxy.example:3128")
    assert isinstance(default_transport("http://runstate.example"), HTTPTransport)
    monkeypatch.setenv("NO_PROXY", "runstate.example")
    assert isinstance(default_transport("http://runstate.example"), SocketTransport)
    with pytest.raises(ValueError):
        SocketTransport("https://runstate.example")


@pytest.mark.anyio
async def test_under_asyncio_a_client_talks_to_a_server_through_it():
    """The same transport on asyncio's own streams: a client's calls, and a server that closes."""
    seen: list[bytes] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")), 0)
        seen.append(head + await reader.readexactly(length))
        writer.write(ok(b'{"id":"sc_1","name":null}', b"connection: close\r\n"))
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    rs = AsyncRunstate(api_key="k", space_id="s", base_url=f"http://127.0.0.1:{port}")
    assert isinstance(rs.transport._base, SocketTransport)  # (in the router that learns a cluster's map)
    for _ in range(2):
        assert (await rs.scopes.create()).id == "sc_1"
    assert len(seen) == 2 and seen[0].startswith(b"POST /v1/spaces/s/scopes HTTP/1.1\r\n")
    await rs.aclose()
    server.close()
    await server.wait_closed()
    with pytest.raises(runstate.UnreachableError):
        await AsyncRunstate(api_key="k", space_id="s", base_url=f"http://127.0.0.1:{port}", retries=0).scopes.create()

