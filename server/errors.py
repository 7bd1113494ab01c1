"""The error envelope and the HTTP status of every code (the v1 API's error contract).

Every answer of 400 and above carries `{"error": {"code", "message", "requestId", ...}}`: the
official client picks the exception class from `code` alone, and without an envelope it would
report UNAVAILABLE whatever happened. Extra facts a caller can act on (who holds a claim, until
when) go into `details`. The envelope is a typed view (`views.ErrorEnvelopeView`), written by its
declared shape (`wire/errors.py`), which the OpenAPI document's `Error` is made from too.
"""

from __future__ import annotations

from ..actors.errors import KernelError
from . import wire
from .views import ErrorEnvelopeView, ErrorView

__all__ = ["STATUS", "status_of", "envelope", "ApiError", "recovering"]

STATUS: dict[str, int] = {
    "VALIDATION_FAILED": 400,
    "UNAUTHENTICATED": 401,
    "FORBIDDEN": 403,
    "NOT_FOUND": 404,
    "METHOD_NOT_ALLOWED": 405,
    "REQUEST_TIMEOUT": 408,
    "CONFLICT": 409,
    "CLAIM_HELD": 409,
    "IDEMPOTENCY_CONFLICT": 409,
    "SCOPE_CANCELLED": 409,
    "DEADLINE_EXCEEDED": 409,
    "STALE_CLAIM": 409,
    "CAPACITY_UNAVAILABLE": 409,
    "BACKLOG_FULL": 409,
    # Barriers and the event log.
    "BARRIER_RELEASED": 409,
    "BARRIER_CANCELLED": 409,
    "CURSOR_EXPIRED": 410,
    "HISTORY_NOT_KEPT": 410,
    "RATE_LIMITED": 429,
    # Budgets and quotas.
    "INSUFFICIENT_BUDGET": 409,
    "ALLOWANCE_EXHAUSTED": 429,
    "ALLOWANCE_COOLDOWN": 429,
    "INTERNAL": 500,
    "UNAVAILABLE": 503,
}


def status_of(code: str) -> int:
    return STATUS.get(code, 400)


class ApiError(KernelError):
    """A refusal decided by the shell itself (routing, auth, parsing), same shape as the kernel's."""

    def __init__(self, code: str, message: str, *, status: int | None = None, headers: dict[str, str] | None = None) -> None:
        super().__init__(code, message)
        self.status = status
        self.headers = headers


# What a 401 asks for: an API key or the admin key, sent as a bearer token.
CHALLENGE = 'Bearer realm="runstate"'


def recovering() -> ApiError:
    """The answer (503, try again in a second) to a request that needs the state before it is ready."""
    return ApiError("UNAVAILABLE", "the server is recovering its state; try again shortly", headers={"retry-after": "1"})


def envelope(error: KernelError, request_id: str) -> tuple[int, bytes, dict[str, str]]:
    """(status, body, extra headers) for a refusal. (Details that are empty are left out, as none.)"""
    body = ErrorEnvelopeView(ErrorView(error.code, error.message, request_id, error.details or None))
    headers: dict[str, str] = {}
    if error.retry_after_s is not None:
        headers["retry-after"] = f"{error.retry_after_s:.3f}".rstrip("0").rstrip(".") or "0"
    status = status_of(error.code)
    if isinstance(error, ApiError):
        status = error.status or status
        headers.update(error.headers or {})
    if status == 401:  # a 401 names the scheme that opens the route (RFC 9110 11.6.1, RFC 6750 3)
        headers.setdefault("www-authenticate", CHALLENGE)
    return status, wire.dumps(body), headers
