"""The in-process transport of `runstate.testing`, against a tiny ASGI app of our own."""

from __future__ import annotations

import asyncio
import json

import anyio
import pytest
import trio

from runstate.testing import ASGITransport, serve_app
from runstate.transport import TransportError


class EchoApp:
    """Answers every request with what it received; `/hold` waits until cancelled or disconnected."""

    def __init__(self) -> None:
        self.lifespan: list[str] = []
        self.held: list[str] = []

    async def __call__(self, scope, receive, send):
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    scope["state"]["greeting"] = "hello"
                    self.lifespan.append("startup")
                    await send({"type": "lifespan.startup.complete"})
                else:
                    self.lifespan.append("shutdown")
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        request = await receive()
        if scope["path"] == "/boom":
            raise RuntimeError("the app broke")
        if scope["path"] == "/hold":
            try:
                self.held.append((await receive())["type"])
            except BaseException:
                self.held.append("cancelled")
                raise
        echo = {
            "library": _library(),
            "method": scope["method"],
            "path": scope["path"],
            "raw_path": scope["raw_path"].decode(),
            "query_string": scope["query_string"].decode(),
            "headers": [[k.decode(), v.decode()] for k, v in scope["headers"]],
            "client": list(scope["client"]),
            "server": list(scope["server"]),
            "http_version": scope["http_version"],
            "state": scope.get("state", {}),
            "body": request["body"].decode(),
        }
        body = json.dumps(echo).encode()
        await send({"type": "http.response.start", "status": 201, "headers": [(b"content-type", b"application/json"), (b"X-Extra", b"1")]})
        await send({"type": "http.response.body", "body": body[:10], "more_body": True})
        await send({"type": "http.response.body", "body": body[10:]})


def _library():
    import sniffio

    return sniffio.current_async_library()


async def exchange(rs, method, path, body=None, headers=None, timeout_s=5.0):
    status, response_headers, data = await rs.transport.send(method, path, headers or {"Authorization": "Bearer k"}, body, timeout_s)
    return status, response_headers, json.loads(data) if data else None


@pytest.mark.trio
async def test_requests_reach_the_app_as_asgi_http_scopes(autojump_clock):
    """Under trio the app runs in the caller's run and sees a complete HTTP scope: raw and decoded path, query, lower-case headers."""
    app = EchoApp()
    async with serve_app(app) as rs:
        assert app.lifespan == ["startup"]
        status, headers, echo = await exchange(rs, "POST", "/v1/claims/a%2Fb%20c/renew?x=1", b'{"token":"t"}')
    assert app.lifespan == ["startup", "shutdown"]
    assert status == 201 and headers["x-extra"] == "1"
    assert echo["library"] == "trio"
    assert (echo["raw_path"], echo["path"], echo["query_string"]) == ("/v1/claims/a%2Fb%20c/renew", "/v1/claims/a/b c/renew", "x=1")
    assert ["authorization", "Bearer k"] in echo["headers"] and ["content-length", "13"] in echo["headers"]
    assert echo["body"] == '{"token":"t"}' and echo["http_version"] == "1.1"
    assert echo["client"][0] == "127.0.0.1" and echo["state"] == {"greeting": "hello"}


@pytest.mark.trio
async def test_a_slow_answer_times_out_as_a_transport_error(autojump_clock):
    """A request still unanswered after timeout_s is cancelled and reported as TransportError."""
    app = EchoApp()
    async with serve_app(app) as rs:
        start = trio.current_time()
        with pytest.raises(TransportError):
            await exchange(rs, "POST", "/hold", timeout_s=2.0)
        assert trio.current_time() - start == pytest.approx(2.0)
    assert app.held == ["cancelled"]


@pytest.mark.trio
async def test_app_errors_reach_the_caller(autojump_clock):
    """An exception inside the app is raised to the test, not hidden behind a 500."""
    async with serve_app(EchoApp()) as rs:
        with pytest.raises(RuntimeError, match="the app broke"):
            await exchange(rs, "GET", "/boom")


@pytest.mark.trio
async def test_errors_in_the_body_of_serve_are_not_wrapped(autojump_clock):
    """An exception raised inside `async with serve_app(...)` comes out as itself."""
    with pytest.raises(KeyError):
        async with serve_app(EchoApp()):
            raise KeyError("mine")


@pytest.mark.anyio
async def test_under_asyncio_the_app_runs_in_a_trio_guest_run():
    """Under asyncio the app runs as a trio guest on the same loop and thread, and answers the same way."""
    app = EchoApp()
    async with serve_app(app) as rs:
        status, _, echo = await exchange(rs, "GET", "/v1/x?y=2")
    assert status == 201 and echo["library"] == "trio" and echo["query_string"] == "y=2"
    assert app.lifespan == ["startup", "shutdown"]


@pytest.mark.anyio
async def test_under_asyncio_a_cancelled_request_is_cancelled_in_trio():
    """Cancelling a request on the asyncio side cancels it inside the trio guest run."""
    app = EchoApp()
    async with serve_app(app) as rs:
        with anyio.move_on_after(0.05):
            await exchange(rs, "POST", "/hold")
        for _ in range(100):
            if app.held:
                break
            await asyncio.sleep(0.005)
    assert app.held == ["cancelled"]


@pytest.mark.anyio
async def test_the_plain_asgi_transport_works_with_an_asyncio_app():
    """ASGITransport alone calls any app in the caller's loop (here an asyncio one)."""
    transport = ASGITransport(EchoApp())
    status, _, data = await transport.send("GET", "/ping", {}, None, 1.0)
    assert status == 201 and json.loads(data)["library"] == "asyncio"
