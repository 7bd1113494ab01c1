"""The doors: what stands between a TCP connection and the router.

hypercorn parses HTTP/1.1 for us, except the plainest request heads (what every SDK sends), which
the connection reads itself exactly as h11 would (`_plain_request`) to answer them without h11;
this module decides who gets in and what a refusal looks like, in four places:

- **The accept loop** (`serve_app`, our copy of hypercorn's trio worker, plain or TLS): at most
  `connections_max` connections are served at once; one more is answered 503 UNAVAILABLE with the
  envelope and closed, instead of each costing a task, buffers and a descriptor.
- **The connection** (`_Protocol`, hypercorn's h11 protocol with our refusals): the answers the
  HTTP layer gives before our router runs (a 431 for oversized headers or path, a 400 for a
  malformed request line, a bad `Content-Length`, TLS bytes on the plain port, HTTP/0.9) carry the
  error envelope, as every other answer does (clients turn an empty error body into UNAVAILABLE).
  HTTP/2 is not offered: an `Upgrade: h2c` is ignored and the request answered in HTTP/1.1.
- **The body** (`read_body`): read only once the request may proceed (route found, key known), and
  counted against `body_bytes_in_flight_max`, a bound on the bytes held across every request in
  flight: past it a request gets 503 UNAVAILABLE with Retry-After, not memory.
- **The refusal of an unread body** (`drain`, `send_while_discarding`): a request refused before its
  body was read (401 for an unknown key, 413 for a `Content-Length` over the limit) has the rest of
  its body read and dropped, at most `LINGER_BYTES_MAX` bytes for at most `LINGER_S` seconds, before
  the answer goes out. A client that sends its whole body before reading (httpx, the SDKs) then reads
  the answer instead of a reset connection, and the connection can be used again; nothing of the
  body is kept. This is nginx's lingering close, done before the answer rather than after it, since
  hypercorn closes the connection as soon as an answer ends while the client is still sending.

Memory per connection is then bounded by hypercorn's own queue (`APP_QUEUE_MESSAGES` messages of at
most `RECEIVE_BYTES_MAX`) plus, for a request being read, its share of `body_bytes_in_flight_max`.
"""

from __future__ import annotations

import logging
import math
import os
import re
import select
import sys
import time
from functools import partial
from typing import Any, Awaitable, Callable
from urllib.parse import unquote

import h11
import orjson
import trio
from hypercorn.config import Config
from hypercorn.events import Closed, RawData, Updated
from hypercorn.protocol.events import Body, EndBody
from hypercorn.protocol.h11 import STREAM_ID
from hypercorn.protocol.h11 import H11Protocol
from hypercorn.trio.lifespan import Lifespan
from hypercorn.trio.statsd import StatsdLogger
from hypercorn.trio.tcp_server import TCPServer
from hypercorn.trio.task_group import TaskGroup
from hypercorn.trio.worker_context import WorkerContext
from hypercorn.typing import ConnectionState
from hypercorn.utils import ShutdownError, parse_socket_addr, raise_shutdown, repr_socket_addr, wrap_app

from ..actors.errors import INTERNAL, UNAUTHENTICATED, UNAVAILABLE, VALIDATION_FAILED
from .errors import ApiError

if sys.version_info < (3, 11):  # pragma: no cover
    from exceptiongroup import BaseExceptionGroup

__all__ = ["Doors", "Door", "Gone", "serve_app", "read_body", "take_body", "drain", "send_while_discarding", "APP_QUEUE_MESSAGES"]

log = logging.getLogger("runstate.doors")

# ASGI messages hypercorn queues per request before it stops reading the socket (its default is 10),
# and the largest read from a socket (hypercorn's is 64 KiB): a connection whose body is on its way
# holds a few of these at a time, so they set what 1000 uploading connections cost (a few MB).
APP_QUEUE_MESSAGES = 2
RECEIVE_BYTES_MAX = 16 * 1024
# A request refused before its body was read has the rest read and dropped, at most this many bytes
# for at most this long (nginx's lingering close gives 30 s), so its client reads the answer rather
# than a reset connection. Dropping costs bandwidth, not memory.
LINGER_BYTES_MAX = 64 * 1024 * 1024
LINGER_S = 5.0
_REASONS = {400: b"Bad Request", 408: b"Request Timeout", 413: b"Content Too Large",
            431: b"Request Header Fields Too Large", 501: b"Not Implemented", 503: b"Service Unavailable",
            505: b"HTTP Version Not Supported"}
# The first bytes of a TLS handshake record (content type 22, version 3.x).
_TLS_RECORD = 0x16
# How much of a request's first line is looked at for HTTP/0.9 (hypercorn refuses longer heads).
_FIRST_LINE_BYTES_MAX = 16 * 1024


class Door:
    """One connection in: when it opened, whether it has shown a key the server knows, and how to
    close it (its cancel scope)."""

    __slots__ = ("opened", "authenticated", "scope")

    def __init__(self, opened: float) -> None:
        self.opened = opened
        self.authenticated = False
        self.scope = trio.CancelScope()


