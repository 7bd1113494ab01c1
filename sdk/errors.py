"""The SDK's exceptions: one base class, one flat level of subclasses.

::

    Exception
     +-- RunstateError            code, status, message, request_id, retry_after_ms
          +-- ConfigError           CONFIG_ERROR (status 0): no API key or space id
          +-- AuthenticationError   UNAUTHENTICATED, FORBIDDEN, ENTITLEMENT_EXCEEDED, SPACE_SUSPENDED
          +-- NotFoundError         NOT_FOUND (also a name that a lookup did not find)
          +-- ConflictError         CONFLICT, CLAIM_HELD, IDEMPOTENCY_CONFLICT, DEADLINE_EXCEEDED,
          |                         CAPACITY_UNAVAILABLE, BACKLOG_FULL, BARRIER_RELEASED,
          |                         BARRIER_CANCELLED, INSUFFICIENT_BUDGET
          +-- ScopeCancelledError   SCOPE_CANCELLED
          +-- LeaseLostError        STALE_CLAIM, LEASE_RENEWALS_EXHAUSTED
          +-- WaitTimeoutError      WAIT_TIMEOUT (status 0): a wait on this side ran out
          +-- RateLimitError        RATE_LIMITED, SERVICE_RATE_LIMITED, ALLOWANCE_EXHAUSTED,
          |                         ALLOWANCE_COOLDOWN, CONCURRENCY_LIMITED, OPERATIONS_EXHAUSTED
          +-- UnavailableError      UNAVAILABLE: also an answer without an error envelope, and
          |                         transport failures once the retries are used up
          +-- CursorExpiredError    CURSOR_EXPIRED

Every subclass derives directly from `RunstateError`: a `LeaseLostError` is *not* a
`ConflictError`, even though both arrive as HTTP 409. The class depends only on the error code; the
`status` attribute is the HTTP status the server really sent. A code this table does not know is
kept on a plain `RunstateError`, never collapsed into another code.

Errors from the transport itself (a refused connection, a timeout) are retried by the request
layer; once the retries are used up they surface as `UnavailableError`, with the last transport
error chained as `__cause__`.
"""

from __future__ import annotations

__all__ = [
    "RunstateError",
    "ConfigError",
    "AuthenticationError",
    "NotFoundError",
    "ConflictError",
    "ScopeCancelledError",
    "LeaseLostError",
    "WaitTimeoutError",
    "RateLimitError",
    "UnavailableError",
    "CursorExpiredError",
    "map_error",
    "STATUS_BY_CODE",
]

# The HTTP status each code is sent with. `map_error` uses it only when it is given status 0.
STATUS_BY_CODE: dict[str, int] = {
    "VALIDATION_FAILED": 400,
    "UNAUTHENTICATED": 401,
    "FORBIDDEN": 403,
    "ENTITLEMENT_EXCEEDED": 403,
    "SPACE_SUSPENDED": 403,
    "NOT_FOUND": 404,
    "CONFLICT": 409,
    "CLAIM_HELD": 409,
    "IDEMPOTENCY_CONFLICT": 409,
    "SCOPE_CANCELLED": 409,
    "DEADLINE_EXCEEDED": 409,
    "STALE_CLAIM": 409,
    "CAPACITY_UNAVAILABLE": 409,
    "BACKLOG_FULL": 409,
    "BARRIER_RELEASED": 409,
    "BARRIER_CANCELLED": 409,
    "INSUFFICIENT_BUDGET": 409,
    "LEASE_RENEWALS_EXHAUSTED": 409,
    "RATE_LIMITED": 429,
    "SERVICE_RATE_LIMITED": 429,
    "ALLOWANCE_EXHAUSTED": 429,
    "ALLOWANCE_COOLDOWN": 429,
    "CONCURRENCY_LIMITED": 429,
    "OPERATIONS_EXHAUSTED": 429,
    "UNAVAILABLE": 503,
}


