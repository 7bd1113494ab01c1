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


def claim_server(*, held_for: int = 0, limited_for: int = 0, renew=None, release=None):
    """Answers POST /claims (CLAIM_HELD `held_for` times, CONCURRENCY_LIMITED `limited_for` times first),
    renew with `renew(sent)` (default: renewed) and release with `release(sent)` (default: ok)."""
    tries = {"n": 0}

    def handler(sent):
        if sent.suffix == "/claims":
            tries["n"] += 1
            if tries["n"] <= limited_for:
                return error(429, "CONCURRENCY_LIMITED")
            if tries["n"] <= limited_for + held_for:
                return error(409, "CLAIM_HELD", "held by someone")
            return ok(GRANT)
        if sent.suffix.endswith("/renew"):
            return renew(sent) if renew else ok(RENEWED)
        if sent.suffix.endswith("/release"):
            return release(sent) if release else ok({})
        raise AssertionError(f"unexpected {sent.method} {sent.path}")

    return handler


MAILBOXES = {"mailboxes": [{"id": "mb_1", "name": "research", "mode": "WORK"}]}


class QueueServer:
    """A scripted mailbox: `messages` are handed out in order by recv; settlements are recorded."""

    def __init__(self, messages=(), *, recv_error=None, renew_error=None, hold=True):
        self.messages = list(messages)
        self.scope_state = "ACTIVE"  # what GET /scopes/sc_1 says is its effective state
        self.recv_error = recv_error  # a function (n) -> exchange or None
        self.renew_error = renew_error
        self.hold = hold
        self.recvs = 0

    async def __call__(self, sent):
        if sent.method == "GET" and sent.suffix == "/mailboxes":
            return ok(MAILBOXES)
        if sent.method == "GET" and sent.suffix == "/scopes/sc_1":
            return ok({"id": "sc_1", "storedState": self.scope_state, "effective": self.scope_state})
        if sent.suffix == "/mailboxes/mb_1/recv":
            self.recvs += 1
            if self.recv_error is not None:
                answer = self.recv_error(self.recvs)
                if answer is not None:
                    return answer
            if self.messages:
                n, payload = self.messages.pop(0)
                message = {"id": f"msg_{n}", "scopeId": "sc_1", "payload": payload, "attempt": 1}
                return ok({"message": message, "token": f"t{n}", "leaseExpiresAt": "2030-01-01T00:00:30.000Z"})
            if self.hold and "waitMs" in sent.json:
                await anyio.sleep(sent.json["waitMs"] / 1000)
            return 204, {}, b""
        if sent.suffix.startswith("/messages/"):
            if sent.suffix.endswith("/renew") and self.renew_error is not None:
                return self.renew_error
            return ok({})
        raise AssertionError(f"unexpected {sent.method} {sent.path}")


def settlements(transport):
    return [(s.suffix, s.json) for s in transport.sent if s.suffix.startswith("/messages/") and not s.suffix.endswith("/renew")]


def task_server(states):
    views = iter(states)

    def handler(sent):
        if sent.method == "GET":
            state = next(views)
            return ok({"id": "tk_1", "state": state, "outcome": "report" if state == "SUCCEEDED" else None, "outcomeReason": None})
        return ok({"id": "tk_1", "state": "CANCELLED"})

    return handler
