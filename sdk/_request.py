"""The request layer: one logical API call on top of a transport.

What it does, in the wire contract's words:

- `authorization: Bearer <key>` on every request;
- one `idempotency-key` (24 lowercase hex characters) made per logical call, sent on every request
  that is not a GET and reused unchanged on each transport retry of that call. A new logical call,
  including each pass of a wait loop, gets a new key: the key says "this same call again", never
  "the same intent";
- a JSON body is compact, UTF-8 sent raw, and top-level keys whose value is `None` are left out
  (nested `None`s inside user data stay `null`). `body=None` sends no body at all;
- only transport failures are retried (`retries` times, 25-100 ms apart); an HTTP answer, whatever
  its status, is never retried;
- 204 gives an empty reply; any status below 400 is parsed as JSON (`{}` when it is not JSON);
  400 and above raise the exception for the envelope's code. Without one (an answer made by a
  proxy or a load balancer in front of the server) a 5xx is `UNAVAILABLE`, worth trying again,
  and a 4xx the code its status names (`NOT_FOUND` for a 404, `METHOD_NOT_ALLOWED` for a 405,
  `VALIDATION_FAILED` for one that names none; `REQUEST_TIMEOUT` and `RATE_LIMITED` for 408 and
  429, which alone stay worth trying again), with a message that quotes the status and the
  start of the body;
- `Retry-After` on an error answer becomes `retry_after_ms`, and the envelope's `details` (an
  object) the error's `details`;
- when the retries are used up, `UnreachableError` names the server's URL; a refused key
  (`UNAUTHENTICATED`) says where the key came from, and says so when it is the admin key.
"""

from __future__ import annotations

import json
import math
import os
import random
import secrets
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping
from urllib.parse import urlencode

import anyio
import httpx

from . import _runtime
from .errors import RunstateError, UnreachableError, map_error
from .transport import Transport, TransportError

if TYPE_CHECKING:  # the coalescer sends through this module's requester
    from ._batch import Coalescer

__all__ = ["Requester", "Reply", "new_idempotency_key", "parse_retry_after", "details_of"]

# Back-off between transport retries, in seconds (uniform).
RETRY_BACKOFF_MIN_S = 0.025
RETRY_BACKOFF_MAX_S = 0.100


@dataclass(frozen=True)
class Reply:
    """A successful answer: its status and its JSON body (`None` for a 204)."""

    status: int
    body: Any


def new_idempotency_key() -> str:
    """24 lowercase hex characters (12 random bytes)."""
    return secrets.token_hex(12)


