"""Unary gRPC calls over HTTP/2, on one connection per origin: a client for a handful of servers.

What the etcd client needs from gRPC is one request message and one answer message per call
(`KV/Txn`), to a few fixed members. A gRPC library brings its own threads, event loop and
retries; this module is the protocol alone, on h2's public interface and a trio socket:

- **One connection per origin, many calls on it.** A call is an HTTP/2 stream: a HEADERS frame
  (`POST`, the method's path, `content-type: application/grpc`, `te: trailers`, the metadata)
  and the request message in DATA frames, each message behind gRPC's 5-byte prefix (a compressed
  flag, 0 here, and its length, big-endian); the answer is HEADERS, the message in DATA, and the
  trailers with `grpc-status` and `grpc-message` (or one HEADERS frame with them all, when the
  call failed before any answer: "trailers-only").
- **No task of its own.** Whichever call is waiting for its answer and finds nobody reading the
  connection reads it, hands every frame to the call it belongs to and wakes the others; a
  reader that is cancelled (its call timed out) leaves the reading to the next waiter. So a
  connection needs no nursery and nothing runs once no call is on its way.
- **Flow control** both ways: what is received is acknowledged as it is read (so a large answer
  keeps coming), and a request larger than the window the server grants waits for its updates,
  reading meanwhile.
- **What went wrong, told apart**, as `http1` tells it, since the caller decides from it whether
  to send again: `NotReached` (no connection could be made, or the server refused the stream
  before reading it -- GOAWAY past it, REFUSED_STREAM: the call surely was not done), `Broken`
  (the connection failed or the stream was reset after the request began to go out: it may or
  may not have been done), `LinkError` (an answer that is not gRPC). A gRPC status other than OK
  is an answer, not a link error: `Reply.status` and `Reply.message` carry it.
- A call cancelled on its way (the caller's timeout) resets its stream and retires the
  connection: no new call is put on it, the calls already on it finish, and it is closed after
  the last one. A member that stopped answering is thus reached on a new connection next time,
  whose connect tells a member that is gone from one that is slow.
- An idle connection the server has closed (or written to: a GOAWAY) is noticed before a call
  is put on it, by one `poll` of its socket, and replaced.
"""

from __future__ import annotations

import ssl
from urllib.parse import unquote

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.exceptions
import h2.settings
import trio

from .http1 import Address, Broken, Headers, LinkError, NotReached, Progress, connect, receive, send, written_to

__all__ = ["Channels", "Reply", "ANSWER_BYTES_MAX", "STATUS_OK", "frame", "unframe"]

# The largest answer a call may bring (etcd's server sends up to 2 GiB; a txn's answer, even one
# that reads back the batch it wrote, is a few MB at most).
ANSWER_BYTES_MAX = 64 * 1024 * 1024
STATUS_OK = 0


class Reply:
    """A call's outcome: the gRPC status (0 is OK), its message, and the answer's message bytes
    (without gRPC's prefix; empty unless the status is OK)."""

    __slots__ = ("status", "message", "payload")

    def __init__(self, status: int, message: str, payload: bytes) -> None:
        self.status = status
        self.message = message
        self.payload = payload


def frame(message: bytes) -> bytes:
    """One message as gRPC sends it: not compressed (0), its length in four bytes, big-endian."""
    return b"\0" + len(message).to_bytes(4, "big") + message


def unframe(data: bytes) -> bytes:
    """The one message of a unary answer; `LinkError` for anything else."""
    if len(data) < 5:
        raise LinkError(f"a gRPC answer of {len(data)} bytes, shorter than its 5-byte prefix")
    if data[0] != 0:
        raise LinkError(f"a gRPC answer compressed ({data[0]}), which this client never asks for")
    length = int.from_bytes(data[1:5], "big")
    if length != len(data) - 5:
        raise LinkError(f"a gRPC answer's prefix says {length} bytes, {len(data) - 5} came (one message expected)")
    return data[5:]


