"""Serving an ASGI application on our own connections: sockets, TLS, the lifespan, the stop.

`serve_app` listens (plain HTTP/1.1, or HTTP/1.1 over TLS 1.2+ with a certificate), runs the
application's ASGI lifespan around the serving, and hands each accepted connection to
`connection.Connection` through the doors:

- **At most `connections_max` connections.** One more takes the place of the oldest that has
  shown no valid key (`Doors.make_room`), else it is answered 503 UNAVAILABLE with the envelope
  and closed, instead of each costing a task, buffers and a descriptor.
- **One hang-up watcher** (`doors.Hangups`) for every connection, made before the first is
  accepted and closed only once the last has ended: what connections share outlives them all.
- **One keep-alive sweep** (`Doors.sweep_idle`) for every connection: a connection that has
  waited `keep_alive_s` (or `read_timeout_s`, if shorter) for its next request closes, at most a
  second late, with no deadline per wait.
- **A graceful stop.** When `shutdown_trigger` returns, the listening sockets close, and the
  doors stop (`Doors.stop`): a connection waiting for its next request closes (one whose request
  came meanwhile answers it first), a busy one answers what it has read, with `Connection:
  close`, then closes. The serving ends once every connection has closed, or after `grace_s`
  (then what is left is cancelled). Every request read before the stop gets its answer: the
  only requests that meet a closed connection are ones sent after it closed.

This replaces hypercorn's trio worker for `runstate serve` (`connection.py` says why); the
application itself is a plain ASGI application, served as well by hypercorn or any ASGI server.
"""

from __future__ import annotations

import logging
import socket
import ssl
from contextlib import asynccontextmanager
from dataclasses import dataclass
from functools import partial
from typing import Any, AsyncIterator, Awaitable, Callable

import trio

from ..actors.errors import UNAVAILABLE
from .connection import Connection, Plain, Shared, Writer, accepted
from .doors import Door, Doors, Hangups, raw_answer

__all__ = ["Listening", "serve_app", "ssl_context"]

log = logging.getLogger("runstate.listener")

# A client that does not finish its TLS handshake within this long is dropped.
TLS_HANDSHAKE_TIMEOUT_S = 10.0
# How long the application's lifespan may take to start and to stop.
LIFESPAN_S = 60.0
# TLS ciphers offered (TLS 1.2; TLS 1.3 picks its own): forward secrecy and AEAD only.
CIPHERS = "ECDHE+AESGCM:ECDHE+CHACHA20"


@dataclass(frozen=True)
class Listening:
    """Where and how the server listens, and its connections' bounds (seconds)."""

    host: str = "127.0.0.1"
    port: int = 8080
    backlog: int = 1024
    keep_alive_s: float = 15.0
    read_timeout_s: float = 90.0
    header_timeout_s: float = 10.0
    grace_s: float = 10.0
    certfile: str | None = None
    keyfile: str | None = None

    @classmethod
    def of(cls, settings: Any) -> "Listening":
        return cls(
            host=settings.host, port=settings.port, backlog=settings.backlog, keep_alive_s=settings.keep_alive_s,
            read_timeout_s=settings.read_timeout_s, header_timeout_s=settings.header_timeout_s,
            grace_s=settings.shutdown_grace_s, certfile=settings.certfile, keyfile=settings.keyfile,
        )


def ssl_context(certfile: str, keyfile: str) -> ssl.SSLContext:
    """The server's TLS: 1.2 or later, HTTP/1.1 only in ALPN, no compression."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.set_ciphers(CIPHERS)
    context.options |= ssl.OP_NO_COMPRESSION
    context.set_alpn_protocols(["http/1.1"])
    context.load_cert_chain(certfile=certfile, keyfile=keyfile)
    return context


async def serve_app(
    app: Any,
    listening: Listening,
    doors: Doors,
    *,
    shutdown_trigger: Callable[[], Awaitable[Any]],
    plain: Plain | None = None,
    task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve `app` until `shutdown_trigger` returns and the stop is done (see the module's docstring).

    `plain`, when given, answers the requests of the plainest shape in their connection's task
    without h11 or ASGI (`http.serve_whole`); everything else goes to `app`.
    """
    listeners, binds = await _listen(listening)
    secure = listening.certfile is not None
    hangups = Hangups() if Hangups.available else None
    shared = Shared(
        app, plain, doors, hangups, keep_alive_s=listening.keep_alive_s, read_timeout_s=listening.read_timeout_s,
        header_timeout_s=listening.header_timeout_s,
    )

    async def handle(stream: trio.abc.Stream) -> None:
        await _connection(shared, stream, secure)

    try:
        async with _lifespan(app), trio.open_nursery() as watching:
            if hangups is not None:
                watching.start_soon(hangups.run)
            watching.start_soon(doors.sweep_idle, min(listening.keep_alive_s, listening.read_timeout_s))
            async with trio.open_nursery() as connections:
                async with trio.open_nursery() as accepting:
                    for listener in listeners:
                        accepting.start_soon(partial(trio.serve_listeners, handle, [listener], handler_nursery=connections))
                    task_status.started(binds)
                    await shutdown_trigger()
                    accepting.cancel_scope.cancel()
                for listener in listeners:
                    await listener.aclose()
                doors.stop()
                with trio.move_on_after(listening.grace_s):
                    await doors.all_closed.wait()
                connections.cancel_scope.cancel()
            watching.cancel_scope.cancel()
    finally:
        for listener in listeners:
            await trio.aclose_forcefully(listener)
        if hangups is not None:
            hangups.close()  # after the last connection, which may still have been releasing its watch


