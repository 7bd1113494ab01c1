"""Serving the app with hypercorn's trio worker, with signals handled for a graceful shutdown."""

from __future__ import annotations

import logging
from typing import Callable

import trio
from hypercorn.config import Config
from hypercorn.trio import serve as hypercorn_serve

from .app import create_app
from .logs import AccessLog, event
from .runtime import NewKeyHandler
from .settings import Settings
from .telemetry import Telemetry

__all__ = ["serve", "hypercorn_config"]

log = logging.getLogger("runstate.server")


def hypercorn_config(settings: Settings) -> Config:
    config = Config()
    config.bind = [f"{settings.host}:{settings.port}"]
    config.accesslog = None
    config.errorlog = logging.getLogger("hypercorn.error")
    # Keep-alive connections from SDK pools stay open between calls.
    config.keep_alive_timeout = settings.keep_alive_s
    # At shutdown, requests in flight get this long to finish.
    config.graceful_timeout = settings.shutdown_grace_s
    return config


async def serve(
    settings: Settings,
    on_new_key: NewKeyHandler | None = None,
    *,
    on_admin_key: Callable[[str], None] | None = None,
    access: AccessLog | None = None,
    task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED,
) -> bool:
    """Serve until SIGTERM/SIGINT and a graceful shutdown; returns True when a second signal cut it short."""
    app = create_app(settings, on_new_key=on_new_key, telemetry=Telemetry(access=access), on_admin_key=on_admin_key)
    lifecycle = app.lifecycle
    # The runtime lives beside hypercorn, not inside its lifespan, so that the serving can be ended
    # as soon as the drain is done and the runtime still stops in order afterwards.
    lifecycle.external = True

    class _Status:
        def started(self, binds: list[str]) -> None:
            for bind in binds:
                print(f"runstate: serving on {bind}", flush=True)
            event(log, "listening", "listening", binds=binds)
            task_status.started(binds)

    async with trio.open_nursery() as nursery:
        await nursery.start(lifecycle.watch_signals, nursery.cancel_scope)
        await nursery.start(lifecycle.run_runtime)
        with trio.CancelScope() as serving:
            nursery.start_soon(lifecycle.drain, serving)
            await hypercorn_serve(
                app,
                hypercorn_config(settings),
                shutdown_trigger=lifecycle.stop.wait,
                task_status=_Status(),  # type: ignore[arg-type]
            )
        await lifecycle.stop_runtime()
        nursery.cancel_scope.cancel()
    event(log, "stopped", "stopped", forced=lifecycle.forced)
    if app.runtime.fatal is not None:  # the data directory could not be used: say why, exit non-zero
        raise app.runtime.fatal
    return lifecycle.forced