class _Call:
    """One stream's answer as it comes."""

    __slots__ = ("headers", "trailers", "data", "ended", "error")

    def __init__(self) -> None:
        self.headers: Headers = []
        self.trailers: Headers = []
        self.data = bytearray()
        self.ended = False
        self.error: LinkError | None = None


class _Channel:
    """One HTTP/2 connection to an origin and the calls on their way on it."""

    def __init__(self, stream: trio.abc.Stream, socket: trio.socket.SocketType, origin: _Origin) -> None:
        self.stream = stream
        self.socket = socket
        self.fd = socket.fileno()
        self.plain = origin.tls_host is None  # read and written straight on the socket (no TLS)
        self.origin = origin
        # The headers sent are this module's own, lower case and valid, and those read are looked
        # up by name (`:status`, `grpc-status`) and nothing else: h2 is spared checking and
        # normalising each of them on every call (the larger part of its cost per call). Frames,
        # streams and flow control are still h2's to check.
        config = h2.config.H2Configuration(client_side=True, header_encoding=None, validate_outbound_headers=False,
                                           normalize_outbound_headers=False, validate_inbound_headers=False)
        self.h2 = h2.connection.H2Connection(config=config)
        self.calls: dict[int, _Call] = {}
        self.broken: str | None = None  # why no call can go on: the connection failed or closed
        self.retired = False  # no new call goes on it (a call was cancelled, or the server said GOAWAY)
        self._write_lock = trio.Lock()
        self._reading = False
        self._read_round = trio.Event()  # set after each read, then made anew

    @property
    def usable(self) -> bool:
        return self.broken is None and not self.retired

    async def start(self) -> None:
        self.h2.local_settings.update({h2.settings.SettingCodes.ENABLE_PUSH: 0})
        self.h2.initiate_connection()
        await self._flush()

    def readable(self) -> bool:
        """Whether the server wrote to (or closed) this connection while nobody was reading it."""
        return written_to(self.fd)

    async def refresh(self) -> None:
        """Read what the server sent while the connection was idle (settings, a ping, a GOAWAY, its
        end): the connection is then known to be usable or not before a call is put on it."""
        if not self._reading and self.broken is None and self.readable():
            await self._read_once()

    async def unary(self, path: bytes, metadata: Headers, message: bytes) -> Reply:
        if not self.usable:
            raise NotReached(f"the connection to {self.origin.authority.decode()} is {self.broken or 'retired'}")
        try:
            stream_id = self.h2.get_next_available_stream_id()
        except h2.exceptions.NoAvailableStreamIDError:
            self.retired = True
            raise NotReached("the connection has used up its stream ids") from None
        call = _Call()
        self.calls[stream_id] = call
        headers: Headers = [(b":method", b"POST"), (b":scheme", self.origin.scheme), (b":path", path),
                            (b":authority", self.origin.authority), (b"content-type", b"application/grpc"),
                            (b"te", b"trailers"), *metadata]
        try:
            try:
                self.h2.send_headers(stream_id, headers)
            except h2.exceptions.TooManyStreamsError:
                raise NotReached("the server allows no more calls at once on this connection") from None
            await self._send_body(stream_id, call, frame(message))
            while not call.ended:
                if call.error is not None:
                    raise call.error
                await self._read_once()
            if call.error is not None:
                raise call.error
        except BaseException:
            if not call.ended and self.calls.pop(stream_id, None) is not None and self.broken is None:
                self.retired = True  # cancelled or failed on its way: the next call gets a new connection
                try:
                    self.h2.reset_stream(stream_id, h2.errors.ErrorCodes.CANCEL)
                except h2.exceptions.H2Error:
                    pass
            raise
        finally:
            if self.retired and not self.calls:
                self.close()
        return _reply(call)

    async def _send_body(self, stream_id: int, call: _Call, body: bytes) -> None:
        """The request's DATA frames, as the server's windows allow; one write when they allow it all."""
        view = memoryview(body)
        offset = 0
        while offset < len(view):
            size = min(self.h2.local_flow_control_window(stream_id), self.h2.max_outbound_frame_size, len(view) - offset)
            if size <= 0:
                await self._flush()
                if call.error is not None:
                    raise call.error
                await self._read_once()  # (until the server opens its window)
                continue
            self.h2.send_data(stream_id, view[offset:offset + size].tobytes(), end_stream=offset + size == len(view))
            offset += size
        await self._flush()

    async def _flush(self) -> None:
        """Write what h2 has to send, in order. On a plain socket it is written straight away
        when the socket takes it (it nearly always does): no pass through trio's scheduler."""
        lock = self._write_lock
        try:
            lock.acquire_nowait()
        except trio.WouldBlock:
            await lock.acquire()
        try:
            data = self.h2.data_to_send()
            if data:
                await send(self.stream, self.fd, self.plain, data)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as error:
            self._break(f"writing to {self.origin.authority.decode()} failed: {error}")
            raise Broken(self.broken or "") from error
        except BaseException:
            self._break("a write was cut short")  # (what went out of it is unknown)
            raise
        finally:
            lock.release()

    async def _receive(self) -> bytes:
        """The next bytes from the server; b"" once it closed."""
        return await receive(self.stream, self.fd, self.plain)

    async def _read_once(self) -> None:
        """Read once and hand out what came, or, when another call is reading, wait for its read."""
        if self.broken is not None:
            raise Broken(self.broken)
        if self._reading:
            await self._read_round.wait()
            return
        self._reading = True
        read_round = self._read_round
        try:
            try:
                data = await self._receive()
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as error:
                self._break(f"reading from {self.origin.authority.decode()} failed: {error}")
                return
            if not data:
                self._break(f"{self.origin.authority.decode()} closed the connection")
                return
            try:
                events = self.h2.receive_data(data)
            except h2.exceptions.ProtocolError as error:
                self._break(f"{self.origin.authority.decode()} broke HTTP/2: {error}")
                return
            for event in events:
                self._handle(event)
            if self.calls:
                await self._flush()  # (window updates a call on its way may wait for, a ping's answer)
            # With no call on its way, what h2 has to send (a ping's answer, window updates) waits
            # for the next call's write, which it joins: one write a call, not two.
        finally:
            self._reading = False
            self._read_round = trio.Event()
            read_round.set()

    def _handle(self, event: h2.events.Event) -> None:
        if isinstance(event, h2.events.DataReceived):
            if event.flow_controlled_length:
                self.h2.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            call = self.calls.get(event.stream_id)
            if call is not None:
                call.data += event.data
                if len(call.data) > ANSWER_BYTES_MAX + 5:
                    self._end(event.stream_id, LinkError(f"an answer of more than {ANSWER_BYTES_MAX} bytes"))
                    self.h2.reset_stream(event.stream_id, h2.errors.ErrorCodes.CANCEL)
        elif isinstance(event, h2.events.ResponseReceived):
            call = self.calls.get(event.stream_id)
            if call is not None:
                call.headers = list(event.headers)
        elif isinstance(event, h2.events.TrailersReceived):
            call = self.calls.get(event.stream_id)
            if call is not None:
                call.trailers = list(event.headers)
        elif isinstance(event, h2.events.StreamEnded):
            call = self.calls.pop(event.stream_id, None)
            if call is not None:
                call.ended = True
        elif isinstance(event, h2.events.StreamReset):
            if event.error_code == h2.errors.ErrorCodes.REFUSED_STREAM:
                error: LinkError = NotReached("the server refused the call before reading it (REFUSED_STREAM)")
            else:
                error = Broken(f"the server reset the call ({event.error_code!r})")
            self._end(event.stream_id, error)
        elif isinstance(event, h2.events.ConnectionTerminated):
            # GOAWAY: the calls above `last_stream_id` were never looked at; those at or below it
            # are finished as usual, and the connection takes no more.
            self.retired = True
            last = event.last_stream_id if event.last_stream_id is not None else 0
            for stream_id in [number for number in self.calls if number > last]:
                self._end(stream_id, NotReached(f"the server went away before reading the call ({event.error_code!r})"))

    def _end(self, stream_id: int, error: LinkError) -> None:
        call = self.calls.pop(stream_id, None)
        if call is not None:
            call.error = error

    def _break(self, reason: str) -> None:
        if self.broken is None:
            self.broken = reason
        for call in self.calls.values():
            call.error = Broken(reason)
        self.calls.clear()
        self.close()

    def close(self) -> None:
        """Close the socket (no TLS close_notify, no GOAWAY: nothing is waiting for either)."""
        if self.broken is None:
            self.broken = "closed"
        self.socket.close()