class Doors:
    """The bounds of the doors and what they hold now (one per server).

    At `connections_max`, a new connection takes the place of the oldest one that has not yet
    shown a key the server knows (a slowloris's, sending its headers a line at a time), which is
    closed; only when every connection has shown a valid key is the new one refused with 503. So
    sockets that never authenticate cannot keep the server's clients out, and a header block that
    takes longer than `header_timeout_s` ends its connection anyway.
    """

    def __init__(
        self, *, connections_max: int, body_bytes_in_flight_max: int, linger_bytes_max: int, linger_s: float,
        header_timeout_s: float = 10.0,
    ) -> None:
        self.connections_max = connections_max
        self.body_bytes_in_flight_max = body_bytes_in_flight_max
        self.linger_bytes_max = linger_bytes_max
        self.linger_s = linger_s
        self.header_timeout_s = header_timeout_s
        self.connections = 0
        self.body_bytes_in_flight = 0
        # Counted for the metrics: connections refused at the cap, answers given before the router,
        # connections closed to make room, header blocks that did not arrive in time.
        self.connections_refused = 0
        self.protocol_errors = 0
        self.connections_evicted = 0
        self.header_timeouts = 0
        # The connections open now, oldest first.
        self.open: dict[Door, None] = {}
        # Whether a bearer key opens anything here (the runtime's `key_is_known`, set once it runs).
        self.key_known: Callable[[str], bool] = lambda secret: False

    @classmethod
    def of(cls, settings: Any) -> "Doors":
        return cls(
            connections_max=settings.connections_max,
            body_bytes_in_flight_max=settings.body_bytes_in_flight_max,
            linger_bytes_max=LINGER_BYTES_MAX,
            linger_s=LINGER_S,
            header_timeout_s=getattr(settings, "header_timeout_s", 10.0),
        )

    def make_room(self) -> bool:
        """Close the oldest connection that has shown no valid key, for a new one; False if none."""
        for door in self.open:
            if not door.authenticated:
                del self.open[door]
                door.scope.cancel()
                self.connections_evicted += 1
                return True
        return False

    def reserve(self, size: int) -> bool:
        """Count `size` more body bytes as held, unless that goes past the bound."""
        if self.body_bytes_in_flight + size > self.body_bytes_in_flight_max:
            return False
        self.body_bytes_in_flight += size
        return True

    def release(self, size: int) -> None:
        self.body_bytes_in_flight -= size
        assert self.body_bytes_in_flight >= 0


# -- the body -------------------------------------------------------------------------------------


class ClientGone(Exception):
    """The client disconnected before its request was complete: there is nobody to answer."""


class BodyReading:
    """The state of one request's body: how much of it this request holds, and whether it ended."""

    __slots__ = ("held", "ended", "timed_out")

    def __init__(self) -> None:
        self.held = 0
        self.ended = False
        self.timed_out = False


def declared_length(headers: dict[str, str]) -> int | None:
    """The request's Content-Length as a number (hypercorn has already refused a malformed one)."""
    value = headers.get("content-length")
    return int(value) if value is not None and value.strip().isdigit() else None


async def read_body(
    receive: Callable[[], Awaitable[dict]], headers: dict[str, str], bytes_max: int, doors: Doors, reading: BodyReading
) -> bytes:
    """The whole body, at most `bytes_max` bytes, each held byte counted in `doors` (413 / 503 past them)."""
    _check_declared(headers, bytes_max)
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            raise ClientGone
        chunk = message.get("body", b"")
        _hold(chunk, bytes_max, doors, reading)
        chunks.append(chunk)
        if not message.get("more_body", False):
            reading.ended = True
            return b"".join(chunks)


def take_body(body: bytes, headers: dict[str, str], bytes_max: int, doors: Doors, reading: BodyReading) -> bytes:
    """`read_body` for a body that has all come already (`_Protocol._serve_inline`): the same bounds."""
    _check_declared(headers, bytes_max)
    _hold(body, bytes_max, doors, reading)
    reading.ended = True
    return body


def _check_declared(headers: dict[str, str], bytes_max: int) -> None:
    declared = declared_length(headers)
    if declared is not None and declared > bytes_max:
        raise ApiError(VALIDATION_FAILED, f"request body exceeds {bytes_max} bytes", status=413)


def _hold(chunk: bytes, bytes_max: int, doors: Doors, reading: BodyReading) -> None:
    if reading.held + len(chunk) > bytes_max:
        raise ApiError(VALIDATION_FAILED, f"request body exceeds {bytes_max} bytes", status=413)
    if chunk and not doors.reserve(len(chunk)):
        raise ApiError(
            UNAVAILABLE,
            f"the server holds {doors.body_bytes_in_flight} bytes of request bodies, its limit "
            "(body_bytes_in_flight_max); try again shortly",
            headers={"retry-after": "1"},
        )
    reading.held += len(chunk)


async def drain(receive: Callable[[], Awaitable[dict]], doors: Doors, reading: BodyReading) -> bool:
    """Read and drop the rest of a refused request's body; True when it ended within the bounds.

    False means the connection must close after the answer: the client is still sending, too
    much or too slowly, or it has gone.
    """
    if reading.ended:
        return True
    if reading.timed_out:
        return False
    dropped = 0
    with trio.move_on_after(doors.linger_s):
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return False
            dropped += len(message.get("body", b""))
            if not message.get("more_body", False):
                reading.ended = True
                return True
            if dropped > doors.linger_bytes_max:
                return False
    return False


async def send_while_discarding(receive: Callable[[], Awaitable[dict]], answer: Callable[[], Awaitable[None]], seconds: float) -> None:
    """Send an answer while the rest of the request is read and dropped.

    When an answer ends while the client is still sending, hypercorn tells the request it is over
    through the same bounded queue the body arrives in; if nobody empties that queue, the answer
    never completes. So something reads until the end is told, for at most `seconds`.
    """

    async def discard() -> None:
        with trio.move_on_after(seconds):
            while (await receive())["type"] != "http.disconnect":
                pass

    async with trio.open_nursery() as nursery:
        nursery.start_soon(discard)
        await answer()
        nursery.cancel_scope.cancel()


def check_known_key(request: Any, services: Any) -> None:
    """401 UNAUTHENTICATED now, from the headers, when the bearer key opens nothing on this server."""
    secret = request.bearer()
    if not services.key_is_known(secret):
        raise ApiError(UNAUTHENTICATED, "the API key is not valid")


