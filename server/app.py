"""The ASGI application: a QuartTrio app whose HTTP requests go straight to our router.

Quart hosts the application: the ASGI lifespan (which starts the runtime, and with it the kernel,
in the app's nursery) and configuration. HTTP requests do not go through Quart's request
machinery: on this stack it costs about a third of what the HTTP layer alone can serve, while our
routes need none of it (no templates, sessions, cookies or forms, and every answer must be a JSON
envelope, errors included). `ApiConnection` hands each request to `serve_http`, which routes on
the raw path and calls plain handler coroutines. The web console (`/console` and below, and a
browser's `GET /`) is served beside it by `console/site.py`.

`runstate serve` serves it on connections of its own (`listener.py`, `connection.py`), which also
answer the plainest API requests without ASGI. It is a plain ASGI application all the same: any
ASGI server can serve the one `asgi.py` makes from the environment (`hypercorn --worker-class
trio runstate.server.asgi:app`).
"""

from __future__ import annotations

from typing import Any, Callable

from quart_trio import QuartTrio

from ..actors.clock import Clock
from ..snapshots.wal import RunBlocking
from .console.site import Console, for_console
from .http import serve_http
from .lifecycle import Lifecycle
from .routes import ROUTER
from .runtime import NewKeyHandler, Runtime
from .settings import Settings
from .telemetry import Telemetry

__all__ = ["RunstateApp", "create_app"]


class ApiConnection:
    """One ASGI `http` request, answered by the router."""

    __slots__ = ("app", "scope")

    def __init__(self, app: "RunstateApp", scope: dict[str, Any]) -> None:
        self.app = app
        self.scope = scope

    async def __call__(self, receive: Any, send: Any) -> None:
        if for_console(self.scope):
            await self.app.console.serve(self.scope, receive, send)
            return
        await serve_http(self.app.runtime, ROUTER, self.scope, receive, send)


class RunstateApp(QuartTrio):
    asgi_http_class = ApiConnection  # type: ignore[assignment]  # quart types the class by its TypedDict scope; this one reads the plain dict ASGI hands it
    runtime: Runtime
    lifecycle: Lifecycle
    console: Console


def create_app(
    settings: Settings | None = None,
    *,
    clock: Clock | None = None,
    on_new_key: NewKeyHandler | None = None,
    telemetry: Telemetry | None = None,
    on_admin_key: Callable[[str], None] | None = None,
    run_blocking: RunBlocking | None = None,
) -> RunstateApp:
    """The server as an ASGI app; its lifespan starts the kernel and stops it after the drain.
    `run_blocking` says how its data directory's blocking IO runs (`Runtime`)."""
    app = RunstateApp("runstate")
    app.runtime = Runtime(
        settings or Settings(), clock=clock, on_new_key=on_new_key, telemetry=telemetry, on_admin_key=on_admin_key,
        run_blocking=run_blocking,
    )
    app.lifecycle = Lifecycle(app.runtime)
    app.console = Console(app.runtime)

    @app.before_serving
    async def start_runtime() -> None:
        if not app.lifecycle.external:
            await app.nursery.start(app.lifecycle.run_runtime)

    @app.after_serving
    async def stop_runtime() -> None:
        if not app.lifecycle.external:
            await app.lifecycle.stop_runtime()

    return app

