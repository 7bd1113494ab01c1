"""The doors: who gets in, what a request may hold, and what a refusal below the router looks like.

The server's connections (`connection.py`, accepted by `listener.py`) and the router's request
handling (`http.py`, `console/site.py`) share what is here:

- **The bounds of the doors** (`Doors`): at most `connections_max` connections are served at once;
  one more takes the place of the oldest one that has shown no valid key, else it is answered 503
  UNAVAILABLE with the envelope and closed. The stop of the server goes through here too
  (`Doors.stop`): idle connections close, busy ones after their answer, and a request passed on
  to another node that is still waiting there is answered 503 (the node is going).
- **The keep-alive** (`Doors.sweep_idle`): one task per server ends the connections that have
  waited `keep_alive_s` for their next request (at most a second late), where a deadline per wait
  would cost a cancel scope and an entry in trio's deadline heap per request.
- **The body** (`read_body`, `take_body`): read only once the request may proceed (route found,
  key known), and counted against `body_bytes_in_flight_max`, a bound on the bytes held across
  every request in flight: past it a request gets 503 UNAVAILABLE with Retry-After, not memory.
- **The refusal of an unread body** (`drain`, `send_while_discarding`): a request refused before
  its body was read (401 for an unknown key, 413 for a `Content-Length` over the limit) has the
  rest of its body read and dropped, at most `LINGER_BYTES_MAX` bytes for at most `LINGER_S`
  seconds, before the answer goes out. A client that sends its whole body before reading (httpx,
  the SDKs) then reads the answer instead of a reset connection, and the connection can be used
  again; nothing of the body is kept. This is nginx's lingering close.
- **Answers made below the router** (`raw_answer`): a whole HTTP/1.1 answer with the error
  envelope that closes its connection, for what is refused before any request is read (431, 400,
  408, 503 at the cap), since clients turn an empty error body into UNAVAILABLE.
- **Clients that go away** (`Gone`, `Hangups`): a long poll, or an event stream, stops when its
  client leaves, noticed by one epoll of the server's own rather than by a task per request.
"""

from __future__ import annotations

import logging
import os
import select
from typing import TYPE_CHECKING, Any, Awaitable, Callable

import orjson
import trio

from ..actors.errors import UNAUTHENTICATED, UNAVAILABLE, VALIDATION_FAILED
from .errors import ApiError
from .heads import server_headers

if TYPE_CHECKING:
    from .http import Request
    from .runtime import Runtime

__all__ = [
    "Doors", "Door", "Gone", "SocketGone", "Hangups", "BodyReading", "ClientGone", "read_body", "take_body", "drain",
    "send_while_discarding", "check_known_key", "raw_answer", "declared_length", "LINGER_BYTES_MAX", "LINGER_S", "SWEEP_S",
]

log = logging.getLogger("runstate.doors")

# A request refused before its body was read has the rest read and dropped, at most this many bytes
# for at most this long (nginx's lingering close gives 30 s), so its client reads the answer rather
# than a reset connection. Dropping costs bandwidth, not memory.
LINGER_BYTES_MAX = 64 * 1024 * 1024
LINGER_S = 5.0
# The keep-alive sweep (`Doors.sweep_idle`) looks at the idle connections at most this often.
SWEEP_S = 1.0
REASONS = {400: b"Bad Request", 408: b"Request Timeout", 413: b"Content Too Large",
           431: b"Request Header Fields Too Large", 500: b"Internal Server Error", 501: b"Not Implemented",
           503: b"Service Unavailable", 505: b"HTTP Version Not Supported"}


