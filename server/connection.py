"""One HTTP/1.1 connection, owned whole: read in one task, written through one writer.

Every connection the server accepts (`listener.py`) is served here, plain or over TLS, one
request at a time, in the connection's own task:

1. **The head.** Bytes are read into the connection's buffer until a whole request head is in it
   (bounded by `HEAD_BYTES_MAX` and, from its first byte, by `header_timeout_s`: 408 past it).
   Between requests the connection waits for the next one about `keep_alive_s` (no deadline of
   its own: one sweep per server ends the waits that have lasted that long, `Doors.sweep_idle`),
   and not at all once the server stops.
2. **The plain path.** A request whose head has the plainest shape and whose body came with it
   (`heads.plain_request`: what every SDK sends) is read by one pattern and answered by `plain`
   (`http.serve_whole`) in this task: no h11 event, no ASGI scope or message, the answer's head
   and body written in one write. This is the path that carries the server's throughput.
3. **h11 for the rest.** Any other request (a body in chunks or still on its way, `Expect:
   100-continue`, HTTP/1.0, `Connection: close`, the console, the probes, a head to refuse) is
   read by h11's sans-IO `Connection`, one per request, and served by the ASGI application in
   this task (`_Exchange`: `receive` reads the body as the application asks for it, `send` turns
   its messages into h11 events). What h11 read past the request goes back to the buffer.
4. **One writer.** Every byte for the socket, whichever path made it (a plain answer, an h11
   event, `100 Continue`, a refusal, a long poll's late answer, an event stream's frames), goes
   through the connection's `Writer`: one write at a time, in order, so two answers can never
   interleave; a write that fails or is cut short ends the connection.

Why not hypercorn for part of it (TLS, the console, the event stream)? hypercorn's public
interface is a whole server (`hypercorn.trio.serve(app, config)`): it cannot be handed one
connection, or a connection whose first request has been read, or share a writer. Taking part
of its work means overriding its private methods, which a minor release may change without
notice. Its HTTP/1.1 protocol is a thin layer over h11's public interface, so the connection is
owned here on the same interface, and hypercorn stays what anyone may serve the same ASGI
application with (`hypercorn runstate.server.asgi:app`; `tests/e2e/test_stock_hypercorn.py`).
"""

from __future__ import annotations

import logging
import os
from typing import Any, Awaitable, Callable
from urllib.parse import unquote

import h11
import trio

from ..actors.errors import INTERNAL, VALIDATION_FAILED
from .doors import Door, Doors, Gone, Hangups, SocketGone, raw_answer
from .heads import HEAD_BYTES_MAX, bearer_of, first_line_refusal, head_end, head_refusal, plain_request, protocol_refusal, server_headers

__all__ = ["Connection", "Shared", "Writer", "Accepted", "accepted", "RECEIVE_BYTES_MAX", "KEEP_ALIVE_REQUESTS_MAX"]

log = logging.getLogger("runstate.connection")

# The largest read from a socket: what a connection holds of a request not yet answered.
RECEIVE_BYTES_MAX = 16 * 1024
# Requests served on one connection before it is closed (its last answer says so).
KEEP_ALIVE_REQUESTS_MAX = 1000

# What the listeners hand a connection (`listener.py`): an accepted socket's stream, or TLS over one.
Accepted = trio.SocketStream | trio.SSLStream[trio.SocketStream]


def accepted(stream: trio.abc.Stream) -> Accepted:
    """`stream`, a listener's, as what it is (see `Accepted`)."""
    if isinstance(stream, trio.SSLStream):
        assert isinstance(stream.transport_stream, trio.SocketStream), "TLS over an accepted socket"
        return stream
    assert isinstance(stream, trio.SocketStream), "an accepted socket"
    return stream
# How long a connection's close may take (a TLS close_notify to a client that reads nothing).
CLOSE_S = 1.0

Headers = list[tuple[bytes, bytes]]
# What answers a plain request: (method, target, headers, body, client address, gone) -> reply or
# None (the client of a long poll went away: nothing to answer). `http.serve_whole`.
Plain = Callable[[bytes, bytes, Headers, bytes, Any, Gone], Awaitable[Any]]


