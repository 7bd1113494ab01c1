"""Requests of every shape sent back to back on one connection each get their own answer, in order.

The server runs in process on a real socket (`listener.serve_app`, as `runstate serve` runs it).
Every pair of request shapes (plain, chunked, `Expect: 100-continue` with and without a valid key,
an unknown key, a body over the limit, HTTP/1.0, `Connection: close`) is sent in one write, and
again split at every byte: the first part sent, the server left to read it and wait for more, then
the rest. Each request gets its answer, in the order sent, until an answer that closes the
connection (said with `Connection: close` or by HTTP/1.0); nothing is answered after it, and
nothing is logged above info (no traceback, no `BusyResourceError`: one writer per connection).
"""

from __future__ import annotations

import logging
from contextlib import asynccontextmanager
from functools import partial
from typing import AsyncIterator, Callable

import orjson
import pytest
import trio
import trio.testing

from runstate.actors import Limits
from runstate.server.app import create_app
from runstate.server.http import serve_whole
from runstate.server.listener import Listening, serve_app
from runstate.server.routes import ROUTER
from runstate.server.settings import Settings

pytestmark = pytest.mark.trio

KEY = "k"
# Small bodies: a body over 32 bytes is over the limit (413).
LIMITS = Limits(payload_bytes_max=16, request_bytes_max=32)
# Connections split at once (the server reads each first part before the rest is sent).
AT_ONCE = 100


@asynccontextmanager
async def serving() -> AsyncIterator[int]:
    """A server in this process on a free port of 127.0.0.1: its port."""
    app = create_app(Settings(api_key=KEY, space_id="s", seed=3, limits=LIMITS, keep_alive_s=60))
    app.lifecycle.external = True
    async with trio.open_nursery() as nursery:
        await nursery.start(app.lifecycle.run_runtime)
        await app.runtime.became_ready.wait()
        stop = trio.Event()
        binds = await nursery.start(partial(
            serve_app, app, Listening(port=0, keep_alive_s=60), app.runtime.doors, shutdown_trigger=stop.wait,
            plain=partial(serve_whole, app.runtime, ROUTER),
        ))
        yield int(binds[0].rsplit(":", 1)[1])
        stop.set()
        await app.runtime.doors.all_closed.wait()
        await app.lifecycle.stop_runtime()
        nursery.cancel_scope.cancel()


def _post(name: str, *, key: str = KEY, version: bytes = b"1.1", extra: bytes = b"", body: bytes | None = None,
          chunked: bool = False) -> bytes:
    """A POST making a run named `name`, replayed from its Idempotency-Key the next times."""
    body = orjson.dumps({"name": name}) if body is None else body
    head = (b"POST /v1/spaces/s/scopes HTTP/%s\r\nHost: x\r\nAuthorization: Bearer %s\r\nIdempotency-Key: %s\r\n"
            % (version, key.encode(), name.encode()))
    if chunked:
        return head + extra + b"Transfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)
    return head + extra + b"Content-Length: %d\r\n\r\n%s" % (len(body), body)


# Each shape: its bytes, what its answer must be (status, then a check of the body), and whether
# its answer closes the connection.
Check = Callable[[int, bytes], bool]


def _made(name: str) -> Check:
    return lambda status, body: status == 201 and orjson.loads(body)["name"] == name


def _refused(status_wanted: int, code: str) -> Check:
    return lambda status, body: status == status_wanted and orjson.loads(body)["error"]["code"] == code


SHAPES: dict[str, tuple[bytes, Check, bool]] = {
    "plain": (_post("plain"), _made("plain"), False),
    "chunked": (_post("chunked", chunked=True), _made("chunked"), False),
    "expect-key": (_post("expect-key", extra=b"Expect: 100-continue\r\n"), _made("expect-key"), False),
    "expect-no-key": (_post("expect-no-key", key="wrong", extra=b"Expect: 100-continue\r\n"),
                      _refused(401, "UNAUTHENTICATED"), True),
    "unknown-key": (_post("unknown-key", key="wrong"), _refused(401, "UNAUTHENTICATED"), False),
    "oversized": (_post("oversized", body=b"x" * 40), _refused(413, "VALIDATION_FAILED"), False),
    "http-1.0": (_post("http-1.0", version=b"1.0"), _made("http-1.0"), True),
    "close": (_post("close", extra=b"Connection: close\r\n"), _made("close"), True),
}
PAIRS = [(first, second) for first in SHAPES for second in SHAPES]
# And a request the application answers without reading its (empty) body: a console page.
PAGE = (b"GET /console/login HTTP/1.1\r\nHost: x\r\nAccept: text/html\r\n\r\n",
        lambda status, body: status == 200 and b"<html" in body, False)
