from __future__ import annotations

import orjson
import pytest

import runstate.testing
from runstate.testing import call_asgi

KEY = "test-key"


class Api:
    """Raw HTTP requests to the in-process app: status, headers and parsed JSON (None for 204)."""

    def __init__(self, rs) -> None:  # type: ignore[no-untyped-def]
        self.rs = rs
        self.app = rs.app

    async def request(self, method: str, path: str, *, json=None, body: bytes | None = None, headers=None, key: str | None = KEY):  # type: ignore[no-untyped-def]
        sent = {} if key is None else {"authorization": f"Bearer {key}"}
        if json is not None:
            body = orjson.dumps(json)
            sent["content-type"] = "application/json"
        sent.update(headers or {})
        status, answer_headers, raw = await call_asgi(self.app, method, path, sent, body)
        return status, answer_headers, (orjson.loads(raw) if raw else None)

    async def post(self, path: str, json=None, **kwargs):  # type: ignore[no-untyped-def]
        return await self.request("POST", "/v1/spaces/default" + path, json=json, **kwargs)

    async def get(self, path: str, **kwargs):  # type: ignore[no-untyped-def]
        return await self.request("GET", "/v1/spaces/default" + path, **kwargs)


@pytest.fixture
async def api():
    async with runstate.testing.serve(api_key=KEY) as rs:
        yield Api(rs)