async def _listen(listening: Listening) -> tuple[list[trio.abc.Listener[Any]], list[str]]:
    """The listening sockets, each giving up on a client that acknowledges nothing for
    `read_timeout_s` (TCP_USER_TIMEOUT, inherited by every accepted socket), and their URLs."""
    sockets = await trio.open_tcp_listeners(listening.port, host=listening.host, backlog=listening.backlog)
    option = getattr(socket, "TCP_USER_TIMEOUT", None)
    listeners: list[trio.abc.Listener[Any]] = []
    binds = []
    context = ssl_context(listening.certfile, listening.keyfile) if listening.certfile and listening.keyfile else None
    for listener in sockets:
        sock = listener.socket
        if option is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, option, int(listening.read_timeout_s * 1000))
        host, port = sock.getsockname()[:2]
        shown = f"[{host}]" if sock.family == socket.AF_INET6 else host
        binds.append(f"{'https' if context else 'http'}://{shown}:{port}")
        listeners.append(trio.SSLListener(listener, context, https_compatible=True) if context else listener)
    return listeners, binds


async def _connection(shared: Shared, stream: trio.abc.Stream, secure: bool) -> None:
    doors = shared.doors
    if doors.connections >= doors.connections_max and not doors.make_room():
        await _refuse_connection(doors, stream)
        return
    door = Door(trio.current_time())
    doors.entered(door)
    try:
        with door.scope:  # cancelled to make room for a newer connection
            served = accepted(stream)
            if secure:  # the handshake first, bounded: a client that never finishes it holds no slot for long
                assert isinstance(served, trio.SSLStream), "a secure listener accepts TLS"
                try:
                    with trio.fail_after(TLS_HANDSHAKE_TIMEOUT_S):
                        await served.do_handshake()
                except (trio.BrokenResourceError, trio.TooSlowError):
                    await trio.aclose_forcefully(stream)
                    return
            await Connection(served, shared, door, secure=secure).run()
    except Exception:  # a fault of ours in one connection: that connection ends, the server serves on
        log.exception("a connection failed")
    finally:
        doors.left(door)


async def _refuse_connection(doors: Doors, stream: trio.abc.Stream) -> None:
    """503 with the envelope to a connection over the cap, then close it (briefly reading what it sent)."""
    doors.connections_refused += 1
    answer = raw_answer(
        503, UNAVAILABLE, f"the server has {doors.connections} connections open, its limit (connections_max); try again shortly",
        [(b"retry-after", b"1")],
    )
    with trio.move_on_after(min(doors.linger_s, 1.0)):
        try:
            if await Writer(stream, -1, doors.linger_s).write(answer) and isinstance(stream, trio.SocketStream):
                await stream.send_eof()  # a TLS stream does not half-close
                dropped = 0
                while dropped < 64 * 1024:
                    data = await stream.receive_some(16 * 1024)
                    if not data:
                        break
                    dropped += len(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass
    await trio.aclose_forcefully(stream)


@asynccontextmanager
async def _lifespan(app: Any) -> AsyncIterator[None]:
    """The application's ASGI lifespan around the serving: `lifespan.startup` before the first
    connection, `lifespan.shutdown` after the last. An application that does not speak the
    lifespan protocol (it raises at once) is served without it, as the ASGI spec says."""
    to_app, app_receives = trio.open_memory_channel[dict[str, Any]](2)
    app_sends, from_app = trio.open_memory_channel[dict[str, Any]](2)
    supported = True

    async def run() -> None:
        nonlocal supported
        scope = {"type": "lifespan", "asgi": {"version": "3.0", "spec_version": "2.0"}, "state": {}}
        try:
            await app(scope, app_receives.receive, app_sends.send)
        except Exception:
            log.debug("the application does not speak the ASGI lifespan protocol", exc_info=True)
            supported = False
        await app_sends.send({"type": "lifespan.ended"})

    async with trio.open_nursery() as nursery:
        nursery.start_soon(run)
        await _lifespan_step(to_app, from_app, "startup")
        try:
            yield
        finally:
            if supported:  # not under cancellation (a forced stop): the application is cancelled too
                await _lifespan_step(to_app, from_app, "shutdown")
            nursery.cancel_scope.cancel()


async def _lifespan_step(to_app: trio.MemorySendChannel[dict[str, Any]], from_app: trio.MemoryReceiveChannel[dict[str, Any]], step: str) -> None:
    with trio.fail_after(LIFESPAN_S):
        await to_app.send({"type": f"lifespan.{step}"})
        answer = await from_app.receive()
    if answer["type"] == f"lifespan.{step}.failed":
        raise RuntimeError(f"the application's lifespan {step} failed: {answer.get('message', '')}")