class Door:
    """One connection in: when it opened, whether it has shown a key the server knows, how to
    close it (its cancel scope), and, while it waits for its next request, since when (`idle_since`)
    and how to end that wait (`wake`: the keep-alive sweep when it has waited too long, the stop
    of the server at once)."""

    __slots__ = ("opened", "authenticated", "scope", "fd", "idle_since", "idle")

    def __init__(self, opened: float) -> None:
        self.opened = opened
        self.authenticated = False
        self.scope = trio.CancelScope()
        # The plain socket the connection waits on (its wait is woken by `notify_closing`); -1 for
        # TLS, whose wait is woken through its cancel scope (`idle`).
        self.fd = -1
        # When the wait for the next request began (trio's clock); None while the connection is not waiting.
        self.idle_since: float | None = None
        self.idle: trio.CancelScope | None = None

    def wake(self) -> None:
        """End the wait for the next request now: the connection reads what came meanwhile, if
        anything, and otherwise closes. Only for a door that waits (`idle_since` set): its socket
        is open, since the connection closes it only once the wait has ended."""
        self.idle_since = None
        if self.fd >= 0:
            # Wakes the task waiting on the socket with ClosedResourceError, with no cancel scope; the
            # socket stays open (and may be waited on again) until the connection closes it.
            trio.lowlevel.notify_closing(self.fd)
        elif self.idle is not None:
            self.idle.cancel()


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
        # Set by `stop`: no connection waits for another request, every answer closes its connection.
        self.stopping = False
        # Set once stopping and every connection has closed.
        self.all_closed = trio.Event()
        # Requests passed on to another node and waiting there (a long poll): answered 503 at the stop.
        self.waits: set[trio.CancelScope] = set()

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

    def entered(self, door: Door) -> None:
        self.open[door] = None
        self.connections += 1

    def left(self, door: Door) -> None:
        self.open.pop(door, None)
        self.connections -= 1
        assert self.connections >= 0
        if self.stopping and self.connections == 0:
            self.all_closed.set()

    def stop(self) -> None:
        """The server stops: connections waiting for a request close now (a request that came
        meanwhile is answered first), the others once their answer is out, and requests waiting
        at another node are answered 503. Idempotent."""
        if self.stopping:
            return
        self.stopping = True
        for door in self.open:
            if door.idle_since is not None:
                door.wake()
        for scope in self.waits:
            scope.cancel()
        if self.connections == 0:
            self.all_closed.set()

    async def sweep_idle(self, idle_s: float) -> None:
        """End the waits for a next request that have lasted `idle_s` (the keep-alive), forever.

        One task per server instead of a deadline per wait: a connection going idle only records
        when (`Door.idle_since`). The sweep wakes at the earliest end of a wait, but no sooner than
        `SWEEP_S` after its last look (a tenth of `idle_s` if that is shorter), so a connection
        closes between `idle_s` and `idle_s` plus that step after its last answer; with no
        connection waiting, it sleeps `idle_s`, since a wait that begins later ends later.
        """
        step = min(SWEEP_S, idle_s / 10)
        while True:
            now = trio.current_time()
            earliest = now + idle_s
            for door in self.open:
                since = door.idle_since
                if since is not None:
                    ends = since + idle_s
                    if ends <= now:
                        door.wake()
                    elif ends < earliest:
                        earliest = ends
            await trio.sleep_until(max(earliest, now + step))

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
    """The request's Content-Length as a number (the HTTP layer has already refused a malformed one)."""
    value = headers.get("content-length")
    return int(value) if value is not None and value.strip().isdigit() else None


async def read_body(
    receive: Callable[[], Awaitable[dict[str, Any]]], headers: dict[str, str], bytes_max: int, doors: Doors, reading: BodyReading
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
    """`read_body` for a body that has all come with its head (a plain request): the same bounds."""
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


async def drain(receive: Callable[[], Awaitable[dict[str, Any]]], doors: Doors, reading: BodyReading) -> bool:
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


async def send_while_discarding(receive: Callable[[], Awaitable[dict[str, Any]]], answer: Callable[[], Awaitable[None]], seconds: float) -> None:
    """Send an answer while the rest of the request is read and dropped, for at most `seconds`.

    Under an ASGI server that queues a request's body for the application (hypercorn), an answer
    that ends while the client is still sending is told to the request through the same bounded
    queue the body arrives in; if nobody empties that queue, the answer never completes. Our own
    connection writes the answer at once, and reads for hang-ups only (`Gone.wait`).
    """

    async def discard() -> None:
        with trio.move_on_after(seconds):
            while (await receive())["type"] != "http.disconnect":
                pass

    async with trio.open_nursery() as nursery:
        nursery.start_soon(discard)
        await answer()
        nursery.cancel_scope.cancel()


def check_known_key(request: Request, services: Runtime) -> None:
    """401 UNAUTHENTICATED now, from the headers, when the bearer key opens nothing on this server."""
    secret = request.bearer()
    if not services.key_is_known(secret):
        raise ApiError(UNAUTHENTICATED, "the API key is not valid")


# -- answers made below the router ----------------------------------------------------------------


def raw_answer(status: int, code: str, message: str, extra: list[tuple[bytes, bytes]] | tuple[()] = ()) -> bytes:
    """A whole HTTP/1.1 answer with the error envelope that closes the connection."""
    body = orjson.dumps({"error": {"code": code, "message": message, "requestId": "req_" + os.urandom(8).hex()}})
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", b"%d" % len(body)),
        (b"connection", b"close"),
        *extra,
        *server_headers(),
    ]
    head = b"HTTP/1.1 %d %s\r\n" % (status, REASONS.get(status, b"Error"))
    return head + b"".join(b"%s: %s\r\n" % (name, value) for name, value in headers) + b"\r\n" + body


