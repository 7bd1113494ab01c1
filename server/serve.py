"""Serving the app with hypercorn's trio worker."""

from __future__ import annotations

import logging

import trio
from hypercorn.config import Config
from hypercorn.trio import serve as hypercorn_serve

from .app import create_app
from .runtime import NewKeyHandler
from .settings import Settings

__all__ = ["serve", "hypercorn_config"]

log = logging.getLogger("runstate.server")


def hypercorn_config(settings: Settings) -> Config:
    config = Config()
    config.bind = [f"{settings.host}:{settings.port}"]
    config.accesslog = None
    config.errorlog = logging.getLogger("hypercorn.error")
    # Keep-alive connections from SDK pools stay open between calls.
    config.keep_alive_timeout = 75
    config.graceful_timeout = 10
    return config


async def serve(settings: Settings, on_new_key: NewKeyHandler | None = None, *, task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED) -> None:
    app = create_app(settings, on_new_key=on_new_key)

    class _Status:
        def started(self, binds: list[str]) -> None:
            for bind in binds:
                print(f"runstate: serving on {bind}", flush=True)
            task_status.started(binds)

    await hypercorn_serve(
        app,
        hypercorn_config(settings),
        shutdown_trigger=app.runtime.stopped.wait,
        task_status=_Status(),  # type: ignore[arg-type]
    )
    if app.runtime.fatal is not None:  # the data directory could not be used: say why, exit non-zero
        raise app.runtime.fatal