# -- answers made below the router ----------------------------------------------------------------


def raw_answer(config: Config, status: int, code: str, message: str, extra: list[tuple[bytes, bytes]] = ()) -> bytes:
    """A whole HTTP/1.1 answer with the error envelope that closes the connection."""
    body = orjson.dumps({"error": {"code": code, "message": message, "requestId": "req_" + os.urandom(8).hex()}})
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", b"%d" % len(body)),
        (b"connection", b"close"),
        *extra,
        *config.response_headers("h11"),
    ]
    head = b"HTTP/1.1 %d %s\r\n" % (status, _REASONS.get(status, b"Error"))
    return head + b"".join(b"%s: %s\r\n" % (name, value) for name, value in headers) + b"\r\n" + body


def _protocol_refusal(status: int, error: BaseException | None) -> str:
    """What is wrong with a request HTTP/1.1 refused, in words of our own: never the request's own
    bytes (h11's message repeats the bad line, a bearer key included)."""
    if status == 431:
        return "the request line and headers exceed 16384 bytes"
    said = str(error).lower() if error is not None else ""
    for words, meaning in (
        ("header line", "a header line is malformed (its content is not repeated here)"),
        ("request line", "the request line is malformed (METHOD /path HTTP/1.1)"),
        ("content-length", "the Content-Length header is malformed or given twice with different values"),
        ("transfer-encoding", "the Transfer-Encoding is not one this server reads"),
        ("chunk", "the chunked body is malformed"),
    ):
        if words in said:
            return f"the request is not valid HTTP/1.1: {meaning}"
    return "the request is not valid HTTP/1.1"


def _head_refusal(request: h11.Request) -> tuple[int, str] | None:
    """Shapes of a request head that h11 lets through and this server refuses before anything else
    (status, message), or None. Each closes the connection: what follows cannot be trusted."""
    if request.http_version not in (b"1.1", b"1.0"):
        return 505, f"HTTP/{request.http_version.decode('ascii', 'replace')} is not served here: send HTTP/1.1"
    names = [name for name, _ in request.headers]
    if b"transfer-encoding" in names and b"content-length" in names:
        return 400, "a request with both Content-Length and Transfer-Encoding is refused (RFC 9112 6.3): send one"
    if names.count(b"authorization") > 1:
        return 400, "more than one Authorization header: send one"
    return None


def _bearer(request: h11.Request) -> str | None:
    return _bearer_of(request.headers)


def _bearer_of(headers: Any) -> str | None:
    for name, value in headers:
        if name == b"authorization":
            scheme, _, secret = value.decode("latin-1").partition(" ")
            return secret.strip() if scheme.lower() == "bearer" and secret.strip() else None
    return None