# -- clients that go away -------------------------------------------------------------------------


class Gone:
    """Whether the client of a request went away before its answer, for a long poll to stop
    waiting (`http.serve_http`) and an event stream to end, without a task of their own reading
    for `http.disconnect`. The connection hands one to each request, in the ASGI scope under
    `extensions["runstate.gone"]`; this one is closed only by `close` (a socket that broke under a
    write, a body that ended short); `SocketGone` also watches the socket."""

    __slots__ = ("closed", "scope", "_event")

    def __init__(self) -> None:
        self.closed = False
        self.scope: trio.CancelScope | None = None  # the long poll to cancel, while it waits
        self._event: trio.Event | None = None

    def close(self) -> None:
        self.closed = True
        if self.scope is not None:
            self.scope.cancel()
        if self._event is not None:
            self._event.set()

    def watch(self, scope: trio.CancelScope) -> None:
        """Cancel `scope` when the client goes (at once if it has gone)."""
        self.scope = scope
        if self.closed:
            scope.cancel()

    def parked(self) -> None:
        """The long poll now waits: from here on, the client's going away must be noticed."""

    def unwatch(self) -> None:
        self.scope = None

    async def wait(self) -> None:
        """Until the client goes (an event stream's `http.disconnect`)."""
        if not self.closed:
            self.parked()
            if self._event is None:
                self._event = trio.Event()
            await self._event.wait()

    def release(self) -> None:
        """The request is over: nothing of it is watched any more."""


class SocketGone(Gone):
    """A `Gone` that also watches its socket while something waits on it (from `parked` or `wait`
    on): the socket is in the server's `Hangups`, which closes this when the client hangs up,
    until the connection releases it at the end of the request. A request answered at once (a
    free key, a queued message) costs nothing here."""

    __slots__ = ("_fd", "_hangups", "_held")

    def __init__(self, fd: int, hangups: "Hangups") -> None:
        super().__init__()
        self._fd = fd
        self._hangups = hangups
        self._held = False

    def parked(self) -> None:
        if not self._held and not self.closed:
            self._held = True
            self._hangups.add(self._fd, self)

    def release(self) -> None:
        if self._held:
            self._held = False
            self._hangups.remove(self._fd)


class Hangups:
    """The sockets of the requests that wait now (long polls, event streams), in one epoll of the
    server's own that one task watches (`run`): a socket whose peer closed it (EPOLLRDHUP) or
    broke it (EPOLLHUP, EPOLLERR) closes its `Gone`. Bytes arriving (the client's next request)
    wake nothing: they wait for the connection to read them. Each wait costs two system calls
    here, where a task of its own reading its socket would cost a task and a cancel scope.

    Shared by every connection, so it outlives them all: the listener closes it (`close`) only
    once its last connection has ended. Linux only (`available`); elsewhere a client that goes
    away is noticed when its wait ends.
    """

    available = hasattr(select, "epoll")

    def __init__(self) -> None:
        self._epoll = select.epoll()
        self._gone: dict[int, Gone] = {}
        self._closed = False

    def add(self, fd: int, gone: Gone) -> None:
        assert not self._closed, "a request waits after the server's connections have all ended"
        try:
            self._epoll.register(fd, select.EPOLLRDHUP)
        except FileExistsError:
            self._epoll.modify(fd, select.EPOLLRDHUP)
        self._gone[fd] = gone

    def remove(self, fd: int) -> None:
        assert not self._closed, "a request ends after the server's connections have all ended"
        if self._gone.pop(fd, None) is not None:
            try:
                self._epoll.unregister(fd)
            except OSError:  # the socket was closed already: the kernel has forgotten it
                pass

    async def run(self) -> None:
        while True:
            await trio.lowlevel.wait_readable(self._epoll)
            for fd, _ in self._epoll.poll(0):
                gone = self._gone.get(fd)
                self.remove(fd)
                if gone is not None:
                    gone.close()

    def close(self) -> None:
        assert not self._gone, f"{len(self._gone)} sockets still watched as the watcher closes"
        self._closed = True
        self._epoll.close()
