"""`runstate serve`: the app on our own connections (`listener.py`), with signals handled for a graceful stop.

`hypercorn_config` maps the same settings onto hypercorn's configuration, for serving the same ASGI
application with stock hypercorn (`hypercorn runstate.server.asgi:app`) and for the HTTP ceiling of
the benchmarks (`bench/ceiling_app.py`).
"""

from __future__ import annotations

import logging
import socket
from functools import partial
from typing import Callable

import trio
from hypercorn.config import Config, Sockets

from .app import create_app
from .http import serve_whole
from .listener import TLS_HANDSHAKE_TIMEOUT_S, Listening, serve_app
from .logs import AccessLog, event
from .routes import ROUTER
from .runtime import NewKeyHandler
from .settings import Settings
from .telemetry import Telemetry

__all__ = ["serve", "hypercorn_config"]

log = logging.getLogger("runstate.server")


class _Config(Config):
    """hypercorn's Config, with a bound on how long an answer may wait for a client that reads nothing.

    hypercorn shields its socket writes from cancellation, so no timeout in the app can end a send
    to a client that stopped reading (zero TCP window). `TCP_USER_TIMEOUT` on the listening socket
    (inherited by every accepted one) makes the kernel give up on such a connection after
    `read_timeout_s`: the write fails and hypercorn closes the connection.
    """

    send_timeout_s: float | None = None

    def create_sockets(self) -> Sockets:
        sockets = super().create_sockets()
        option = getattr(socket, "TCP_USER_TIMEOUT", None)
        if option is not None and self.send_timeout_s:
            for sock in (*sockets.secure_sockets, *sockets.insecure_sockets):
                if sock.family in (socket.AF_INET, socket.AF_INET6):
                    sock.setsockopt(socket.IPPROTO_TCP, option, int(self.send_timeout_s * 1000))
        return sockets


def hypercorn_config(settings: Settings) -> Config:
    config = _Config()
    config.send_timeout_s = settings.read_timeout_s
    config.bind = [f"{settings.host}:{settings.port}"]
    config.accesslog = None
    config.errorlog = logging.getLogger("hypercorn.error")
    # Keep-alive connections from SDK pools stay open between calls.
    config.keep_alive_timeout = settings.keep_alive_s
    config.backlog = settings.backlog
    # Slow clients: a connection silent this long is closed, whatever it is doing (a slowloris
    # sending its headers a byte at a time, a client that never reads its answer). Requests whose
    # body never ends are bounded in `serve_http` by `body_timeout_s`.
    config.read_timeout = settings.read_timeout_s  # type: ignore[assignment]  # hypercorn annotates int; it takes seconds, a float like its other timeouts
    # At shutdown, requests in flight get this long to finish.
    config.graceful_timeout = settings.shutdown_grace_s
    # TLS, served by hypercorn's own SSL context (TLS 1.2 or later); HTTP/1.1 only (no h2 offered in
    # ALPN). A handshake not done within this is dropped.
    if settings.certfile is not None:
        config.certfile = settings.certfile
        config.keyfile = settings.keyfile
        config.alpn_protocols = ["http/1.1"]
        config.ssl_handshake_timeout = TLS_HANDSHAKE_TIMEOUT_S
    return config


async def serve(
    settings: Settings,
    on_new_key: NewKeyHandler | None = None,
    *,
    on_admin_key: Callable[[str], None] | None = None,
    access: AccessLog | None = None,
    on_ready: Callable[[list[str]], None] | None = None,
    task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED,
) -> bool:
    """Serve until SIGTERM/SIGINT and a graceful shutdown; returns True when a second signal cut it short.

    `on_ready(binds)` is called once the server listens *and* its state is ready (recovered, keys
    in place): what it prints comes after the log's `ready` line, never before it.
    """
    app = create_app(settings, on_new_key=on_new_key, telemetry=Telemetry(access=access), on_admin_key=on_admin_key)
    lifecycle = app.lifecycle
    # The runtime lives beside the serving, not inside the app's lifespan, so that it stops in
    # order (journal flushed, final snapshot) once the last connection has closed.
    lifecycle.external = True
    listening = trio.Event()
    bound: list[str] = []

    class _Status(trio.TaskStatus[list[str]]):
        def started(self, binds: list[str] | None = None) -> None:
            assert binds is not None, "the listener starts with the addresses it bound"
            event(log, "listening", "listening", binds=binds)
            bound.extend(binds)
            listening.set()
            task_status.started(binds)

    async def announce_when_ready() -> None:
        await listening.wait()
        await app.runtime.became_ready.wait()
        if on_ready is not None:
            on_ready(bound)

    async with trio.open_nursery() as nursery:
        await nursery.start(lifecycle.watch_signals, nursery.cancel_scope)
        await nursery.start(lifecycle.run_runtime)
        nursery.start_soon(announce_when_ready)
        if access is not None and access.enabled:
            nursery.start_soon(access.write_in_batches)
        await serve_app(
            app,
            Listening.of(settings),
            app.runtime.doors,
            shutdown_trigger=lifecycle.stop.wait,
            plain=partial(serve_whole, app.runtime, ROUTER),
            task_status=_Status(),
        )
        await lifecycle.stop_runtime()
        nursery.cancel_scope.cancel()
    event(log, "stopped", "stopped", forced=lifecycle.forced)
    if app.runtime.fatal is not None:  # the data directory could not be used: say why, exit non-zero
        raise app.runtime.fatal
    return lifecycle.forced
