"""HTTP/1.1 requests on connections kept open between them: a client for a handful of origins.

Two parts of a node send many small requests, each one whole (head and body) with one whole answer,
to a few fixed origins: a node passing requests on to a partition's leader (`server/peers.py`), and
the etcd client (`etcd.py`), whose every unary call is one POST to a member's JSON gateway. What a
general client does besides (a pool scanned for expired connections on every request, redirects,
auth flows, cookies, streamed bodies, a task per request) cost more there than the request itself.
So the connections are owned here, on h11's public interface:

- **Kept open.** An answered connection goes back to its origin's idle list (at most
  `idle_per_origin_max`) and is taken by the next request, if the origin has not closed it
  meanwhile (it is then readable: one `poll`, on that connection only) and it has not been idle
  longer than `idle_s_max`. At most `connections_max` requests are on their way at once; more
  wait for one to end.
- **One write.** The request's head and body leave in one write, so that the origin reads it
  whole with its head.
- **Answers by their plainest shape.** A status line, header lines and a Content-Length (what
  a node sends, and etcd's gateway for a small answer) are read by one pattern; any other shape
  (in chunks, as etcd streams a keepalive's answer or sends a large one; to the connection's end;
  informational first) by h11, and its connection is kept when h11 says both sides are done.
- **What went wrong, told apart**, since the caller decides from it whether to send again:
  `NotReached` (no connection could be made: the request never left), `Broken` (the connection
  failed or was closed after the request began to go out: it may or may not have been done),
  `LinkError` (an answer that is not HTTP/1.1 this client can read, or a request it cannot send).
  A caller that bounds a request by a timeout of its own passes a `Progress`: whether a
  connection was in hand when the timeout struck says whether the request can have gone out.
- A request cancelled on its way (a leader change, a client gone, a timeout) closes its
  connection: what is left of its answer can never be read in order.
- **Streamed answers** (`Connections.stream`: an etcd watch, whose answer is one JSON message a
  line, in chunks, for as long as the watch lasts) go on a connection of their own, made for the
  stream and closed with it, never taken from or put back among the idle ones; it holds one of
  the `connections_max` slots for its life. Its body is read line by line (`Stream.read_lines`:
  every whole line that came, a line split across chunks or reads joined), the chunks taken
  apart by `ChunkedLines`, which does no IO, so that its cases are tested on bytes alone.
"""

from __future__ import annotations

import os
import re
import select
import ssl
from urllib.parse import urlsplit

import h11
import trio

__all__ = ["Connections", "Answer", "Address", "connect", "send", "receive", "written_to", "Stream", "ChunkedLines", "Progress", "LinkError", "NotReached", "Broken",
           "Headers", "CONNECTIONS_MAX", "IDLE_PER_ORIGIN_MAX", "IDLE_S_MAX", "LINE_BYTES_MAX"]

# Requests on their way at once (each on its own connection), by default.
CONNECTIONS_MAX = 256
# Idle connections kept per origin, by default; more are closed once answered.
IDLE_PER_ORIGIN_MAX = 64
# The largest read from a socket, and the largest answer head h11 will hold.
RECEIVE_BYTES_MAX = 64 * 1024
HEAD_BYTES_MAX = 64 * 1024
# A connection idle for longer is closed rather than taken, by default: well before a node's
# keep-alive ends (`keep_alive_s`, 15 s by default), so that a request is seldom written as the
# origin closes the connection (such a request may or may not have been done: `Broken`).
IDLE_S_MAX = 4.0
# The longest line of a streamed answer (an etcd watch message holds events of up to 1,000
# revisions, base64 in JSON); a longer one breaks the stream rather than growing without end.
LINE_BYTES_MAX = 64 * 1024 * 1024
# The longest chunk-size line (with its extensions) and trailer section of a body in chunks.
CHUNK_LINE_BYTES_MAX = 4096

Headers = list[tuple[bytes, bytes]]


class LinkError(Exception):
    """The answer could not be read, or the request could not be sent as it is."""


class NotReached(LinkError):
    """No connection to the origin could be made: the request never left this process."""