class _Protocol(H11Protocol):
    """hypercorn's HTTP/1.1 protocol, with every refusal it makes itself in the error envelope."""

    def __init__(
        self, *args: Any, doors: Doors, door: Door | None = None, inline: Any = None, hangups: Hangups | None = None,
        fd: int = -1, write: Callable[[bytes], Awaitable[None]] | None = None,
    ) -> None:
        super().__init__(*args)
        self._doors = doors
        self._door = door or Door(0.0)
        # What answers an API request in this task (`_answer_inline`), on a plain socket watched by
        # the server's `hangups`; None: none is.
        self._inline = inline if hangups is not None and fd >= 0 and write is not None else None
        # Whether plain requests are answered without h11 (`_answer_plain`); not when the server
        # checks Host (server_names), which h11's path does.
        self._plain = self._inline is not None and not self.config.server_names
        self._hangups = hangups
        self._fd = fd
        self._write = write
        self._first_line: bytearray | None = bytearray()  # None once the first line was looked at
        # When the first byte of the request head now arriving came (None: no head under way): a
        # head not complete `header_timeout_s` after it ends the connection (`_Connection`).
        self.head_started: float | None = None
        # Whether this request's head showed a key the server knows: only then is a client that
        # waits (`Expect: 100-continue`) told to send its body.
        self._key_shown = False
        # The head of the answer under way, held until its body goes with it (`_send_h11_event`).
        self._head: bytes | None = None

    async def handle(self, event: Any) -> None:
        if isinstance(event, RawData) and event.data:
            if self._plain and self.stream is None and self._between_requests():
                rest = await self._answer_plain(event.data)
                if not rest:
                    return
                event = RawData(data=rest)
            if self._first_line is not None:
                refusal = self._look_at_first_line(event.data)
                if refusal is not None:
                    self._doors.protocol_errors += 1
                    await self.send(RawData(data=raw_answer(self.config, 400, VALIDATION_FAILED, refusal)))
                    await self.send(Closed())
                    return
            if self.head_started is None and self.connection.their_state is h11.IDLE:
                self.head_started = trio.current_time()
        await super().handle(event)

    async def _handle_events(self) -> None:
        """hypercorn's loop (`H11Protocol._handle_events`), with the doors' checks on each request's
        head before anything is read or answered: a head whose shape could smuggle a second request
        (Content-Length beside Transfer-Encoding, two Authorization headers) or that is not HTTP/1.x
        is refused and the connection closed; `100 Continue` goes only to a client that showed a
        key the server knows (others get their 401 at once, their body never asked for)."""
        while True:
            connection = self.connection
            if connection.they_are_waiting_for_100_continue and self._key_shown:
                await self._send_h11_event(
                    h11.InformationalResponse(status_code=100, headers=self.config.response_headers("h11"))
                )
            try:
                event = connection.next_event()
            except h11.RemoteProtocolError as error:
                if connection.our_state in {h11.IDLE, h11.SEND_RESPONSE}:
                    await self._send_error_response(error.error_status_hint)
                await self.send(Closed())
                break
            if isinstance(event, h11.Request):
                self.head_started = None
                refusal = _head_refusal(event)
                if refusal is not None:
                    self._doors.protocol_errors += 1
                    await self.send(RawData(data=raw_answer(self.config, refusal[0], VALIDATION_FAILED, refusal[1])))
                    await self.send(Closed())
                    break
                secret = _bearer(event)
                self._key_shown = secret is not None and self._doors.key_known(secret)
                if self._key_shown:
                    self._door.authenticated = True
                await self.send(Updated(idle=False))
                await self._check_protocol(event)
                if self._inline is not None and _may_answer_inline(event, self.config):
                    went = await self._answer_inline(event)
                    if went is _GONE:
                        break
                    if went is _ANSWERED:
                        continue
                    # The body is still on its way: the request goes the usual way, with what came.
                    await self._create_stream(event)
                    for chunk in went:
                        await self.stream.handle(Body(stream_id=STREAM_ID, data=chunk))
                    continue
                await self._create_stream(event)
            elif event is h11.PAUSED:
                await self.can_read.clear()
                await self.can_read.wait()
            elif isinstance(event, h11.ConnectionClosed) or event is h11.NEED_DATA:
                break
            elif self.stream is None:
                break
            elif isinstance(event, h11.Data):
                await self.stream.handle(Body(stream_id=STREAM_ID, data=event.data))
            elif isinstance(event, h11.EndOfMessage):
                await self.stream.handle(EndBody(stream_id=STREAM_ID))

    def _look_at_first_line(self, data: bytes) -> str | None:
        line = self._first_line
        assert line is not None
        if not line and data[0] == _TLS_RECORD and not self.ssl:
            return "this port speaks plain HTTP/1.1, not TLS: use http:// (or put a TLS proxy in front)"
        line.extend(data[: _FIRST_LINE_BYTES_MAX - len(line)])
        end = line.find(b"\n")
        if end < 0 and len(line) < _FIRST_LINE_BYTES_MAX:
            return None
        self._first_line = None
        if end >= 0 and len(line[:end].split()) == 2:
            return "HTTP/0.9 requests are not served: send HTTP/1.1 (a request line ends with HTTP/1.1)"
        return None

    async def _send_error_response(self, status_code: int) -> None:
        # Called by hypercorn inside `except h11.RemoteProtocolError`: the error is the one in flight.
        error = sys.exc_info()[1]
        self._doors.protocol_errors += 1
        await self.send(RawData(data=raw_answer(self.config, status_code, VALIDATION_FAILED, _protocol_refusal(status_code, error))))

    async def _check_protocol(self, event: h11.Request) -> None:
        """No HTTP/2 (prior knowledge or h2c upgrade): every request is answered in HTTP/1.1."""

    def _between_requests(self) -> bool:
        """Whether h11 holds nothing of a request: none begun, none being answered."""
        connection = self.connection
        return connection.their_state is h11.IDLE and connection.our_state is h11.IDLE and not connection.trailing_data[0]

    async def _answer_plain(self, data: bytes) -> bytes:
        """Answer, without h11, each whole request at the start of `data` whose head has the
        plainest shape (`_plain_request`): parsing a head with h11 and writing its answer through
        h11 costs more than the rest of a small request's trip through the doors. Returns what is
        left for h11: b"" when everything was answered or the connection ended, else the bytes from
        the first request that is not plain or not whole, which h11 then reads (and refuses, if it
        must) as any other."""
        head_max = self.config.h11_max_incomplete_size
        while data:
            plain = _plain_request(data, head_max)
            if plain is None:
                return data
            method, target, headers, body_at, length = plain
            end = body_at + length
            if len(data) < end:  # the body is still on its way
                return data
            self._first_line = None
            self.head_started = None
            secret = _bearer_of(headers)
            self._key_shown = secret is not None and self._doors.key_known(secret)
            if self._key_shown:
                self._door.authenticated = True
            await self.send(Updated(idle=False))
            answer = await self._serve_inline(method, target, "1.1", headers, data[body_at:end])
            if answer is None:
                return b""
            status, answer_headers, content = answer
            lines = [b"HTTP/1.1 %d \r\n" % status]
            lines.extend(b"%s: %s\r\n" % header for header in answer_headers)
            lines.append(b"\r\n")
            head = b"".join(lines)
            if head.count(b"\n") != len(lines) or head.count(b"\r") != len(lines):  # a CR or LF in a header
                log.error("request %s %s: an answer header holds a line break", method.decode(), target.decode())
                await self._write(raw_answer(self.config, 500, INTERNAL, "internal error"))
                await self.send(Closed())
                return b""
            await self._write(head + content)
            if self.keep_alive_requests >= self.config.keep_alive_max_requests or self.context.terminated.is_set():
                await self.send(Closed())
                return b""
            await self.send(Updated(idle=True))
            data = data[end:]
        return b""

    async def _answer_inline(self, request: h11.Request) -> Any:
        """Answer an API request in this task when its whole body has come with its head (most
        do): no task, no queue of messages and no stream object for it, the answer written in
        one piece. `_ANSWERED` when answered (the connection is ready for the next request),
        `_GONE` when the connection must end, or the body chunks read so far when the rest is
        still on its way (then the request goes the usual way)."""
        connection = self.connection
        chunks: list[bytes] = []
        while True:
            try:
                event = connection.next_event()
            except h11.RemoteProtocolError as error:
                if connection.our_state in {h11.IDLE, h11.SEND_RESPONSE}:
                    self._doors.protocol_errors += 1
                    refusal = raw_answer(self.config, error.error_status_hint, VALIDATION_FAILED,
                                         _protocol_refusal(error.error_status_hint, error))
                    await self.send(RawData(data=refusal))
                await self.send(Closed())
                return _GONE
            if type(event) is h11.Data:
                chunks.append(bytes(event.data))
            elif type(event) is h11.EndOfMessage:
                break
            else:  # NEED_DATA: the rest of the body has not come yet
                return chunks
        answer = await self._serve_inline(
            request.method, request.target, request.http_version.decode(), list(request.headers), b"".join(chunks)
        )
        if answer is None:
            return _GONE
        status, headers, content = answer
        try:
            data = connection.send(h11.Response(status_code=status, headers=headers))
            if content:
                data += connection.send(h11.Data(data=content))
            data += connection.send(h11.EndOfMessage())
        except h11.LocalProtocolError:
            await self.send(Closed())
            return _GONE
        await self._write(data)
        await self._maybe_recycle()
        return _ANSWERED

    async def _serve_inline(
        self, method: bytes, target: bytes, version: str, headers: list[tuple[bytes, bytes]], body: bytes,
    ) -> tuple[int, list[tuple[bytes, bytes]], bytes] | None:
        """Run one request through `inline` (serve_http): its status, headers and body, or None
        when the connection must end (a long poll whose client left, a failure below serve_http:
        answered here with a 500 envelope)."""
        self.keep_alive_requests += 1
        await self.context.mark_request()
        path, _, query = target.partition(b"?")
        gone = _SocketGone(self._fd, self._hangups)  # type: ignore[arg-type]
        scope = {
            "type": "http", "http_version": version, "method": method.decode("ascii"),
            "scheme": "http", "path": unquote(path.decode("ascii")), "raw_path": path, "query_string": query,
            "root_path": self.config.root_path, "headers": headers, "client": self.client,
            "server": self.server, "extensions": {"runstate.gone": gone, "runstate.body": body},
        }
        given = False
        answer: list[Any] = []

        async def receive() -> dict:
            nonlocal given
            if given:
                return {"type": "http.disconnect"}
            given = True
            return {"type": "http.request", "body": body, "more_body": False}

        async def send(message: dict) -> None:
            answer.append(message)

        try:
            await self._inline(scope, receive, send)  # type: ignore[misc]
        except Exception:  # serve_http answers its own failures: this is a bug below it
            log.exception("request %s %s failed", scope["method"], scope["path"])
            await self._write(raw_answer(self.config, 500, INTERNAL, "internal error"))  # type: ignore[misc]
            await self.send(Closed())
            return None
        finally:
            gone.unwatch()
        if not answer:  # a long poll whose client went away: nobody to answer
            await self.send(Closed())
            return None
        start, content = answer[0], b"".join(message.get("body", b"") for message in answer[1:])
        answer_headers = [*start["headers"], *_server_headers(self.config)]
        if self.keep_alive_requests >= self.config.keep_alive_max_requests:
            answer_headers.append((b"connection", b"close"))
        return start["status"], answer_headers, content

    async def _send_h11_event(self, event: Any) -> None:
        """hypercorn's, with the head of an answer of known length held back and written with its
        body: one write (one send, one pass of the connection's lock) per answer instead of three.
        A streamed answer (no Content-Length: the console's event stream) has its head written at
        once, so its client sees it before the first event."""
        try:
            data = self.connection.send(event)
        except h11.LocalProtocolError:
            if self.connection.their_state != h11.ERROR:
                raise
            return
        if type(event) is h11.Response and _has_length(event.headers):
            self._head = data
            return
        head = self._head
        if head is not None:
            self._head = None
            data = head + data
        if data:
            await self.send(RawData(data=data))

    async def _close_stream(self) -> None:
        self._head = None  # an answer whose body never came is not written
        await super()._close_stream()


