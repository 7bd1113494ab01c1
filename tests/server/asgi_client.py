"""An in-process HTTP client for the server: ASGI `http` scopes straight into `serve_http`.

The runtime (and with it the kernel) runs in the test's nursery, so under `autojump_clock` the
whole server is in virtual time. A request can be made to disconnect while it is held (a client
going away in the middle of a long poll).
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest
import trio
import trio.testing

from runstate.actors import Clock
from runstate.server.http import serve_http
from runstate.server.routes import ROUTER
from runstate.server.runtime import Runtime
from runstate.server.settings import Settings
from runstate.testing import call_asgi
from runstate.transport import TransportError

# 2027-01-15T08:00:00.000Z
T0 = 1_800_000_000_000
API_KEY = "rs_test_key"
SPACE = "default"
_NO_BODY = object()


class Response:
    def __init__(self, status: int, headers: dict[str, str], raw: bytes) -> None:
        self.status = status
        self.headers = headers
        self.raw = raw
        self.json: Any = orjson.loads(raw) if raw else None

    @property
    def code(self) -> str | None:
        """The error code of an error envelope."""
        if isinstance(self.json, dict) and isinstance(self.json.get("error"), dict):
            return self.json["error"].get("code")
        return None

    def __repr__(self) -> str:
        return f"<Response {self.status} {self.raw[:200]!r}>"


class AsgiClient:
    def __init__(self, runtime: Runtime, *, api_key: str = API_KEY, space: str = SPACE) -> None:
        self.runtime = runtime
        self.api_key = api_key
        self.space = space
        self._keys = 0

    def path(self, tail: str) -> str:
        return f"/v1/spaces/{self.space}{tail}"

    async def request(
        self,
        method: str,
        tail: str,
        body: Any = _NO_BODY,
        *,
        raw: bytes | None = None,
        idempotency_key: str | None = None,
        headers: dict[str, str] | None = None,
        disconnect: trio.Event | None = None,
    ) -> Response | None:
        """Send one request; None when `disconnect` was set before the answer came."""
        sent_headers = {"authorization": f"Bearer {self.api_key}"}
        if raw is None:
            raw = b"" if body is _NO_BODY else orjson.dumps(body)
            if body is not _NO_BODY:
                sent_headers["content-type"] = "application/json"
        if method != "GET":
            self._keys += 1
            sent_headers["idempotency-key"] = idempotency_key or f"{self._keys:024x}"
        sent_headers.update(headers or {})
        path = self.path(tail) if tail.startswith("/") and not tail.startswith("/v1") and tail.partition("?")[0] != "/healthz" else tail

        async def app(scope: dict, receive: Any, send: Any) -> None:
            await serve_http(self.runtime, ROUTER, scope, receive, send)

        try:
            status, answer_headers, answer = await call_asgi(
                app, method, path, sent_headers, raw, client=("127.0.0.1", 50000), disconnect=disconnect
            )
        except TransportError:  # no answer: the client went away first
            return None
        return Response(status, answer_headers, answer)

    async def get(self, tail: str) -> Response:
        response = await self.request("GET", tail)
        assert response is not None
        return response

    async def post(self, tail: str, body: Any = _NO_BODY, **options: Any) -> Response:
        response = await self.request("POST", tail, body, **options)
        assert response is not None
        return response

    # -- shorthands -----------------------------------------------------------------------------

    async def run(self) -> str:
        response = await self.post("/scopes", {})
        assert response.status == 201, response
        return response.json["id"]

    async def mailbox(self, name: str = "research", **settings: Any) -> str:
        response = await self.post("/mailboxes", {"name": name, **settings})
        assert response.status == 201, response
        return response.json["id"]

    async def recv(self, mailbox_id: str, scope_id: str, **fields: Any) -> Response:
        body = {"scopeId": scope_id, "holder": "w1", "holderSession": "s1", "leaseSeconds": 30, **fields}
        return await self.post(f"/mailboxes/{mailbox_id}/recv", body)


async def start_runtime(nursery: trio.Nursery, settings: Settings | None = None) -> Runtime:
    runtime = Runtime(settings or Settings(api_key=API_KEY, space_id=SPACE, seed=7), clock=Clock(wall_anchor_ms=T0))
    await nursery.start(runtime.run)
    while not runtime.ready:  # no time passes: the start only waits for its own turns
        await trio.testing.wait_all_tasks_blocked()
    return runtime


@pytest.fixture
async def client(nursery, autojump_clock) -> AsgiClient:
    return AsgiClient(await start_runtime(nursery))
