"""Requests to other nodes (`server/peers.py`), against a peer on a real socket in process.

A kept connection carries the next request; an answer in chunks is read by h11 and its connection
kept once it ended; a peer that closed an idle connection costs a new one, not a failure; what went wrong
is told apart (no connection: `NotReached`; closed before the answer ended: `Broken`); a request
cancelled on its way closes its connection.
"""

from __future__ import annotations

from functools import partial
from typing import Awaitable, Callable

import pytest
import trio

from runstate.server.peers import IDLE_S_MAX, Broken, NotReached, Peers

from ..ports import free_port

pytestmark = pytest.mark.trio

Answerer = Callable[[bytes, trio.SocketStream], Awaitable[bool]]


class Peer:
    """A peer whose answers `answer` writes (False: close the connection), counting connections
    and keeping every request as it came."""

    def __init__(self, answer: Answerer) -> None:
        self.answer = answer
        self.connections = 0
        self.requests: list[bytes] = []
        self.closed = trio.Event()
        self.url = ""

    async def serve(self, stream: trio.SocketStream) -> None:
        self.connections += 1
        buffer = b""
        try:
            while True:
                while b"\r\n\r\n" not in buffer:
                    data = await stream.receive_some(65536)
                    if not data:
                        return
                    buffer += data
                head, _, rest = buffer.partition(b"\r\n\r\n")
                length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")), 0)
                while len(rest) < length:
                    rest += await stream.receive_some(65536)
                self.requests.append(head + b"\r\n\r\n" + rest[:length])
                buffer = rest[length:]
                if not await self.answer(self.requests[-1], stream):
                    return
        finally:
            await stream.aclose()
            self.closed.set()


async def start(nursery: trio.Nursery, answer: Answerer) -> Peer:
    peer = Peer(answer)
    listeners = await nursery.start(partial(trio.serve_tcp, peer.serve, 0, host="127.0.0.1"))
    peer.url = "http://127.0.0.1:%d" % listeners[0].socket.getsockname()[1]
    return peer


async def plain(request: bytes, stream: trio.SocketStream) -> bool:
    body = request.partition(b"\r\n\r\n")[2]
    await stream.send_all(b"HTTP/1.1 201 \r\ncontent-type: application/json\r\ncontent-length: %d\r\nx-seen: 1\r\n\r\n%s"
                          % (len(body) + 2, b"[" + body + b"]"))
    return True


async def test_a_kept_connection_carries_the_next_request(nursery: trio.Nursery) -> None:
    peer = await start(nursery, plain)
    peers = Peers()
    first = await peers.request("POST", peer.url, "/v1/x?y=1", [(b"authorization", b"Bearer k")], b'{"a":1}')
    second = await peers.request("GET", peer.url, "/v1/x", [], b"")
    assert (first.status, first.body) == (201, b'[{"a":1}]')
    assert first.headers == [(b"content-type", b"application/json"), (b"content-length", b"9"), (b"x-seen", b"1")]
    assert (second.status, second.body) == (201, b"[]")
    assert peer.connections == 1
    assert peer.requests[0].startswith(b"POST /v1/x?y=1 HTTP/1.1\r\nhost: 127.0.0.1:")
    assert b"\r\nauthorization: Bearer k\r\ncontent-length: 7\r\n\r\n{\"a\":1}" in peer.requests[0]
    assert b"content-length" not in peer.requests[1]  # a GET without a body says none
    await peers.aclose()


async def test_a_connection_idle_too_long_is_not_taken_again(nursery: trio.Nursery, autojump_clock: object) -> None:
    """Idle past IDLE_S_MAX, a kept connection is closed and the next request goes on a new one,
    before the peer's keep-alive could end it under a request."""
    peer = await start(nursery, plain)
    peers = Peers()
    await peers.request("GET", peer.url, "/v1/x", [], b"")
    await trio.sleep(IDLE_S_MAX - 0.5)
    await peers.request("GET", peer.url, "/v1/x", [], b"")
    assert peer.connections == 1
    await trio.sleep(IDLE_S_MAX + 0.5)
    answer = await peers.request("GET", peer.url, "/v1/x", [], b"")
    assert (answer.status, peer.connections) == (201, 2)
    await peer.closed.wait()  # the stale one was closed, not left open
    await peers.aclose()