class Broken(LinkError):
    """The connection failed or closed after the request began to go out."""


class Progress:
    """How far one request got: `connected` once it has a connection in hand (idle or new), from
    which moment it may go out. Read by a caller whose own timeout cut the request short."""

    __slots__ = ("connected",)

    def __init__(self) -> None:
        self.connected = False


class Answer:
    """An answer: status, headers (names in lower case, as they came), body."""

    __slots__ = ("status", "headers", "body")

    def __init__(self, status: int, headers: Headers, body: bytes) -> None:
        self.status = status
        self.headers = headers
        self.body = body


class Address:
    """Where an origin is, from its base URL (`http://host:port` or `https://...`)."""

    __slots__ = ("host", "port", "tls_host", "authority")

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise LinkError(f"a URL to send to must be http:// or https:// with a host: {url!r}")
        self.host = parts.hostname
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.tls_host = parts.hostname if parts.scheme == "https" else None  # None: a plain connection
        try:
            self.authority = parts.netloc.rpartition("@")[2].encode("ascii")
        except UnicodeEncodeError:
            raise LinkError(f"a URL to send to must be ASCII: {url!r}") from None


async def connect(address: Address, tls: ssl.SSLContext | None) -> tuple[trio.abc.Stream, trio.socket.SocketType]:
    """A connection to `address` (under TLS with `tls` where its URL is https: it is given then)
    and its socket; `NotReached` if none could be made."""
    try:
        stream: trio.abc.Stream = await trio.open_tcp_stream(address.host, address.port)
    except OSError as error:
        raise NotReached(f"could not connect to {address.host}:{address.port}: {error}") from error
    socket_stream = stream
    assert isinstance(socket_stream, trio.SocketStream)
    if address.tls_host is not None:
        assert tls is not None, "an https origin is reached with a TLS context"
        secured = trio.SSLStream(socket_stream, tls, server_hostname=address.tls_host, https_compatible=True)
        try:
            await secured.do_handshake()
        except (trio.BrokenResourceError, OSError) as error:
            await trio.aclose_forcefully(secured)
            raise NotReached(f"TLS with {address.host}:{address.port} failed: {error}") from error
        stream = secured
    return stream, socket_stream.socket


async def send(stream: trio.abc.Stream, fd: int, plain: bool, data: bytes) -> None:
    """Write `data` to a connection. On a plain socket (`fd`) it is written straight away when the
    socket takes it (it nearly always does): no pass through trio's scheduler."""
    sent = 0
    if plain:
        try:
            sent = os.write(fd, data)
        except BlockingIOError:
            sent = 0
    if sent < len(data):
        await stream.send_all(memoryview(data)[sent:] if sent else data)


async def receive(stream: trio.abc.Stream, fd: int, plain: bool) -> bytes:
    """The next bytes from a connection; b"" once the other end closed it. A plain socket (`fd`)
    is waited on until readable first (an answer is seldom there yet: a read first would fail)."""
    if not plain:
        return bytes(await stream.receive_some(RECEIVE_BYTES_MAX))
    while True:
        await trio.lowlevel.wait_readable(fd)
        try:
            return os.read(fd, RECEIVE_BYTES_MAX)
        except BlockingIOError:
            continue


def written_to(fd: int) -> bool:
    """Whether the other end wrote to (or closed) this connection while nobody was reading it."""
    poller = select.poll()
    poller.register(fd, select.POLLIN | select.POLLHUP | select.POLLERR)
    return bool(poller.poll(0))


class _Link:
    """One connection to an origin: its stream, its socket, and what was read past the last answer
    (nothing, on a connection that can carry another request)."""

    __slots__ = ("stream", "socket", "fd", "plain", "buffer", "idle_since")

    def __init__(self, stream: trio.abc.Stream, socket: trio.socket.SocketType, plain: bool) -> None:
        self.stream = stream
        self.socket = socket  # (plain, or under TLS)
        self.fd = socket.fileno()
        self.plain = plain  # read and written straight on the socket (no TLS)
        self.buffer = bytearray()
        self.idle_since = 0.0  # (trio's clock) when it was last put back for the next request


    async def write(self, data: bytes) -> None:
        await send(self.stream, self.fd, self.plain, data)

    async def read(self) -> bytes:
        """The next bytes from the origin; b"" once it closed."""
        return await receive(self.stream, self.fd, self.plain)