class Shared:
    """What every connection of one server shares: the application, the plain path, the doors,
    the hang-up watcher and the timeouts (seconds)."""

    __slots__ = ("app", "plain", "doors", "hangups", "keep_alive_s", "read_timeout_s", "header_timeout_s")

    def __init__(
        self, app: Any, plain: Plain | None, doors: Doors, hangups: Hangups | None, *, keep_alive_s: float,
        read_timeout_s: float, header_timeout_s: float,
    ) -> None:
        self.app = app
        self.plain = plain
        self.doors = doors
        self.hangups = hangups
        self.keep_alive_s = keep_alive_s
        self.read_timeout_s = read_timeout_s
        self.header_timeout_s = header_timeout_s


class Writer:
    """The one way to a connection's socket: one write at a time, in the order they were asked for.

    On a plain socket a write goes straight to it with one system call, through trio only for
    what the socket's buffer cannot take at once (bounded by `timeout_s`: a client that reads
    nothing is dropped). A write that fails, times out or is cancelled half done breaks the
    writer: nothing more is written (a half-written answer cannot be followed by anything), and
    `write` says False; its caller ends the connection.
    """

    __slots__ = ("_stream", "_fd", "_lock", "_timeout_s", "broken", "on_broken")

    def __init__(self, stream: trio.abc.Stream, fd: int, timeout_s: float) -> None:
        self._stream = stream
        self._fd = fd  # -1: through the stream only (TLS)
        self._lock = trio.StrictFIFOLock()
        self._timeout_s = timeout_s
        self.broken = False
        # Called once when the writer breaks (the request being answered learns its client is gone).
        self.on_broken: Callable[[], None] | None = None

    async def write(self, data: bytes) -> bool:
        """Write all of `data` after any write under way; False if the socket is broken."""
        lock = self._lock
        if lock.locked():  # another task's write is under way: after it
            await lock.acquire()
        else:
            lock.acquire_nowait()
        try:
            return False if self.broken else await self._send(data)
        finally:
            lock.release()

    async def _send(self, data: bytes) -> bool:
        sent = 0
        if self._fd >= 0:
            try:
                sent = os.write(self._fd, data)
            except BlockingIOError:
                sent = 0
            except OSError:  # reset by the client
                return self._break()
        if sent == len(data):
            return True
        try:
            with trio.fail_after(self._timeout_s):
                await self._stream.send_all(memoryview(data)[sent:] if sent else data)
        except (trio.BrokenResourceError, trio.ClosedResourceError, trio.TooSlowError, OSError):
            return self._break()
        except BaseException:  # cancelled half done: the rest of this answer can never follow
            self._break()
            raise
        return True

    def _break(self) -> bool:
        if not self.broken:
            self.broken = True
            if self.on_broken is not None:
                self.on_broken()
        return False