_ANSWERED = object()
_GONE = object()
# The largest body a request may have to be answered in its connection's task.
INLINE_BODY_MAX = 64 * 1024
_INLINE_METHODS = frozenset({b"GET", b"POST", b"PUT", b"PATCH", b"DELETE"})
# Headers that keep a request off the connection's own path (hypercorn's stream then serves it): a
# body in chunks, an upgrade, a client waiting for 100 Continue.
_NOT_INLINE = frozenset({b"transfer-encoding", b"upgrade", b"expect"})


def _may_answer_inline(request: h11.Request, config: Config) -> bool:
    """Whether a request may be answered in its connection's task: an API request (`/v1/...`) of a
    usual method, with no body or a small one of declared length, asking for no upgrade."""
    if request.method not in _INLINE_METHODS or not request.target.startswith(b"/v1/") or config.server_names:
        return False
    for name, value in request.headers:
        if name == b"content-length":
            if not value.isdigit() or int(value) > INLINE_BODY_MAX:
                return False
        elif name in _NOT_INLINE:
            return False
    return True


# The plainest request head (`_plain_request`): an API method and path, in HTTP/1.1; header names are
# tokens and values visible characters, spaces and tabs (RFC 9110 5.1 and 5.5, as h11 reads them).
_PLAIN_LINE = re.compile(rb"(%s) (/v1/[!-~]*) HTTP/1\.1\r\n" % b"|".join(sorted(_INLINE_METHODS)))
_PLAIN_FIELDS = re.compile(rb"(?:[-!#$%&'*+.^_`|~0-9a-zA-Z]+:[\t\x20-\x7e\x80-\xff]*\r\n)+")
_DIGITS_MAX = len(str(INLINE_BODY_MAX))