class _Origin(Address):
    __slots__ = ("idle",)

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.idle: list[_Link] = []


class Connections:
    """Requests to origins by their base URL (`http://host:port`), on kept connections."""

    def __init__(self, connections_max: int = CONNECTIONS_MAX, idle_per_origin_max: int = IDLE_PER_ORIGIN_MAX,
                 idle_s_max: float = IDLE_S_MAX) -> None:
        if connections_max < 1 or idle_per_origin_max < 0 or not idle_s_max > 0:
            raise ValueError("connections_max >= 1, idle_per_origin_max >= 0 and idle_s_max > 0")
        self._origins: dict[str, _Origin] = {}
        self._slots = trio.Semaphore(connections_max)
        self._connections_max = connections_max
        self._idle_max = idle_per_origin_max
        self._idle_s_max = idle_s_max
        self._tls: ssl.SSLContext | None = None
        self._closed = False
        self.connects = 0  # connections made (each request on a kept one makes none)

    @property
    def busy(self) -> int:
        """Requests on their way and streams open now (each holds one of `connections_max`)."""
        return self._connections_max - self._slots.value

    async def request(self, method: str, base_url: str, target: str, headers: Headers, body: bytes,
                      progress: Progress | None = None) -> Answer:
        """Send `method target` with `headers` (no Host, Content-Length or Connection: added here)
        and `body` to the origin at `base_url`; its whole answer."""
        origin = self._origins.get(base_url)
        if origin is None:
            origin = self._origins[base_url] = _Origin(base_url)
        slots = self._slots
        try:
            slots.acquire_nowait()
        except trio.WouldBlock:
            await slots.acquire()
        try:
            link = self._idle_link(origin)
            if link is None:
                link = await self._connect(origin)
            if progress is not None:
                progress.connected = True
            answer: Answer | None = None
            reusable = False
            try:
                answer, reusable = await self._exchange(link, origin, method, target, headers, body)
            finally:
                if not (reusable and self._keep(link, origin)):
                    await trio.aclose_forcefully(link.stream)
            return answer
        finally:
            slots.release()

    def _idle_link(self, origin: _Origin) -> _Link | None:
        idle = origin.idle
        stale_at = trio.current_time() - self._idle_s_max
        while idle:
            link = idle.pop()
            if link.idle_since >= stale_at and not written_to(link.fd):  # (the origin closed it, or wrote)
                return link
            link.socket.close()  # (no TLS close_notify: the origin has closed its end, or will soon)
        return None

    async def _connect(self, origin: _Origin) -> _Link:
        if self._closed:
            raise NotReached("closed: no new connection is made")
        self.connects += 1
        if self._tls is None and origin.tls_host is not None:
            self._tls = ssl.create_default_context()
        stream, socket = await connect(origin, self._tls)
        return _Link(stream, socket, plain=origin.tls_host is None)

    async def _exchange(self, link: _Link, origin: _Origin, method: str, target: str, headers: Headers,
                        body: bytes) -> tuple[Answer, bool]:
        """Send the request in one write and read its answer: (the answer, whether the connection
        can carry another request)."""
        head = _request_head(origin, method, target, headers, body)
        try:
            await link.write(head + body)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as error:
            raise Broken(f"writing to {origin.host}:{origin.port} failed: {error}") from error
        try:
            return await self._answer(link, origin, method, head)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as error:
            raise Broken(f"reading from {origin.host}:{origin.port} failed: {error}") from error

    async def _answer(self, link: _Link, origin: _Origin, method: str, head: bytes) -> tuple[Answer, bool]:
        """The answer, read by one pattern when it has the plainest shape (a status line, header
        lines, a Content-Length: what every node sends, and etcd for a small answer), else by h11."""
        buffer = link.buffer
        while True:
            end = buffer.find(b"\r\n\r\n", 0, HEAD_BYTES_MAX)
            if end >= 0 or len(buffer) > HEAD_BYTES_MAX:
                break
            data = await link.read()
            if not data:
                raise Broken(f"{origin.host}:{origin.port} closed the connection before it answered")
            buffer += data
        plain = _plain_answer(buffer, end, method) if end >= 0 else None
        if plain is None:
            return await self._answer_h11(link, origin, method, head)
        status, headers, body_at, length, keep = plain
        while len(buffer) < body_at + length:
            data = await link.read()
            if not data:
                raise Broken(f"{origin.host}:{origin.port} closed the connection before its answer ended")
            buffer += data
        body = bytes(buffer[body_at:body_at + length])
        del buffer[:body_at + length]
        # Bytes past the answer were never asked for: the connection is not used again.
        return Answer(status, headers, body), keep and not buffer

    async def _answer_h11(self, link: _Link, origin: _Origin, method: str, head: bytes) -> tuple[Answer, bool]:
        """An answer of another shape (in chunks, to the connection's end, informational first),
        read by h11 from what came so far on: (the answer, whether the connection can carry another
        request: h11 says both sides are done, and nothing came past the answer)."""
        events = h11.Connection(h11.CLIENT, max_incomplete_event_size=HEAD_BYTES_MAX)
        try:
            request_line, *fields = head[:-4].split(b"\r\n")
            target = request_line.split(b" ")[1]
            # (its body has gone already: h11 is told of none)
            named = [(name, value) for name, _, value in (field.partition(b": ") for field in fields) if name != b"content-length"]
            events.send(h11.Request(method=method, target=target, headers=named))
            events.send(h11.EndOfMessage())
        except h11.LocalProtocolError as error:
            raise LinkError(f"the request cannot be read back: {error}") from error
        events.receive_data(bytes(link.buffer))
        link.buffer.clear()
        status = 0
        headers: Headers = []
        chunks: list[bytes] = []
        while True:
            try:
                event = events.next_event()
            except h11.RemoteProtocolError as error:
                raise Broken(f"{origin.host}:{origin.port} answered what is not HTTP/1.1: {error}") from error
            if event is h11.NEED_DATA:
                events.receive_data(await link.read())  # b"": the origin closed
                continue
            kind = type(event)
            if kind is h11.Response:
                status = event.status_code  # type: ignore[union-attr]
                headers = list(event.headers)  # type: ignore[union-attr]
            elif kind is h11.Data:
                chunks.append(bytes(event.data))  # type: ignore[union-attr]
            elif kind is h11.EndOfMessage:
                trailing, closed = events.trailing_data
                keep = events.our_state is h11.DONE and events.their_state is h11.DONE and not trailing and not closed
                return Answer(status, headers, b"".join(chunks)), keep
            elif kind is h11.ConnectionClosed or event is h11.PAUSED:
                raise Broken(f"{origin.host}:{origin.port} closed the connection before its answer ended")
            # (an informational answer, 1xx: the real one follows)

    async def stream(self, method: str, base_url: str, target: str, headers: Headers, body: bytes,
                     progress: Progress | None = None) -> Stream:
        """Send `method target` (as `request` does) on a new connection of its own, and read its
        answer's head: the `Stream` whose body is read as it comes. The caller closes it
        (`Stream.aclose`), which closes the connection; until then it holds a slot."""
        origin = self._origins.get(base_url)
        if origin is None:
            origin = self._origins[base_url] = _Origin(base_url)
        head = _request_head(origin, method, target, headers, body)
        await self._slots.acquire()
        try:
            link = await self._connect(origin)
            if progress is not None:
                progress.connected = True
            try:
                await link.write(head + body)
                return await self._stream_head(link, origin, method)
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as error:
                await trio.aclose_forcefully(link.stream)
                raise Broken(f"the stream from {origin.host}:{origin.port} failed: {error}") from error
            except BaseException:
                await trio.aclose_forcefully(link.stream)
                raise
        except BaseException:
            self._slots.release()
            raise

    async def _stream_head(self, link: _Link, origin: _Origin, method: str) -> Stream:
        """Read the head of a streamed answer; what came past it is the start of its body."""
        buffer = link.buffer
        while True:
            end = buffer.find(b"\r\n\r\n", 0, HEAD_BYTES_MAX)
            if end >= 0:
                break
            if len(buffer) > HEAD_BYTES_MAX:
                raise Broken(f"{origin.host}:{origin.port} answered a head longer than {HEAD_BYTES_MAX} bytes")
            data = await link.read()
            if not data:
                raise Broken(f"{origin.host}:{origin.port} closed the connection before it answered")
            buffer += data
        head = _stream_head(buffer, end, method)
        if head is None:
            raise Broken(f"{origin.host}:{origin.port} answered a head this client cannot stream: {bytes(buffer[:200])!r}")
        status, headers, framing = head
        body = ChunkedLines() if framing == _CHUNKED else _WholeLines(framing)
        rest = bytes(buffer[end + 4:])
        buffer.clear()
        stream = Stream(status, headers, link, origin, body, self._slots)
        if rest:
            stream._pending = body.feed(rest)
        return stream

    def _keep(self, link: _Link, origin: _Origin) -> bool:
        """Put an answered connection back for the next request, if there is room."""
        if self._closed or len(origin.idle) >= self._idle_max:
            return False
        link.idle_since = trio.current_time()
        origin.idle.append(link)
        return True

    async def aclose(self) -> None:
        """Close every idle connection; the ones in use close when their request ends."""
        self._closed = True
        for origin in self._origins.values():
            while origin.idle:
                await trio.aclose_forcefully(origin.idle.pop().stream)



