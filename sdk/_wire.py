"""HTTP/1.1 on a pool of plain TCP connections: the default transport for an `http://` server.

The wire contract's requests are small JSON exchanges on keep-alive connections, and in a swarm
one process sends thousands a second, so what each costs on this side counts: httpx spends about
0.7 ms of CPU on one (its pool looks at every connection it holds on each request, and each
request and response goes through several layers of objects), where writing the request's bytes
and reading the answer's takes about 0.1 ms. This transport does only that, on anyio sockets
(asyncio and trio alike):

- a request is written as one buffer: the request line, `host`, the caller's headers,
  `content-length`, the body;
- the answer is read from the connection's buffer: the status line and headers (names in lower
  case; a header sent twice is joined with ", "), then the body by `content-length`, chunked
  transfer coding, or up to the end of the stream (which then closes the connection);
- connections are kept for the next request (most recently used first) unless the answer says
  `connection: close` or is HTTP/1.0; one idle longer than `IDLE_S` is closed instead of used
  (the server closes its end after its own keep-alive timeout, 15 s by default);
- a connection that was idle in the pool and turns out to be closed by the server (it ends, or is
  reset, before any byte of the answer) is replaced by a new one and the request written again,
  once: the server did not read it (a server also ends a connection after so many requests);
- `timeout_s` bounds each phase as for `HTTPTransport`: the connect, the write, each read, and a
  wait for a connection when `connections_max` are in use;
- any failure to exchange (refused, reset, timed out, a malformed answer) is `TransportError`,
  and that connection is closed; so is one whose request was cancelled half way.

TLS and proxies are httpx's job: `runstate.transport.default_transport` picks this one only for
`http://` with no proxy set for the host.
"""

from __future__ import annotations

from typing import Any, Awaitable, Callable, Mapping
from urllib.parse import quote, urlsplit

import anyio
import anyio.abc

from . import _runtime
from .transport import CONNECTIONS_MAX, Exchange, TransportError

__all__ = ["SocketTransport", "IDLE_S", "HEAD_BYTES_MAX"]

# An idle pooled connection older than this is closed rather than used (under the server's 15 s).
IDLE_S = 5.0
# The longest status line and headers of an answer.
HEAD_BYTES_MAX = 64 * 1024
# One read from a socket.
READ_BYTES = 64 * 1024
# Characters a request path may hold as they are (RFC 3986 pchar, `/`, `?`, `&`, `=` and `%`).
_PATH_SAFE = "/%?=&:@!$'()*+,;~-._"


class _Fresh(Exception):
    """A pooled connection ended before any byte of the answer: write the request on a new one."""


class _Connection:
    """One TCP connection, on the running library's own streams: asyncio's keep reading into
    their buffer (anyio's asyncio streams stop and start the socket's reads around each receive,
    two system calls a read), trio's are trio's."""

    __slots__ = ("send", "receive", "close", "buffer", "idle_since", "requests")

    send: Callable[[bytes], Awaitable[None]]
    receive: Callable[[], Awaitable[bytes]]
    close: Callable[[], None]

    def __init__(self) -> None:
        self.buffer = bytearray()
        self.idle_since = 0.0
        self.requests = 0

    @classmethod
    async def open(cls, host: str, port: int) -> "_Connection":
        connection = cls()
        if _runtime.current_library() == "trio":
            import trio

            stream = await trio.open_tcp_stream(host, port)
            connection.send = stream.send_all
            connection.receive = lambda: stream.receive_some(READ_BYTES)
            connection.close = stream.socket.close
        else:
            import asyncio

            reader, writer = await asyncio.open_connection(host, port, limit=READ_BYTES)

            async def send(data: bytes) -> None:
                writer.write(data)
                if writer.transport.get_write_buffer_size() > READ_BYTES:
                    await writer.drain()

            connection.send = send
            connection.receive = lambda: reader.read(READ_BYTES)
            connection.close = writer.close
        return connection