def _plain_request(data: bytes, head_max: int) -> tuple[bytes, bytes, list[tuple[bytes, bytes]], int, int] | None:
    """The request at the start of `data` if its head is whole and of the plainest shape, as
    (method, target, headers with names in lower case, where its body begins, its length); None
    otherwise, and h11 reads it. Plain: a request line `_PLAIN_LINE`, header lines `_PLAIN_FIELDS`
    (a token, a colon, visible characters, spaces and tabs, CRLF: RFC 9110 5.1 and 5.5, as h11
    reads them), one Host, at most one Authorization and one Content-Length (digits, at most
    INLINE_BODY_MAX), no Transfer-Encoding, Upgrade or Expect, and no Connection but keep-alive.
    Anything h11 would refuse is not plain, so its refusal stays h11's."""
    end = data.find(b"\r\n\r\n", 0, head_max)
    if end < 0:
        return None
    first = _PLAIN_LINE.match(data)
    if first is None:
        return None
    at = first.end()
    if _PLAIN_FIELDS.fullmatch(data, at, end + 2) is None:
        return None
    headers = []
    length = -1
    hosts = authorizations = 0
    for line in data[at:end].split(b"\r\n"):
        name, _, value = line.partition(b":")
        name = name.lower()
        value = value.strip(b" \t")
        if name == b"content-length":
            if length >= 0 or not value.isdigit() or len(value) > _DIGITS_MAX:
                return None
            length = int(value)
            if length > INLINE_BODY_MAX:
                return None
        elif name == b"host":
            hosts += 1
        elif name == b"authorization":
            authorizations += 1
        elif name in _NOT_INLINE or name == b"connection" and value.lower() != b"keep-alive":
            return None
        headers.append((name, value))
    if hosts != 1 or authorizations > 1:
        return None
    return first[1], first[2], headers, end + 4, max(length, 0)


class _ServerHeaders:
    """hypercorn's own answer headers (Date, Server), made once a second rather than per answer:
    the Date header changes only once a second."""

    config: Config | None = None
    second = -1
    headers: list[tuple[bytes, bytes]] = []


def _server_headers(config: Config) -> list[tuple[bytes, bytes]]:
    now = int(time.time())
    cached = _ServerHeaders
    if now != cached.second or config is not cached.config:
        cached.headers, cached.second, cached.config = config.response_headers("h11"), now, config
    return cached.headers


def _has_length(headers: Any) -> bool:
    for name, _ in headers:
        if name == b"content-length":
            return True
    return False


class Gone:
    """Whether the client of a request went away before its answer, for a long poll to stop
    waiting (`http.serve_http`) without a task of its own reading for `http.disconnect`: the
    connection's tasks (`_Tasks`) close it when hypercorn tells the request its client is gone.
    Found in the ASGI scope under `extensions["runstate.gone"]`."""

    __slots__ = ("closed", "scope")

    def __init__(self) -> None:
        self.closed = False
        self.scope: trio.CancelScope | None = None  # the long poll to cancel, while it waits

    def close(self) -> None:
        self.closed = True
        if self.scope is not None:
            self.scope.cancel()

    def watch(self, scope: trio.CancelScope) -> None:
        """Cancel `scope` when the client goes (at once if it has gone)."""
        self.scope = scope
        if self.closed:
            scope.cancel()

    def parked(self) -> None:
        """The long poll now waits: from here on, the client's going away must be noticed."""

    def unwatch(self) -> None:
        self.scope = None


class _SocketGone(Gone):
    """For a request answered in its connection's task (`_Protocol._answer_inline`), where no read
    loop runs while it is answered: while a long poll waits (from `parked` on), its socket is in
    the server's `Hangups`, which closes this when the client hangs up. A long poll answered at
    once (a free key, a queued message) costs nothing here."""

    __slots__ = ("_fd", "_hangups", "_held")

    def __init__(self, fd: int, hangups: "Hangups") -> None:
        super().__init__()
        self._fd = fd
        self._hangups = hangups
        self._held = False

    def parked(self) -> None:
        if self.scope is not None and not self._held:
            self._held = True
            self._hangups.add(self._fd, self)

    def unwatch(self) -> None:
        super().unwatch()
        if self._held:
            self._held = False
            self._hangups.remove(self._fd)


class Hangups:
    """The sockets of the long polls that wait in their connections' tasks, in one epoll of the
    server's own that one task watches (`run`): a socket whose peer closed it (EPOLLRDHUP) or
    broke it (EPOLLHUP, EPOLLERR) closes its `Gone`. Bytes arriving (the client's next request)
    wake nothing: they wait for the read loop. Each long poll costs two system calls here, where
    a task of its own waiting on its socket would cost a task and its cancel scope."""

    def __init__(self) -> None:
        self._epoll = select.epoll()
        self._gone: dict[int, Gone] = {}

    def add(self, fd: int, gone: Gone) -> None:
        try:
            self._epoll.register(fd, select.EPOLLRDHUP)
        except FileExistsError:
            self._epoll.modify(fd, select.EPOLLRDHUP)
        self._gone[fd] = gone

    def remove(self, fd: int) -> None:
        if self._gone.pop(fd, None) is not None:
            try:
                self._epoll.unregister(fd)
            except OSError:  # closed already: the kernel has forgotten it
                pass

    async def run(self) -> None:
        try:
            while True:
                await trio.lowlevel.wait_readable(self._epoll)
                for fd, _ in self._epoll.poll(0):
                    gone = self._gone.get(fd)
                    self.remove(fd)
                    if gone is not None:
                        gone.close()
        finally:
            self._epoll.close()


class _Tasks(TaskGroup):
    """hypercorn's task group of a connection, giving each request a `Gone`."""

    async def spawn_app(self, app: Any, config: Config, scope: Any, send: Any) -> Callable[[Any], Awaitable[None]]:
        gone = Gone()
        scope["extensions"]["runstate.gone"] = gone
        put = await super().spawn_app(app, config, scope, send)

        async def app_put(message: Any) -> None:
            if message["type"] == "http.disconnect":
                gone.close()
            await put(message)

        return app_put