class Stream:
    """A streamed answer (`Connections.stream`) on its own connection: `status`, `headers` (names
    in lower case), then its body line by line (`read_lines`) or whole (`read_body`). Close it
    with `aclose` (at once, whatever is left unread), which frees its connection and its slot."""

    __slots__ = ("status", "headers", "_link", "_origin", "_body", "_slots", "_pending", "_closed")

    def __init__(self, status: int, headers: Headers, link: _Link, origin: _Origin, body: ChunkedLines | _WholeLines,
                 slots: trio.Semaphore) -> None:
        self.status = status
        self.headers = headers
        self._link = link
        self._origin = origin
        self._body = body
        self._slots = slots
        self._pending: list[bytes] = []  # lines that came with the head
        self._closed = False

    async def read_lines(self) -> list[bytes]:
        """The next whole lines of the body, in order, without their b"\\n" (at least one), as
        many as have come; [] once the body has ended. `Broken` when the connection fails or
        the origin closes it before the body's end, or the body is not well formed."""
        if self._pending:
            lines, self._pending = self._pending, []
            return lines
        body = self._body
        origin = self._origin
        while not body.done:
            try:
                data = await self._link.read()
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as error:
                raise Broken(f"reading the stream from {origin.host}:{origin.port} failed: {error}") from error
            if data:
                lines = body.feed(data)
            else:
                try:
                    lines = body.end()
                except Broken as error:
                    raise Broken(f"{origin.host}:{origin.port} {error}") from None
            if lines:
                return lines
        return []

    async def read_body(self) -> bytes:
        """The rest of the body, whole (lines joined by b"\\n"): an answer that is not a stream,
        such as an error's."""
        lines: list[bytes] = []
        while True:
            more = await self.read_lines()
            if not more:
                return b"\n".join(lines)
            lines += more

    async def aclose(self) -> None:
        if not self._closed:
            self._closed = True
            self._slots.release()
            await trio.aclose_forcefully(self._link.stream)