class SocketTransport:
    """HTTP/1.1 to an `http://` server on a pool of keep-alive TCP connections (module docstring)."""

    def __init__(self, base_url: str, *, connections_max: int = CONNECTIONS_MAX) -> None:
        parts = urlsplit(base_url)
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError(f"SocketTransport speaks plain http://, not {base_url!r} (use HTTPTransport)")
        self.base_url = base_url
        """The server's URL (`http://host:port`), which every path is sent under."""
        self._host = parts.hostname
        self._port = parts.port or 80
        self._host_header = parts.netloc.rpartition("@")[2]
        self._prefix = parts.path.rstrip("/")
        self._idle: list[_Connection] = []
        self._open = 0
        self._connections_max = connections_max
        self._freed: Any = None  # an anyio.Event while some request waits for a connection
        self._closed = False
        # Requests written (each try of each request), for the bench and the tests.
        self.requests = 0
        """Requests sent so far (for tests and the benchmarks)."""

    async def send(
        self,
        method: str,
        path: str,
        headers: Mapping[str, str],
        body: bytes | None,
        timeout_s: float,
    ) -> Exchange:
        """One request on a kept connection (a new one if none is free, and once more on a fresh
        one if a kept connection turns out closed); no answer raises `TransportError`."""
        if self._closed:
            raise TransportError("the transport is closed")
        request = self._encode(method, path, headers, body)
        for fresh in (False, True):
            connection = await self._checkout(timeout_s, fresh)
            reused = connection.requests > 0
            self.requests += 1
            try:
                with anyio.fail_after(timeout_s):
                    await connection.send(request)
                    status, answer_headers, data, keep = await self._answer(connection, method, reused)
            except _Fresh:
                self._discard(connection)
                continue
            except BaseException as error:
                self._discard(connection)
                if isinstance(error, TransportError):
                    raise
                if isinstance(error, (OSError, TimeoutError, EOFError, anyio.BrokenResourceError, anyio.ClosedResourceError)) or _is_trio_broken(error):
                    raise TransportError(f"{type(error).__name__}: {error or 'the connection failed'}") from error
                raise
            connection.requests += 1
            if keep and not connection.buffer and not self._closed:
                self._checkin(connection)
            else:
                self._discard(connection)
            return status, answer_headers, data
        raise TransportError("the server closed a new connection before answering")  # pragma: no cover

    # -- the request --------------------------------------------------------------------------------

    def _encode(self, method: str, path: str, headers: Mapping[str, str], body: bytes | None) -> bytes:
        target = self._prefix + path
        if not target.isascii() or " " in target or not target.isprintable():
            target = quote(target, safe=_PATH_SAFE)
        lines = [f"{method} {target} HTTP/1.1\r\nhost: {self._host_header}\r\n"]
        for name, value in headers.items():
            if "\r" in value or "\n" in value or "\r" in name or "\n" in name or ":" in name:
                raise TransportError(f"the header {name!r} holds a line break or a colon in its name: not sent")
            lines.append(f"{name}: {value}\r\n")
        if body is not None:
            lines.append(f"content-length: {len(body)}\r\n")
        lines.append("\r\n")
        try:
            head = "".join(lines).encode("latin-1")
        except UnicodeEncodeError as error:
            raise TransportError(f"a header is not latin-1 text: {error}") from None
        return head + body if body else head

    # -- the answer ---------------------------------------------------------------------------------


    async def _answer(
        self, connection: _Connection, method: str, reused: bool
    ) -> tuple[int, dict[str, str], bytes, bool]:
        buffer = connection.buffer
        while True:
            end = buffer.find(b"\r\n\r\n")
            if end >= 0:
                break
            if len(buffer) > HEAD_BYTES_MAX:
                raise TransportError(f"the answer's head is over {HEAD_BYTES_MAX} bytes")
            try:
                chunk = await connection.receive()
            except Exception as error:
                if reused and not buffer and (isinstance(error, OSError) or _is_trio_broken(error)):
                    raise _Fresh() from None
                raise
            if not chunk:
                if reused and not buffer:
                    raise _Fresh()
                raise TransportError("the server closed the connection before its answer was complete")
            buffer += chunk
        head = bytes(buffer[:end]).decode("latin-1")
        del buffer[: end + 4]
        status_line, _, rest = head.partition("\r\n")
        version, _, status_text = status_line.partition(" ")
        try:
            status = int(status_text[:3])
        except ValueError:
            raise TransportError(f"not an HTTP status line: {status_line[:100]!r}") from None
        if not version.startswith("HTTP/1."):
            raise TransportError(f"not an HTTP/1.x answer: {status_line[:100]!r}")
        answer_headers: dict[str, str] = {}
        for line in rest.split("\r\n") if rest else ():
            name, colon, value = line.partition(":")
            if not colon:
                raise TransportError(f"a malformed header line: {line[:100]!r}")
            name = name.strip().lower()
            value = value.strip()
            answer_headers[name] = f"{answer_headers[name]}, {value}" if name in answer_headers else value
        keep = version == "HTTP/1.1" and "close" not in answer_headers.get("connection", "").lower()
        if method == "HEAD" or status in (204, 304) or 100 <= status < 200:
            return status, answer_headers, b"", keep
        if "chunked" in answer_headers.get("transfer-encoding", "").lower():
            return status, answer_headers, await self._chunked(connection), keep
        length = answer_headers.get("content-length")
        if length is None:  # the body runs to the end of the stream
            while True:
                chunk = await connection.receive()
                if not chunk:
                    break
                buffer += chunk
            data = bytes(buffer)
            buffer.clear()
            return status, answer_headers, data, False
        try:
            size = int(length)
        except ValueError:
            raise TransportError(f"a malformed content-length: {length[:40]!r}") from None
        if size < 0:
            raise TransportError(f"a malformed content-length: {length[:40]!r}")
        await self._fill(connection, size)
        data = bytes(buffer[:size])
        del buffer[:size]
        return status, answer_headers, data, keep

    async def _fill(self, connection: _Connection, size: int) -> None:
        buffer = connection.buffer
        while len(buffer) < size:
            chunk = await connection.receive()
            if not chunk:
                raise TransportError("the server closed the connection in the middle of its answer")
            buffer += chunk

    async def _line(self, connection: _Connection) -> bytes:
        buffer = connection.buffer
        while True:
            end = buffer.find(b"\r\n")
            if end >= 0:
                line = bytes(buffer[:end])
                del buffer[: end + 2]
                return line
            if len(buffer) > HEAD_BYTES_MAX:
                raise TransportError("a chunk's size line is too long")
            chunk = await connection.receive()
            if not chunk:
                raise TransportError("the server closed the connection in the middle of its answer")
            buffer += chunk

    async def _chunked(self, connection: _Connection) -> bytes:
        parts: list[bytes] = []
        buffer = connection.buffer
        while True:
            line = await self._line(connection)
            try:
                size = int(line.split(b";", 1)[0].strip(), 16)
            except ValueError:
                raise TransportError(f"a malformed chunk size: {line[:40]!r}") from None
            if size == 0:
                while await self._line(connection):  # trailers, up to the empty line
                    pass
                return b"".join(parts)
            await self._fill(connection, size + 2)
            parts.append(bytes(buffer[:size]))
            del buffer[: size + 2]

    # -- the pool -----------------------------------------------------------------------------------

    async def _checkout(self, timeout_s: float, fresh: bool) -> _Connection:
        """A connection for one request: the most recently used idle one (unless `fresh`), else a
        new one, waiting up to `timeout_s` while `connections_max` are in use."""
        idle = self._idle
        if not fresh:
            now = anyio.current_time()
            while idle:
                connection = idle.pop()
                if now - connection.idle_since < IDLE_S:
                    return connection
                self._discard(connection)
        if self._open >= self._connections_max:
            try:
                with anyio.fail_after(timeout_s):
                    while self._open >= self._connections_max:
                        if idle:
                            if not fresh:
                                return idle.pop()
                            self._discard(idle.pop())
                            continue
                        if self._freed is None:
                            self._freed = anyio.Event()
                        await self._freed.wait()
            except TimeoutError:
                raise TransportError(f"no connection to {self.base_url} came free within {timeout_s:g} s") from None
        self._open += 1
        try:
            with anyio.fail_after(timeout_s):
                return await _Connection.open(self._host, self._port)
        except BaseException as error:
            self._open -= 1
            self._notify()
            if isinstance(error, (OSError, TimeoutError)):
                raise TransportError(f"cannot connect to {self.base_url}: {type(error).__name__}: {error}") from error
            raise

    def _checkin(self, connection: _Connection) -> None:
        connection.idle_since = anyio.current_time()
        self._idle.append(connection)
        self._notify()

    def _discard(self, connection: _Connection) -> None:
        """Close a connection at once (a plain socket has nothing to say on its way out)."""
        self._open -= 1
        self._notify()
        try:
            connection.close()
        except OSError:
            pass

    def _notify(self) -> None:
        if self._freed is not None:
            self._freed.set()
            self._freed = None

    async def aclose(self) -> None:
        """Close every idle connection; those in use are closed when their request ends."""
        self._closed = True
        idle, self._idle = self._idle, []
        for connection in idle:
            self._discard(connection)


def _is_trio_broken(error: BaseException) -> bool:
    """trio's error for a stream that broke (reset, closed under it)."""
    return type(error).__name__ in ("BrokenResourceError", "ClosedResourceError") and type(error).__module__.startswith("trio")