class _Connection(TCPServer):
    """hypercorn's per-connection server for plain TCP, speaking through `_Protocol`.

    The keep-alive timer is one task per connection (`_keep`) whose deadline moves as requests
    begin and end, where hypercorn starts a new task at the end of every request and cancels it
    at the start of the next: that task and its start handshake cost as much as the rest of
    the trip through hypercorn.
    """

    def __init__(
        self, app: Any, config: Config, context: WorkerContext, state: Any, stream: Any, doors: Doors, door: Door | None = None,
        inline: Any = None, hangups: Hangups | None = None,
    ) -> None:
        super().__init__(app, config, context, state, stream)
        self._doors = doors
        self._door = door or Door(0.0)
        self._inline = inline
        self._hangups = hangups
        # The plain socket, read and written directly (`_receive`, `_write_answer`); None for TLS.
        self._socket: Any = None
        # While the connection is idle, when the keep-alive timer closes it (inf while a request runs).
        self._idle_deadline = math.inf
        self._keeper: trio.CancelScope | None = None

    async def run(self) -> None:
        secure = isinstance(self.stream, trio.SSLStream)
        try:
            if secure:
                # The handshake first, bounded: a client that never finishes it holds no slot for long.
                try:
                    with trio.fail_after(self.config.ssl_handshake_timeout):
                        await self.stream.do_handshake()
                except (trio.BrokenResourceError, trio.TooSlowError):
                    return
                socket = self.stream.transport_stream.socket
            else:
                socket = self._socket = self.stream.socket
            client = parse_socket_addr(socket.family, socket.getpeername())
            server = parse_socket_addr(socket.family, socket.getsockname())
            async with _Tasks() as task_group:
                self._task_group = task_group
                self.protocol = _Protocol(  # type: ignore[assignment]
                    self.app, self.config, self.context, task_group, ConnectionState(self.state),
                    secure, client, server, self.protocol_send, doors=self._doors, door=self._door,
                    inline=self._inline, hangups=None if secure else self._hangups, fd=-1 if secure else socket.fileno(),
                    write=self._write_answer,
                )
                await self.protocol.initiate()
                self._idle_deadline = trio.current_time() + self.config.keep_alive_timeout
                keeping = trio.CancelScope()
                task_group._nursery.start_soon(self._keep, keeping)
                await self._read_data()
                # The client has gone: the keep-alive timer would hold the connection (and its slot
                # under connections_max) until it runs out. Requests still running finish.
                keeping.cancel()
        except OSError:
            pass
        finally:
            await self._close()

    async def protocol_send(self, event: Any) -> None:
        if type(event) is Updated:
            # A request began (idle=False) or ended (idle=True): move the keep-alive deadline.
            self._idle_deadline = trio.current_time() + self.config.keep_alive_timeout if event.idle else math.inf
            if self._keeper is not None:
                self._keeper.deadline = self._idle_deadline
            return
        await super().protocol_send(event)

    async def _write_answer(self, data: bytes) -> None:
        """Write an answer made in the read loop's own task (`_Protocol._serve_inline`). No other
        write can be under way then (HTTP/1.1 reads the next request only once the last answer
        is out), so the lock and shielded scope of `protocol_send` are not needed."""
        try:
            # Most answers go in one write, without trio's wrapper around the socket; what the
            # socket's buffer has no room for yet goes through it.
            try:
                fd = self._socket.fileno() if self._socket is not None else -1  # -1 once closed
                sent = os.write(fd, data) if fd >= 0 else 0
            except BlockingIOError:
                sent = 0
            except OSError as error:
                raise trio.BrokenResourceError from error
            if sent < len(data):
                await self.stream.send_all(data[sent:] if sent else data)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            await self.protocol.handle(Closed())

    async def _keep(self, keeping: trio.CancelScope) -> None:
        """Close the connection once it has been idle for `keep_alive_timeout`, or at once if idle
        when the server shuts down (a busy one is closed by hypercorn when its request ends)."""
        with keeping:
            while True:
                with trio.CancelScope(deadline=self._idle_deadline) as self._keeper:
                    await self.context.terminated.wait()
                self._keeper = None
                if self._idle_deadline == math.inf:
                    if self.context.terminated.is_set():
                        return
                    continue  # a request began as the deadline passed
                if self.context.terminated.is_set() or trio.current_time() >= self._idle_deadline:
                    with trio.CancelScope(shield=True):
                        await self._initiate_server_close()
                    return

    async def _read_data(self) -> None:
        """hypercorn's read loop, in reads of RECEIVE_BYTES_MAX instead of 64 KiB, and with a bound
        on a request head: once its first byte came, the whole head (request line and headers) must
        come within `header_timeout_s`, however it trickles in, or the connection ends with 408."""
        protocol: _Protocol = self.protocol  # type: ignore[assignment]
        doors = self._doors
        receive = self.stream.receive_some if self._socket is None else self._receive
        while True:
            deadline = trio.current_time() + (self.config.read_timeout or math.inf)
            head_deadline = math.inf if protocol.head_started is None else protocol.head_started + doors.header_timeout_s
            try:
                with trio.move_on_at(min(deadline, head_deadline)) as waiting:
                    data = await receive(RECEIVE_BYTES_MAX)
            except (trio.ClosedResourceError, trio.BrokenResourceError):
                break
            if waiting.cancelled_caught:
                if head_deadline <= deadline and protocol.head_started is not None:
                    doors.header_timeouts += 1
                    await self._refuse_slow_head()
                break
            await protocol.handle(RawData(bytes(data)))
            if data == b"":
                break
        await protocol.handle(Closed())

    async def _receive(self, max_bytes: int) -> bytes:
        """`receive_some` on a plain socket, waiting for it to be readable before reading rather
        than after a read found nothing: a connection reads once its answer is out, and its
        client's next request is seldom there yet, so trio's read-first costs a failed read."""
        socket = self._socket
        while True:
            fd = socket.fileno()  # asked each time: -1 once closed, and a closed number can be reused
            if fd < 0:
                raise trio.ClosedResourceError
            await trio.lowlevel.wait_readable(fd)
            try:
                return os.read(fd, max_bytes)
            except BlockingIOError:
                continue
            except OSError as error:  # reset by the client
                raise trio.BrokenResourceError from error

    async def _refuse_slow_head(self) -> None:
        answer = raw_answer(
            self.config, 408, "REQUEST_TIMEOUT",
            f"the request's headers did not all arrive within {self._doors.header_timeout_s:g} s",
        )
        with trio.move_on_after(1.0):
            try:
                await self.stream.send_all(answer)
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                pass