WITH_PAGE = {**SHAPES, "page": PAGE}


async def _answers(stream: trio.SocketStream, count: int, closes: bool) -> list[tuple[int, bytes, bytes]]:
    """The next `count` final answers, (status, head, body), with any 100 Continue before them;
    when the last one closes the connection, also the end of the stream (nothing after it)."""
    buffer = b""
    answers: list[tuple[int, bytes, bytes]] = []
    while True:
        end = buffer.find(b"\r\n\r\n")
        if end >= 0:
            head = buffer[:end]
            status = int(head.split(b" ", 2)[1])
            if status == 100:
                answers.append((status, head, b""))
                buffer = buffer[end + 4:]
                continue
            length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:"))
            if len(buffer) >= end + 4 + length:
                answers.append((status, head, buffer[end + 4:end + 4 + length]))
                buffer = buffer[end + 4 + length:]
                continue
        if sum(1 for answer in answers if answer[0] != 100) == count and not closes:
            assert buffer == b"", buffer
            return answers
        with trio.fail_after(10):
            try:
                data = await stream.receive_some(65536)
            except trio.BrokenResourceError:  # reset: only after every answer of a closing connection
                data = b""
        if not data:
            assert buffer == b"", buffer
            return answers
        buffer += data


def _check(pair: tuple[str, str], answers: list[tuple[int, bytes, bytes]]) -> None:
    first, second = (WITH_PAGE[name] for name in pair)
    finals = [answer for answer in answers if answer[0] != 100]
    interim = len(answers) - len(finals)
    assert interim <= sum(1 for name in pair if name == "expect-key"), (pair, answers)
    expected = [first] if first[2] else [first, second]
    assert len(finals) == len(expected), (pair, answers)
    for (status, head, body), (_, check, closes) in zip(finals, expected):
        assert check(status, body), (pair, status, body)
        assert (b"connection: close" in head.lower()) == closes, (pair, head)


async def _exchange(port: int, parts: list[bytes], pair: tuple[str, str], sent: trio.Event | None) -> None:
    sock = trio.socket.socket()
    await sock.connect(("127.0.0.1", port))
    async with trio.SocketStream(sock) as stream:
        await stream.send_all(parts[0])
        if len(parts) > 1:
            assert sent is not None
            await sent.wait()  # every connection's first part has been read by the server
            try:
                await stream.send_all(parts[1])
            except trio.BrokenResourceError:  # closed after an answer that said so, before the rest came
                assert WITH_PAGE[pair[0]][2], pair
        first, second = WITH_PAGE[pair[0]], WITH_PAGE[pair[1]]
        expected = [first] if first[2] else [first, second]
        _check(pair, await _answers(stream, len(expected), expected[-1][2]))


@pytest.fixture
def quiet(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.INFO)
    return caplog


def _nothing_logged(caplog: pytest.LogCaptureFixture) -> None:
    loud = [record for record in caplog.records if record.levelno > logging.INFO or record.exc_info]
    assert loud == [], [record.getMessage() for record in loud]
    assert "BusyResourceError" not in caplog.text


async def test_every_pair_of_shapes_in_one_write_is_answered_in_order(quiet):
    """The eight shapes, and a console page (which reads no body) before or after each."""
    async with serving() as port:
        quiet.clear()  # (the start's warning: no data directory)
        for pair in [(first, second) for first in WITH_PAGE for second in WITH_PAGE]:
            await _exchange(port, [WITH_PAGE[pair[0]][0] + WITH_PAGE[pair[1]][0]], pair, None)
    _nothing_logged(quiet)


@pytest.mark.parametrize("first", list(SHAPES))
async def test_every_pair_split_at_every_byte_is_answered_in_order(quiet, first: str):
    """The split falls inside a request line, a header, a chunk, between head and body (a client
    that waits for 100 Continue gets it then, if it showed a valid key) and between requests.
    (One test per first shape, each with every second shape, so that they can run side by side.)"""
    splits = [((first, second), at) for second in SHAPES for at in range(1, len(SHAPES[first][0] + SHAPES[second][0]))]
    async with serving() as port:
        quiet.clear()  # (the start's warning: no data directory)
        for start in range(0, len(splits), AT_ONCE):
            sent = trio.Event()
            async with trio.open_nursery() as nursery:
                for pair, at in splits[start:start + AT_ONCE]:
                    data = SHAPES[pair[0]][0] + SHAPES[pair[1]][0]
                    nursery.start_soon(_exchange, port, [data[:at], data[at:]], pair, sent)
                await trio.testing.wait_all_tasks_blocked()
                sent.set()
    _nothing_logged(quiet)