class _Lines:
    """What the two ways of taking a body apart into lines share (no IO): each has `feed`, which
    returns the lines a piece of the body completed, `end`, told that the connection ended, and
    `done`, once the body has."""

    __slots__ = ("done", "_line", "_line_bytes_max")

    def __init__(self, line_bytes_max: int) -> None:
        self.done = False
        self._line = bytearray()  # the start of a line whose end has not come yet
        self._line_bytes_max = line_bytes_max

    def _split(self, data: bytes) -> list[bytes]:
        """The lines `data` completes (the line begun before first), its unfinished end kept."""
        line = self._line
        if b"\n" not in data:
            line += data
            lines = []
        else:
            lines = data.split(b"\n")
            if line:
                lines[0] = bytes(line) + lines[0]
                line.clear()
            line += lines.pop()
        if len(line) > self._line_bytes_max:
            raise Broken(f"a line of a streamed answer is longer than {self._line_bytes_max} bytes")
        if self.done and line:  # the body's last line, with no newline after it
            lines.append(bytes(line))
            line.clear()
        return lines


class ChunkedLines(_Lines):
    """A body in chunks (RFC 9112 section 7.1: a hexadecimal size line, that many bytes of data
    and a CRLF, again until a chunk of size 0, then trailer lines and an empty line), taken
    apart into the lines its data holds. A line may be split across chunks and a chunk across
    reads; several lines may come in one chunk, several chunks in one read. Extensions and
    trailers are read past. Bytes past the body's end are left unread (its connection is closed
    with it). `Broken` for a body that is not well formed, or that ends early (`end`)."""

    __slots__ = ("_raw", "_left")

    # `_left`: bytes of the current chunk's data still to come when positive; else what is next.
    _SIZE, _CRLF, _TRAILER = -1, -2, -3

    def __init__(self, line_bytes_max: int = LINE_BYTES_MAX) -> None:
        super().__init__(line_bytes_max)
        self._raw = b""  # framing bytes not yet taken apart
        self._left = self._SIZE

    def feed(self, data: bytes) -> list[bytes]:
        if self.done:
            return []
        raw = self._raw + data if self._raw else data
        size = len(raw)
        at = 0
        pieces: list[bytes] = []
        left = self._left
        while at < size:
            if left > 0:
                take = min(left, size - at)
                pieces.append(raw[at:at + take])
                at += take
                left -= take
                if not left:
                    left = self._CRLF
            elif left == self._CRLF:
                if size - at < 2:
                    break
                if raw[at:at + 2] != b"\r\n":
                    raise Broken("a chunk's data is not followed by CRLF")
                at += 2
                left = self._SIZE
            else:
                end = raw.find(b"\r\n", at, at + CHUNK_LINE_BYTES_MAX)
                if end < 0:
                    if size - at >= CHUNK_LINE_BYTES_MAX:
                        raise Broken(f"a chunk-size or trailer line is longer than {CHUNK_LINE_BYTES_MAX} bytes")
                    break
                line = raw[at:end]
                at = end + 2
                if left == self._TRAILER:
                    if not line:
                        self.done = True
                        break
                    continue
                digits = line.split(b";", 1)[0].strip(b" \t")
                if _HEX.fullmatch(digits) is None:
                    raise Broken(f"a chunk-size line is not a hexadecimal size: {line[:80]!r}")
                left = int(digits, 16) or self._TRAILER
        self._left = left
        self._raw = b"" if self.done else raw[at:]
        return self._split(b"".join(pieces) if len(pieces) != 1 else pieces[0])

    def end(self) -> list[bytes]:
        if not self.done:
            raise Broken("closed the connection before the last chunk of its answer")
        return []