async def _refuse_connection(config: Config, doors: Doors, stream: Any) -> None:
    """503 with the envelope to a connection over the cap, then close it (briefly reading what it sent)."""
    doors.connections_refused += 1
    answer = raw_answer(
        config, 503, UNAVAILABLE,
        f"the server has {doors.connections} connections open, its limit (connections_max); try again shortly",
        [(b"retry-after", b"1")],
    )
    with trio.move_on_after(min(doors.linger_s, 1.0)):
        try:
            await stream.send_all(answer)
            if isinstance(stream, trio.SocketStream):  # a TLS stream does not half-close
                await stream.send_eof()
            dropped = 0
            while dropped < 64 * 1024:
                data = await stream.receive_some(16 * 1024)
                if not data:
                    break
                dropped += len(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass
    await stream.aclose()


async def _connection(
    app: Any, config: Config, context: WorkerContext, state: Any, doors: Doors, inline: Any, hangups: Hangups | None,
    stream: Any,
) -> None:
    if doors.connections >= doors.connections_max and not doors.make_room():
        await _refuse_connection(config, doors, stream)
        return
    door = Door(trio.current_time())
    doors.open[door] = None
    doors.connections += 1
    try:
        with door.scope:
            await _Connection(app, config, context, state, stream, doors, door, inline, hangups).run()
        if door.scope.cancelled_caught:  # closed to make room: hypercorn's close did not run
            with trio.CancelScope(shield=True), trio.move_on_after(1.0):
                await stream.aclose()
    finally:
        doors.open.pop(door, None)
        doors.connections -= 1


async def serve_app(
    app: Any,
    config: Config,
    doors: Doors,
    *,
    shutdown_trigger: Callable[..., Awaitable[None]],
    inline: Callable[[dict, Any, Any], Awaitable[None]] | None = None,
    task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """hypercorn's trio worker (`hypercorn.trio.run.worker_serve`), through the doors.

    The same lifespan, graceful shutdown and sockets: plain HTTP/1.1, or HTTP/1.1 over TLS when the
    config has a certificate (`--certfile`, `--keyfile`); QUIC and HTTP/2 are left out. `inline`,
    when given, answers the API requests of plain connections whose body came with their head in
    the connection's own task (`_Protocol._answer_inline`); the rest go to `app`.
    """
    config.set_statsd_logger_class(StatsdLogger)
    config.max_app_queue_size = APP_QUEUE_MESSAGES
    wrapped = wrap_app(app, config.wsgi_max_body_size, None)
    lifespan_state: dict = {}
    lifespan = Lifespan(wrapped, config, lifespan_state)
    context = WorkerContext(None)

    async with trio.open_nursery() as lifespan_nursery:
        await lifespan_nursery.start(lifespan.handle_lifespan)
        await lifespan.wait_for_startup()
        async with trio.open_nursery() as server_nursery:
            sockets = config.create_sockets()
            assert not sockets.quic_sockets, "QUIC is not served here"
            listeners: list[Any] = []
            binds = []
            ssl_context = config.create_ssl_context()
            for sock in sockets.secure_sockets:
                sock.listen(config.backlog)
                listener = trio.SocketListener(trio.socket.from_stdlib_socket(sock))
                listeners.append(trio.SSLListener(listener, ssl_context, https_compatible=True))
                binds.append(f"https://{repr_socket_addr(sock.family, sock.getsockname())}")
            for sock in sockets.insecure_sockets:
                sock.listen(config.backlog)
                listeners.append(trio.SocketListener(trio.socket.from_stdlib_socket(sock)))
                binds.append(f"http://{repr_socket_addr(sock.family, sock.getsockname())}")
            task_status.started(binds)
            hangups = None
            if inline is not None and hasattr(select, "epoll"):  # elsewhere every request goes to `app`
                hangups = Hangups()
                lifespan_nursery.start_soon(hangups.run)  # until the last connection has ended
            handler = partial(_connection, wrapped, config, context, ConnectionState(lifespan_state.copy()), doors, inline, hangups)
            try:
                async with trio.open_nursery(strict_exception_groups=True) as nursery:
                    nursery.start_soon(raise_shutdown, shutdown_trigger)
                    nursery.start_soon(raise_shutdown, context.terminate.wait)
                    nursery.start_soon(partial(trio.serve_listeners, handler, listeners, handler_nursery=server_nursery))
                    await trio.sleep_forever()
            except BaseExceptionGroup as error:
                _, other_errors = error.split((ShutdownError, KeyboardInterrupt))
                if other_errors is not None:
                    raise other_errors
            finally:
                await context.terminated.set()
                server_nursery.cancel_scope.deadline = trio.current_time() + config.graceful_timeout
        await lifespan.wait_for_shutdown()
        lifespan_nursery.cancel_scope.cancel()