def _reply(call: _Call) -> Reply:
    """The call's outcome from its headers, trailers and data."""
    status_line = dict(call.headers).get(b":status")
    if status_line != b"200":
        raise LinkError(f"answered HTTP status {status_line!r}, not a gRPC answer")
    # Trailers-only: the status came in the headers (a call that failed before any answer).
    fields = dict(call.trailers) if call.trailers else dict(call.headers)
    code = fields.get(b"grpc-status")
    if code is None or not code.isdigit():
        raise LinkError(f"a gRPC answer without a grpc-status (trailers {call.trailers!r})")
    message = unquote(fields.get(b"grpc-message", b"").decode("utf-8", "replace"))
    status = int(code)
    if status != STATUS_OK:
        return Reply(status, message, b"")
    return Reply(status, message, unframe(bytes(call.data)))


class _Origin(Address):
    __slots__ = ("scheme", "channel", "connecting")

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.scheme = b"https" if self.tls_host is not None else b"http"
        self.channel: _Channel | None = None
        self.connecting = trio.Lock()


class Channels:
    """Unary gRPC calls to origins by their base URL (`http://host:port`), one connection each."""

    def __init__(self) -> None:
        self._origins: dict[str, _Origin] = {}
        self._retired: set[_Channel] = set()
        self._tls: ssl.SSLContext | None = None
        self._closed = False
        self.connects = 0  # connections made

    @property
    def busy(self) -> int:
        """Calls on their way now."""
        return sum(len(origin.channel.calls) for origin in self._origins.values() if origin.channel is not None)

    async def unary(self, base_url: str, path: bytes, metadata: Headers, message: bytes, progress: Progress) -> Reply:
        """One call: `message` to the method at `path` ("/package.Service/Method"), its `Reply`."""
        origin = self._origins.get(base_url)
        if origin is None:
            origin = self._origins[base_url] = _Origin(base_url)
        channel = await self._channel(origin)
        progress.connected = True
        return await channel.unary(path, metadata, message)

    async def _channel(self, origin: _Origin) -> _Channel:
        channel = origin.channel
        if channel is not None and channel.usable and not origin.connecting.locked() and not channel.readable():
            return channel  # (the common case, decided without a pass through trio's scheduler)
        async with origin.connecting:
            channel = origin.channel
            if channel is not None:
                await channel.refresh()
                if channel.usable:
                    return channel
                if channel.calls:
                    self._retired.add(channel)  # (closed after its last call; kept to be closed with the rest)
                origin.channel = None
            if self._closed:
                raise NotReached("closed: no new connection is made")
            self._retired = {old for old in self._retired if old.broken is None}
            channel = origin.channel = await self._connect(origin)
            return channel

    async def _connect(self, origin: _Origin) -> _Channel:
        self.connects += 1
        if self._tls is None and origin.tls_host is not None:
            self._tls = ssl.create_default_context()
            self._tls.set_alpn_protocols(["h2"])
        stream, socket = await connect(origin, self._tls)
        channel = _Channel(stream, socket, origin)
        try:
            await channel.start()
        except Broken as error:
            raise NotReached(f"could not start HTTP/2 with {origin.host}:{origin.port}: {error}") from error
        return channel

    async def aclose(self) -> None:
        self._closed = True
        for origin in self._origins.values():
            if origin.channel is not None:
                origin.channel.close()
        for channel in self._retired:
            channel.close()
        self._retired.clear()