class _WholeLines(_Lines):
    """A body of a known length (`length`), or up to the connection's end (-1), into lines."""

    __slots__ = ("_left",)

    def __init__(self, length: int, line_bytes_max: int = LINE_BYTES_MAX) -> None:
        super().__init__(line_bytes_max)
        self._left = length
        self.done = length == 0

    def feed(self, data: bytes) -> list[bytes]:
        if self.done:
            return []
        if self._left >= 0:
            data = data[:self._left]
            self._left -= len(data)
            self.done = not self._left
        return self._split(data)

    def end(self) -> list[bytes]:
        if self._left > 0:
            raise Broken("closed the connection before its answer ended")
        self.done = True
        return self._split(b"")


def _request_head(origin: _Origin, method: str, target: str, headers: Headers, body: bytes) -> bytes:
    """A request's head: its line, Host, the given header lines, Content-Length when it has a body."""
    lines = [b"%s %s HTTP/1.1\r\nhost: %s\r\n" % (method.encode("ascii"), target.encode("latin-1"), origin.authority)]
    lines.extend(b"%s: %s\r\n" % header for header in headers)
    if body or method not in ("GET", "HEAD", "DELETE"):
        lines.append(b"content-length: %d\r\n" % len(body))
    lines.append(b"\r\n")
    head = b"".join(lines)
    if head.count(b"\n") != len(lines) + 1 or head.count(b"\r") != len(lines) + 1 or b" " in target.encode("latin-1"):
        raise LinkError("the request cannot be sent: a line break inside its head")
    return head