class RunstateError(Exception):
    """Base class of every error the SDK raises on purpose.

    `code` is the stable, machine-readable value to branch on; `message` is for people.
    `retry_after_ms` comes from a `Retry-After` header on an error answer; the SDK's own wait
    loops do not act on it, it is there for callers who want to.
    """

    def __init__(
        self,
        code: str,
        status: int,
        message: str,
        request_id: str | None = None,
        retry_after_ms: int | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.status = status
        self.message = message
        self.request_id = request_id
        self.retry_after_ms = retry_after_ms

    def __repr__(self) -> str:
        return f"{type(self).__name__}(code={self.code!r}, status={self.status}, message={self.message!r})"


class ConfigError(RunstateError):
    """The client cannot be built: the API key or the space id is missing."""

    def __init__(self, message: str) -> None:
        super().__init__("CONFIG_ERROR", 0, message)


class AuthenticationError(RunstateError):
    """The API key was refused, or it may not do this."""


class NotFoundError(RunstateError):
    """The space, scope, task or named resource does not exist."""


class ConflictError(RunstateError):
    """The request conflicts with the current state (a held claim, a duplicate name...)."""


class ScopeCancelledError(RunstateError):
    """The scope, or one of its ancestors, is no longer active."""


class LeaseLostError(RunstateError):
    """The lease's token is no longer current: another holder may own the key now."""


class WaitTimeoutError(RunstateError):
    """A wait on the client side (claim, task result) ran out; nothing changed on the server."""


class RateLimitError(RunstateError):
    """Too many requests or too much concurrency for now; see `retry_after_ms`."""


class UnavailableError(RunstateError):
    """The server could not be reached, or answered without a usable error envelope."""


class CursorExpiredError(RunstateError):
    """An events cursor points before the oldest event still kept."""


_CLASS_BY_CODE: dict[str, type[RunstateError]] = {}
for _cls, _codes in (
    (AuthenticationError, ("UNAUTHENTICATED", "FORBIDDEN", "ENTITLEMENT_EXCEEDED", "SPACE_SUSPENDED")),
    (NotFoundError, ("NOT_FOUND",)),
    (
        ConflictError,
        (
            "CONFLICT",
            "CLAIM_HELD",
            "IDEMPOTENCY_CONFLICT",
            "DEADLINE_EXCEEDED",
            "CAPACITY_UNAVAILABLE",
            "BACKLOG_FULL",
            "BARRIER_RELEASED",
            "BARRIER_CANCELLED",
            "INSUFFICIENT_BUDGET",
        ),
    ),
    (ScopeCancelledError, ("SCOPE_CANCELLED",)),
    (LeaseLostError, ("STALE_CLAIM", "LEASE_RENEWALS_EXHAUSTED")),
    (WaitTimeoutError, ("WAIT_TIMEOUT",)),
    (
        RateLimitError,
        (
            "RATE_LIMITED",
            "SERVICE_RATE_LIMITED",
            "ALLOWANCE_EXHAUSTED",
            "ALLOWANCE_COOLDOWN",
            "CONCURRENCY_LIMITED",
            "OPERATIONS_EXHAUSTED",
        ),
    ),
    (UnavailableError, ("UNAVAILABLE",)),
    (CursorExpiredError, ("CURSOR_EXPIRED",)),
):
    for _code in _codes:
        _CLASS_BY_CODE[_code] = _cls
del _cls, _codes, _code


def map_error(
    code: str,
    status: int,
    message: str,
    request_id: str | None = None,
    retry_after_ms: int | None = None,
) -> RunstateError:
    """The exception for an error code; an unknown code gives a plain `RunstateError`.

    `status` is kept as given. Only a status of 0 (an error made on this side, never a server
    answer) is replaced by the code's usual HTTP status, or 503 for an unknown code.
    """
    cls = _CLASS_BY_CODE.get(code, RunstateError)
    resolved = status or STATUS_BY_CODE.get(code, 503)
    return cls(code, resolved, message, request_id, retry_after_ms)
