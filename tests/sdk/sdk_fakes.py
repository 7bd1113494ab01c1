"""Test doubles for the SDK tests: a scripted transport and canned answers.

`Scripted` is a transport whose answers come from a function of the request, so a test states
exactly what the server says and then inspects what the SDK sent (`sent`), including the virtual
time of each request under trio's `MockClock`.
"""

from __future__ import annotations

import inspect
import json
from dataclasses import dataclass, field
from typing import Any, Callable

import anyio
import runstate

API_KEY = "key-1"
SPACE = "sp1"


@dataclass
class Sent:
    method: str
    path: str
    headers: dict
    raw: bytes | None
    timeout_s: float
    at: float = 0.0
    json: Any = field(default=None)

    @property
    def suffix(self) -> str:
        """The path after `/v1/spaces/{space}`."""
        prefix = f"/v1/spaces/{SPACE}"
        return self.path[len(prefix):] if self.path.startswith(prefix) else self.path


def ok(body: Any = None, status: int = 200, headers: dict | None = None):
    return status, headers or {}, b"" if body is None else json.dumps(body).encode()


def error(status: int, code: str | None, message: str = "refused", headers: dict | None = None, request_id: str | None = None):
    envelope: dict = {"message": message}
    if code is not None:
        envelope["code"] = code
    if request_id is not None:
        envelope["requestId"] = request_id
    return status, headers or {}, json.dumps({"error": envelope}).encode()


class Scripted:
    """A transport answering with `handler(sent)`: an exchange tuple, or it raises."""

    def __init__(self, handler: Callable[[Sent], Any]) -> None:
        self.handler = handler
        self.sent: list[Sent] = []

    async def send(self, method, path, headers, body, timeout_s):
        item = Sent(method, path, dict(headers), body, timeout_s, anyio.current_time(), json.loads(body) if body else None)
        self.sent.append(item)
        result = self.handler(item)
        if inspect.isawaitable(result):
            result = await result
        return result

    def to(self, suffix_start: str) -> list[Sent]:
        return [s for s in self.sent if s.suffix.startswith(suffix_start)]


def make_client(handler: Callable[[Sent], Any], **kwargs: Any) -> tuple[runstate.AsyncRunstate, Scripted]:
    transport = Scripted(handler)
    options = {"api_key": API_KEY, "space_id": SPACE, "holder": "h1", "transport": transport, **kwargs}
    return runstate.AsyncRunstate(**options), transport


GRANT = {"token": "tok-1", "generation": 7, "leaseExpiresAt": "2030-01-01T00:00:30.000Z"}
RENEWED = {"leaseExpiresAt": "2030-01-01T00:01:00.000Z"}