# The plainest answer: HTTP/1.1, a status, header lines of a token, a colon and visible characters.
_STATUS_LINE = re.compile(rb"HTTP/1\.1 ([1-5][0-9][0-9])(?: [^\r\n]*)?\r\n")
_FIELDS = re.compile(rb"(?:[-!#$%&'*+.^_`|~0-9a-zA-Z]+:[\t\x20-\x7e\x80-\xff]*\r\n)*")


def _answer_head(buffer: bytearray, end: int) -> tuple[int, Headers, int, list[bytes], bool] | None:
    """The answer's head ending at `end`, read by one pattern, as (status, headers with names in
    lower case, its Content-Length or -1, its Transfer-Encoding values in lower case, whether the
    connection goes on); None for an informational status or a head of another shape (a
    Content-Length given twice or malformed among them)."""
    first = _STATUS_LINE.match(buffer)
    if first is None or _FIELDS.fullmatch(buffer, first.end(), end + 2) is None:
        return None
    status = int(first[1])
    if status < 200:
        return None
    headers: Headers = []
    length = -1
    codings: list[bytes] = []
    keep = True
    for line in bytes(buffer[first.end():end]).split(b"\r\n"):
        if not line:
            continue
        name, _, value = line.partition(b":")
        name = name.lower()
        value = value.strip(b" \t")
        if name == b"content-length":
            if length >= 0 or not value.isdigit():
                return None
            length = int(value)
        elif name == b"transfer-encoding":
            codings.append(value.lower())
        elif name == b"connection" and b"close" in value.lower():
            keep = False
        headers.append((name, value))
    return status, headers, length, codings, keep


def _plain_answer(buffer: bytearray, end: int, method: str) -> tuple[int, Headers, int, int, bool] | None:
    """The answer whose head ends at `end` if it has the plainest shape, as (status, headers with
    names in lower case, where its body begins, its length, whether the connection goes on);
    None otherwise (h11 reads it): an informational status, a body in chunks or to the end of
    the connection, a Content-Length given twice or malformed."""
    head = _answer_head(buffer, end)
    if head is None:
        return None
    status, headers, length, codings, keep = head
    if codings:
        return None
    if method == "HEAD" or status in (204, 304):
        length = 0
    elif length < 0:
        return None
    return status, headers, end + 4, length, keep


# A chunk's size: hexadecimal digits only (int(..., 16) would also take a sign, "0x" and "_").
_HEX = re.compile(rb"[0-9A-Fa-f]{1,16}")
# How a streamed answer's body is framed, besides a length (>= 0) or up to the connection's end (-1).
_CHUNKED = -2


def _stream_head(buffer: bytearray, end: int, method: str) -> tuple[int, Headers, int] | None:
    """The head of a streamed answer ending at `end`, as (status, headers with names in lower
    case, framing: `_CHUNKED`, a Content-Length, or -1 up to the connection's end); None for a
    head of another shape (an informational status, a coding other than chunked, a malformed or
    repeated Content-Length)."""
    head = _answer_head(buffer, end)
    if head is None:
        return None
    status, headers, length, codings, _ = head
    if codings and codings != [b"chunked"]:
        return None
    if method == "HEAD" or status in (204, 304):
        return status, headers, 0
    return status, headers, _CHUNKED if codings else length