def encode_json(body: Mapping[str, Any]) -> bytes:
    """Compact JSON with top-level `None` values left out."""
    kept = {key: value for key, value in body.items() if value is not None}
    return json.dumps(kept, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode("utf-8")


def parse_retry_after(value: str | None) -> int | None:
    """Seconds (a decimal number, maybe with a fraction) to whole milliseconds; otherwise None."""
    if not value:
        return None
    try:
        seconds = float(value.strip())
    except ValueError:
        return None
    if not math.isfinite(seconds) or seconds < 0:
        return None
    return round(seconds * 1000)


def _parse_json(data: bytes) -> Any:
    if not data:
        return {}
    try:
        return json.loads(data)
    except ValueError:
        return {}


class Requester:
    """Sends logical calls through a transport; shared by every view of one client."""

    def __init__(
        self,
        transport: Transport,
        api_key: str,
        request_timeout_ms: int,
        retries: int,
        *,
        base_url: str = "",
        api_key_source: str = "api_key=",
    ) -> None:
        self.transport = transport
        self.request_timeout_ms = request_timeout_ms
        self.retries = retries
        # What error messages call the server: its URL, or what an in-process transport says it is.
        self.base_url = str(getattr(transport, "base_url", "") or base_url or "the configured server")
        self._api_key = api_key
        self._api_key_source = api_key_source
        self._authorization = f"Bearer {api_key}"
        # Sends the calls that may be batched (`runstate._batch`); None: each goes alone.
        self.coalescer: Coalescer | None = None
        # Where this client's jitter comes from (renewal intervals, retry pauses, wait loops):
        # None, the process's generator; a transport that offers `new_jitter()` (an in-process
        # server's, `runstate.testing`, seeded from the server's seed) gives the client its own,
        # so that the same seed repeats its timing.
        new_jitter = getattr(transport, "new_jitter", None)
        self.rng: random.Random | None = new_jitter() if callable(new_jitter) else None

    async def call(
        self,
        method: str,
        path: str,
        *,
        body: Mapping[str, Any] | None = None,
        query: Mapping[str, Any] | None = None,
        wait_ms: int = 0,
        idempotency_key: str | None = None,
    ) -> Reply:
        """One logical call. `wait_ms` > 0 marks a long poll: the server may hold the request that
        long, so each attempt may take `wait_ms` plus the usual request timeout.

        `idempotency_key` continues a logical call made before: a caller that tries one settlement
        again after an outage passes the key of its first try, so a try that did reach the server
        is answered as it was then, not refused as a second settlement."""
        if query:
            kept = {key: value for key, value in query.items() if value is not None}
            if kept:
                path = f"{path}?{urlencode(kept)}"
        headers = {"authorization": self._authorization}
        if method != "GET":
            headers["idempotency-key"] = idempotency_key or new_idempotency_key()
        content: bytes | None = None
        if body is not None:
            content = encode_json(body)
            headers["content-type"] = "application/json"
        timeout_s = (self.request_timeout_ms + max(wait_ms, 0)) / 1000

        last: BaseException | None = None
        for attempt in range(self.retries + 1):
            if attempt:
                await anyio.sleep(_runtime.uniform(RETRY_BACKOFF_MIN_S, RETRY_BACKOFF_MAX_S, self.rng))
            try:
                status, response_headers, data = await self.transport.send(
                    method, path, headers, content, timeout_s
                )
            except (TransportError, httpx.RequestError) as err:
                last = err
                continue
            try:
                return _reply(status, response_headers, data)
            except RunstateError as refused:
                if refused.code == "UNAUTHENTICATED":
                    refused.message = f"{refused.message} ({self._key_hint()})"
                    refused.args = (refused.message,)
                raise
        attempts = self.retries + 1
        raise UnreachableError(
            self.base_url, f"{method} {path} failed {attempts} time{'s' if attempts > 1 else ''}: {last}"
        ) from last

    def _key_hint(self) -> str:
        """Where the refused key came from, and whether it is the admin key."""
        source = "passed as api_key=" if self._api_key_source == "api_key=" else f"from {self._api_key_source}"
        hint = f"the key {source}, sent to {self.base_url}"
        if self._api_key == os.environ.get("RUNSTATE_ADMIN_KEY"):
            hint += (
                "; it is the admin key (RUNSTATE_ADMIN_KEY), which opens no space: use an API key"
                " (`runstate keys create --space SPACE`)"
            )
        return hint


# The code an answer of 400-499 without an error envelope stands for, by its status (anything else
# in that range: VALIDATION_FAILED). Such an answer comes from something in front of the server (a
# proxy's HTML 404, a load balancer's 405): sending it again gets it again, so it is raised as the
# 4xx family the status names, never as UNAVAILABLE, which loops and renewals would try again. A
# 408 or a 429 says "later" whoever sends it, and stays worth trying again.
_BARE_4XX_CODES = {
    401: "UNAUTHENTICATED", 403: "FORBIDDEN", 404: "NOT_FOUND", 405: "METHOD_NOT_ALLOWED",
    408: "REQUEST_TIMEOUT", 409: "CONFLICT", 410: "NOT_FOUND", 429: "RATE_LIMITED",
}
# How much of a body without an envelope an error's message quotes.
BARE_BODY_QUOTED_CHARS_MAX = 200


def _body_start(data: bytes) -> str:
    """The start of a body, as one line of text, for a message."""
    text = " ".join(data[: BARE_BODY_QUOTED_CHARS_MAX * 4].decode("utf-8", "replace").split())
    if len(text) > BARE_BODY_QUOTED_CHARS_MAX:
        text = text[:BARE_BODY_QUOTED_CHARS_MAX] + "..."
    return repr(text) if text else "an empty body"


def _reply(status: int, headers: Mapping[str, str], data: bytes) -> Reply:
    if status == 204:
        return Reply(204, None)
    parsed = _parse_json(data)
    if status < 400:
        return Reply(status, parsed)
    envelope = parsed.get("error") if isinstance(parsed, dict) else None
    if not isinstance(envelope, dict):
        envelope = {}
    code = envelope.get("code")
    message = envelope.get("message")
    if not code:
        code = _BARE_4XX_CODES.get(status, "VALIDATION_FAILED") if status < 500 else "UNAVAILABLE"
        if not message:
            message = f"HTTP {status} without an error envelope (from a proxy in the way?): {_body_start(data)}"
    raise _error(code, status, message, envelope.get("requestId"), headers, envelope.get("details"))


def _error(
    code: Any, status: int, message: Any, request_id: Any, headers: Mapping[str, str], details: Any = None
) -> RunstateError:
    retry_after = None
    for name, value in headers.items():
        if name.lower() == "retry-after":
            retry_after = parse_retry_after(value)
    return map_error(str(code), status, str(message), request_id, retry_after, details_of(details))


def details_of(value: Any) -> dict[str, Any] | None:
    """An envelope's `details`, when it is the JSON object it should be (anything else is dropped:
    the code and message still say what happened)."""
    return value if isinstance(value, dict) else None