class Connection:
    """One accepted connection (plain or TLS), served until it closes: see the module's docstring."""

    def __init__(self, stream: Accepted, shared: Shared, door: Door, *, secure: bool) -> None:
        assert secure == isinstance(stream, trio.SSLStream), "a secure connection is TLS over the socket"
        self._stream = stream
        self._shared = shared
        self._door = door
        self._secure = secure
        sock = stream.transport_stream.socket if isinstance(stream, trio.SSLStream) else stream.socket
        # Reads and writes go straight to a plain socket (`_fill`, `Writer`); TLS goes through trio.
        self._fd = -1 if secure else sock.fileno()
        door.fd = self._fd  # how the doors wake its wait for a next request
        self._watched_fd = sock.fileno()  # what `Hangups` watches for the client going away
        self._client = _address(sock.getpeername())
        self._server = _address(sock.getsockname())
        self._buffer = bytearray()
        self._eof = False
        self._writer = Writer(stream, self._fd, shared.read_timeout_s)
        self._writer.on_broken = self._hung_up
        self._requests = 0
        self._gone: Gone | None = None  # of the request being answered
        # Whether the client may still be sending when the connection closes (a body not read):
        # then it is half-closed and read for a moment, so its client reads the answer.
        self._linger = False

    async def run(self) -> None:
        try:
            while await self._next_head():
                if not await self._serve_one():
                    break
        finally:
            await self._close()

    # -- reading --------------------------------------------------------------------------------

    async def _next_head(self) -> bool:
        """Read until a whole request head is in the buffer (True), or the connection ends: the
        client left, the keep-alive ran out, the server stops, or a head took too long or was
        refused (answered, then False)."""
        buffer = self._buffer
        if not buffer and not await self._wait_idle():
            return False
        deadline = trio.current_time() + self._shared.header_timeout_s
        while buffer.find(b"\r\n\r\n") < 0 and head_end(buffer) < 0 and len(buffer) <= HEAD_BYTES_MAX:
            refusal = first_line_refusal(buffer, self._secure)
            if refusal is not None:
                await self._refuse(400, refusal)
                return False
            if self._eof:
                return False  # the client closed in the middle of a head: nobody to answer
            if not await self._fill(deadline):
                if trio.current_time() >= deadline:
                    self._shared.doors.header_timeouts += 1
                    timeout_s = self._shared.header_timeout_s
                    await self._refuse(408, f"the request's headers did not all arrive within {timeout_s:g} s", "REQUEST_TIMEOUT")
                return False
        return True

    async def _wait_idle(self) -> bool:
        """Wait for the first bytes of the next request, until the doors end the wait (the
        keep-alive sweep after `keep_alive_s`, or the stop), and not at all once the server
        stops; a request that came meanwhile is still read (True).

        No deadline of its own: the wait records when it began, for the sweep (`Doors.sweep_idle`).
        A plain socket's wait is woken with ClosedResourceError (`Door.wake`), a TLS one's cancelled."""
        if self._eof:
            return False
        door = self._door
        if not self._shared.doors.stopping:
            data: bytes | bytearray | None = None
            door.idle_since = trio.current_time()
            try:
                if self._fd >= 0:
                    try:
                        data = await self._read()
                    except trio.ClosedResourceError:  # woken by the doors: nothing read
                        pass
                else:
                    with trio.CancelScope() as door.idle:
                        data = await self._read()
            finally:
                # Before anything else can close the socket: the doors wake only a door that waits.
                door.idle_since = None
                door.idle = None
            if data:
                self._buffer += data
            elif data is not None:
                self._eof = True
        if not self._buffer and not self._eof:
            self._fill_nowait()
        return bool(self._buffer)

    async def _fill(self, deadline: float) -> bool:
        """One read into the buffer, waiting at most until `deadline` and `read_timeout_s`;
        False when nothing came (the time ran out, or the client closed: `_eof`)."""
        with trio.move_on_at(min(deadline, trio.current_time() + self._shared.read_timeout_s)):
            data = await self._read()
            if not data:
                self._eof = True
                return False
            self._buffer += data
            return True
        return False

    async def _read(self) -> bytes | bytearray:
        """One read from the socket; b"" when the client closed or reset it. A plain socket is
        waited on until readable before reading (a connection reads once its answer is out, and
        its client's next request is seldom there yet: trio's read-first costs a failed read)."""
        if self._fd < 0:
            try:
                return await self._stream.receive_some(RECEIVE_BYTES_MAX)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                return b""
        while True:
            await trio.lowlevel.wait_readable(self._fd)
            try:
                return os.read(self._fd, RECEIVE_BYTES_MAX)
            except BlockingIOError:
                continue
            except OSError:
                return b""

    def _fill_nowait(self) -> None:
        """Whatever the socket holds now, without waiting (plain sockets only)."""
        if self._fd < 0:
            return
        try:
            data = os.read(self._fd, RECEIVE_BYTES_MAX)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if data:
            self._buffer += data
        else:
            self._eof = True

    # -- one request ------------------------------------------------------------------------------

    async def _serve_one(self) -> bool:
        """Serve the request whose head is in the buffer; whether the connection goes on."""
        buffer = self._buffer
        plain = plain_request(buffer) if self._shared.plain is not None else None
        if plain is not None and len(buffer) >= plain[3] + plain[4]:
            return await self._serve_plain(*plain)
        refusal = first_line_refusal(buffer, self._secure)
        if refusal is not None:
            await self._refuse(400, refusal)
            return False
        return await self._serve_h11()

    async def _serve_plain(self, method: bytes, target: bytes, headers: Headers, body_at: int, length: int) -> bool:
        end = body_at + length
        body = bytes(self._buffer[body_at:end])
        del self._buffer[:end]
        self._begin(bearer_of(headers))
        gone = self._gone = self._new_gone()
        answer = self._shared.plain
        assert answer is not None, "the plain path is taken only where it is answered (`_serve_one`)"
        try:
            reply = await answer(method, target, headers, body, self._client, gone)
        finally:
            gone.release()
            self._gone = None
        if reply is None:  # a long poll whose client went away: nobody to answer
            return False
        close = reply.close or self._closing()
        lines = [b"HTTP/1.1 %d \r\n" % reply.status]
        lines.extend(b"%s: %s\r\n" % header for header in reply.headers)
        lines.extend(b"%s: %s\r\n" % header for header in server_headers())
        if close:
            lines.append(b"connection: close\r\n")
        lines.append(b"\r\n")
        head = b"".join(lines)
        if head.count(b"\n") != len(lines) or head.count(b"\r") != len(lines):  # a CR or LF inside a header
            log.error("request %s %s: an answer header holds a line break", method.decode(), target.decode("latin-1"))
            await self._writer.write(raw_answer(500, INTERNAL, "internal error"))
            return False
        return await self._writer.write(head + reply.body) and not close

    async def _serve_h11(self) -> bool:
        """Serve the request at the start of the buffer through h11 and the ASGI application."""
        events = h11.Connection(h11.SERVER, max_incomplete_event_size=HEAD_BYTES_MAX)
        events.receive_data(bytes(self._buffer))
        self._buffer.clear()
        if self._eof:
            events.receive_data(b"")
        request = await self._h11_request(events)
        if request is None:
            return False
        refusal = head_refusal(request)
        if refusal is not None:
            await self._refuse(*refusal)
            return False
        self._begin(bearer_of(request.headers))
        gone = self._gone = self._new_gone()
        exchange = _Exchange(self, events, request, gone)
        try:
            await self._shared.app(exchange.scope(), exchange.receive, exchange.send)
        except Exception:
            log.exception("request %s %s failed below the router", request.method.decode(), request.target.decode("latin-1"))
            if not exchange.started:
                await self._writer.write(raw_answer(500, INTERNAL, "internal error"))
            return False
        finally:
            gone.release()
            self._gone = None
        if self._writer.broken:
            return False
        if exchange.error is not None and not exchange.started:  # the body broke h11's rules
            await self._refuse(400, protocol_refusal(400, exchange.error))
            return False
        if not exchange.ended:  # a long poll whose client left, or an answer cut short
            if not exchange.started and not gone.closed:
                log.error("request %s %s ended without an answer", request.method.decode(), request.target.decode("latin-1"))
                await self._writer.write(raw_answer(500, INTERNAL, "internal error"))
            return False
        if not _rest_of_body(events):  # its body was not all read: the client may still send
            self._linger = True
            return False
        if events.our_state is not h11.DONE:  # HTTP/1.0, or an answer that said Connection: close
            return False
        data, closed = events.trailing_data  # the next requests, read with this one's body
        self._buffer += data
        self._eof = self._eof or closed
        return not exchange.closing

    async def _h11_request(self, events: h11.Connection) -> h11.Request | None:
        """The request h11 reads at the start of what it was given (a whole head, or one too
        long: refused), or None once refused or closed."""
        deadline = trio.current_time() + self._shared.header_timeout_s
        while True:
            try:
                event = events.next_event()
            except h11.RemoteProtocolError as error:
                await self._refuse(error.error_status_hint, protocol_refusal(error.error_status_hint, error))
                return None
            if type(event) is h11.Request:
                return event
            if event is not h11.NEED_DATA or not await self._fill(deadline):
                return None  # the client closed, or went silent in the middle of a head
            events.receive_data(bytes(self._buffer))
            self._buffer.clear()

    def _begin(self, secret: str | None) -> None:
        self._requests += 1
        if secret is not None and not self._door.authenticated and self._shared.doors.key_known(secret):
            self._door.authenticated = True

    def key_shown(self, secret: str | None) -> bool:
        return secret is not None and self._shared.doors.key_known(secret)

    def _new_gone(self) -> Gone:
        hangups = self._shared.hangups
        return Gone() if hangups is None else SocketGone(self._watched_fd, hangups)

    def _hung_up(self) -> None:
        if self._gone is not None:
            self._gone.close()

    def _closing(self) -> bool:
        """Whether the answer being written is the connection's last (said with Connection: close)."""
        return self._shared.doors.stopping or self._requests >= KEEP_ALIVE_REQUESTS_MAX

    async def _refuse(self, status: int, message: str, code: str = VALIDATION_FAILED) -> None:
        """Answer what was refused before the router with the envelope; the connection then closes."""
        if code == VALIDATION_FAILED:
            self._shared.doors.protocol_errors += 1
        self._linger = True
        await self._writer.write(raw_answer(status, code, message))

    # -- the end ----------------------------------------------------------------------------------

    async def _close(self) -> None:
        """Close the socket; after a refusal or an unread body, half-close it first and read what
        the client still sends for a moment (bounded), so that it reads its answer rather than a
        reset connection. Nothing is awaited for long when the server is cut short."""
        try:
            if self._linger and self._fd >= 0 and not self._eof and not self._writer.broken:
                await self._linger_read()
        finally:
            with trio.move_on_after(CLOSE_S) as closing:
                try:
                    await self._stream.aclose()
                except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                    pass
            if closing.cancelled_caught:
                await trio.aclose_forcefully(self._stream)

    async def _linger_read(self) -> None:
        doors = self._shared.doors
        with trio.move_on_after(min(doors.linger_s, 1.0 if doors.stopping else doors.linger_s)):
            try:
                stream = self._stream
                assert isinstance(stream, trio.SocketStream), "only a plain connection lingers (`_fd`)"
                await stream.send_eof()
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                return
            dropped = 0
            while dropped <= doors.linger_bytes_max:
                data = await self._read()
                if not data:
                    return
                dropped += len(data)