async def test_an_answer_in_chunks_is_read_whole_and_its_connection_kept_once_it_ended(nursery: trio.Nursery) -> None:
    """h11 reads what is not of the plainest shape; an answer in chunks that ended cleanly leaves
    the connection for the next request, one that came with bytes past it or said close does not."""
    async def chunked(request: bytes, stream: trio.SocketStream) -> bool:
        body = request.partition(b"\r\n\r\n")[2]
        head = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n"
        if body == b"close":
            head += b"connection: close\r\n"
        answer = head + b"\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"
        if body == b"more":
            answer += b"HTTP/1.1 200 OK\r\n"  # never asked for
        await stream.send_all(answer)
        return body != b"close"

    peer = await start(nursery, chunked)
    peers = Peers()
    answer = await peers.request("POST", peer.url, "/v1/x", [], b"body")
    assert (answer.status, answer.body) == (200, b"abcde")
    await peers.request("GET", peer.url, "/v1/x", [], b"")
    assert peer.connections == 1
    for body, connections in ((b"more", 1), (b"x", 2), (b"close", 2), (b"x", 3)):
        answer = await peers.request("POST", peer.url, "/v1/x", [], body)
        assert (answer.body, peer.connections) == (b"abcde", connections)


async def test_an_idle_connection_the_peer_closed_is_replaced_not_failed(nursery: trio.Nursery) -> None:
    async def once(request: bytes, stream: trio.SocketStream) -> bool:
        await plain(request, stream)
        return False  # then closes, without saying so in the answer

    peer = await start(nursery, once)
    peers = Peers()
    await peers.request("POST", peer.url, "/v1/x", [], b"1")
    await peer.closed.wait()
    answer = await peers.request("POST", peer.url, "/v1/x", [], b"2")
    assert (answer.status, answer.body, peer.connections) == (201, b"[2]", 2)


async def test_a_peer_that_closes_before_its_answer_ends_is_broken(nursery: trio.Nursery) -> None:
    async def cut(request: bytes, stream: trio.SocketStream) -> bool:
        await stream.send_all(b"HTTP/1.1 200 \r\ncontent-length: 10\r\n\r\nabc")
        return False

    peer = await start(nursery, cut)
    with pytest.raises(Broken):
        await Peers().request("POST", peer.url, "/v1/x", [], b"1")


async def test_no_connection_is_not_reached() -> None:
    port = free_port()  # a port nobody listens on
    with pytest.raises(NotReached):
        await Peers().request("GET", f"http://127.0.0.1:{port}", "/v1/x", [], b"")


async def test_a_request_cancelled_on_its_way_closes_its_connection(nursery: trio.Nursery, autojump_clock: object) -> None:
    held: list[bytes] = []

    async def hold_first(request: bytes, stream: trio.SocketStream) -> bool:
        if not held:
            held.append(request)
            await trio.sleep_forever()
        return await plain(request, stream)

    peer = await start(nursery, hold_first)
    peers = Peers()
    with trio.move_on_after(5) as waiting:
        await peers.request("POST", peer.url, "/v1/x", [], b"1")
    assert waiting.cancelled_caught
    answer = await peers.request("POST", peer.url, "/v1/x", [], b"2")
    assert (answer.body, peer.connections) == (b"[2]", 2)


async def test_a_header_holding_a_line_break_is_not_sent(nursery: trio.Nursery) -> None:
    peer = await start(nursery, plain)
    with pytest.raises(Exception) as raised:
        await Peers().request("GET", peer.url, "/v1/x", [(b"x-a", b"1\r\nx-b: 2")], b"")
    assert "line break" in str(raised.value)
    assert peer.requests == []