class _Exchange:
    """One request read by h11, as the ASGI application sees it: its scope, `receive` (the body
    as the application asks for it, `100 Continue` first to a client that waits for it and showed
    a key the server knows; then, once the body ended, `http.disconnect` when the client goes) and
    `send` (the answer as h11 events, through the connection's writer: the head of an answer of
    known length held back and written with its body, one write)."""

    __slots__ = ("_connection", "_events", "_request", "gone", "_key_shown", "started", "ended", "closing", "error",
                 "_head", "_body_done", "_head_only")

    def __init__(self, connection: Connection, events: h11.Connection, request: h11.Request, gone: Gone) -> None:
        self._connection = connection
        self._events = events
        self._request = request
        self.gone = gone
        self._key_shown = connection.key_shown(bearer_of(request.headers))
        self.started = False
        self.ended = False
        self.closing = False
        self.error: h11.RemoteProtocolError | None = None
        self._head: bytes | None = None
        self._body_done = False
        self._head_only = request.method == b"HEAD"

    def scope(self) -> dict[str, Any]:
        request = self._request
        connection = self._connection
        path, _, query = request.target.partition(b"?")
        return {
            "type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"},
            "http_version": request.http_version.decode("ascii"), "method": request.method.decode("ascii"),
            "scheme": "https" if connection._secure else "http", "path": unquote(path.decode("latin-1")),
            "raw_path": path, "query_string": query, "root_path": "", "headers": list(request.headers),
            "client": connection._client, "server": connection._server, "extensions": {"runstate.gone": self.gone},
        }

    async def receive(self) -> dict[str, Any]:
        if self.error is not None:  # the body broke off: nothing more will be read
            return {"type": "http.disconnect"}
        if self._body_done:  # the body has all been given: what is left to say is that the client went
            await self.gone.wait()
            return {"type": "http.disconnect"}
        events = self._events
        while True:
            try:
                event = events.next_event()
            except h11.RemoteProtocolError as error:  # a malformed chunk, a body cut short
                self.error = error
                return {"type": "http.disconnect"}
            if type(event) is h11.Data:
                return {"type": "http.request", "body": bytes(event.data), "more_body": True}
            if type(event) is h11.EndOfMessage:
                self._body_done = True
                return {"type": "http.request", "body": b"", "more_body": False}
            if event is not h11.NEED_DATA:  # the client closed
                self.gone.close()
                return {"type": "http.disconnect"}
            if events.they_are_waiting_for_100_continue and self._key_shown and not self.started:
                go_on = h11.InformationalResponse(status_code=100, headers=server_headers())
                if not await self._connection._writer.write(events.send(go_on)):
                    return {"type": "http.disconnect"}
            events.receive_data(await self._connection._read())  # type: ignore[arg-type]  # h11 documents a bytes-like object; its annotation says bytes

    async def send(self, message: dict[str, Any]) -> None:
        kind = message["type"]
        if kind == "http.response.start":
            await self._start(message)
        elif kind == "http.response.body":
            await self._body(message.get("body", b""), message.get("more_body", False))
        else:
            raise RuntimeError(f"an ASGI http answer cannot send {kind!r}")

    async def _start(self, message: dict[str, Any]) -> None:
        if self.started:
            raise RuntimeError("the answer was started twice")
        headers = [(bytes(name).lower(), bytes(value)) for name, value in message.get("headers", ())]
        names = {name for name, _ in headers}
        headers.extend(header for header in server_headers() if header[0] not in names)
        if self._connection._closing() and b"connection" not in names:
            headers.append((b"connection", b"close"))
        status = int(message["status"])
        data = self._events.send(h11.Response(status_code=status, headers=headers))
        self.started = True
        self.closing = any(name == b"connection" and b"close" in value.lower() for name, value in headers)
        if b"content-length" in names:
            self._head = data  # written with the body
        else:  # an answer sent as it goes (an event stream): its head at once
            await self._write(data)

    async def _body(self, body: bytes, more: bool) -> None:
        if not self.started or self.ended:
            raise RuntimeError("an answer's body was sent before its head or after its end")
        events = self._events
        data = events.send(h11.Data(data=body)) if body and not self._head_only else b""
        if not more:
            data += events.send(h11.EndOfMessage())
            self.ended = True
        head, self._head = self._head, None
        if head is not None:
            data = head + data
        if data:
            await self._write(data)

    async def _write(self, data: bytes) -> None:
        # A client that went away gets nothing more; the application is not told by an exception
        # (the request's `Gone` is closed, and `receive` says `http.disconnect`).
        if not await self._connection._writer.write(data):
            self.gone.close()


def _rest_of_body(events: h11.Connection) -> bool:
    """Read past what is left of a request's body that the application did not ask for (a GET's
    end, which a page that reads nothing never asks for; a refused form's bytes that came with
    it), from what has already come; True once the request has ended, False if more is on its
    way (the connection then closes after the answer)."""
    while events.their_state is h11.SEND_BODY:
        try:
            event = events.next_event()
        except h11.RemoteProtocolError:
            return False
        if event is h11.NEED_DATA or event is h11.PAUSED:
            return False
    return events.their_state is h11.DONE


def _address(address: Any) -> tuple[str, int] | None:
    if isinstance(address, tuple) and len(address) >= 2:
        return str(address[0]), int(address[1])
    return None
