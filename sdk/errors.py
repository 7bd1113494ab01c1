"""The SDK's exceptions: one base class, one flat level of subclasses, one table.

::

    Exception
     +-- RunstateError            code, status, message, request_id, retry_after_ms
          +-- ConfigError           CONFIG_ERROR (status 0): no API key or space id, a bad argument
          +-- ValidationError       VALIDATION_FAILED, METHOD_NOT_ALLOWED: the same request would be
          |                         refused the same way again
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
          +-- UnavailableError      UNAVAILABLE, REQUEST_TIMEOUT: also an answer without an error
          |    |                    envelope
          |    +-- UnreachableError   no answer at all: the transport failed
          +-- InternalError         INTERNAL: a bug on the server (HTTP 500)
          +-- CursorExpiredError    CURSOR_EXPIRED

Every subclass of `RunstateError` derives directly from it (only `UnreachableError` refines
`UnavailableError`): a `LeaseLostError` is *not* a `ConflictError`, even though both arrive as
HTTP 409. The class depends only on the error code; the `status` attribute is the HTTP status the
server really sent. A code this table does not know is kept on a plain `RunstateError`, never
collapsed into another code.

`ERRORS` is the one table of code -> usual HTTP status -> class. The server has its own table of
the codes it sends (`runstate.server.errors.STATUS`); a test ties the two together, so a code the
server sends always arrives here as the class of its family with the status the server uses.

Errors from the transport itself (a refused connection, a timeout) are retried by the request
layer; once the retries are used up they surface as `UnreachableError`, naming the server's URL,
with the last transport error chained as `__cause__`.

`is_permanent(err)` says whether sending the same request again can ever be answered differently:
a client loop (`consume()`, a settlement inside it) stops or gives up on those instead of retrying.
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = [
    "RunstateError",
    "ConfigError",
    "ValidationError",
    "AuthenticationError",
    "NotFoundError",
    "ConflictError",
    "ScopeCancelledError",
    "LeaseLostError",
    "WaitTimeoutError",
    "RateLimitError",
    "UnavailableError",
    "UnreachableError",
    "InternalError",
    "CursorExpiredError",
    "ErrorKind",
    "ERRORS",
    "STATUS_BY_CODE",
    "map_error",
    "is_permanent",
]


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
    """The client cannot be built or called like this: a missing API key or space id, a bad argument."""

    def __init__(self, message: str) -> None:
        super().__init__("CONFIG_ERROR", 0, message)


class ValidationError(RunstateError):
    """The request itself is wrong (a value out of range, a payload over the limit): sending it
    again gets the same answer. Raised by the client before sending when it can tell, with the
    server's own wording."""


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
    """The server is not serving this now (starting, draining, overloaded), or answered without a
    usable error envelope. Worth trying again later."""


class UnreachableError(UnavailableError):
    """No answer at all: the server at `base_url` could not be reached (refused, timed out).

    The message names the URL; the last transport error is chained as `__cause__`.
    """

    def __init__(self, base_url: str, detail: str) -> None:
        super().__init__(
            "UNAVAILABLE",
            503,
            f"cannot reach the runstate server at {base_url}; is it running? ({detail})",
        )
        self.base_url = base_url


class InternalError(RunstateError):
    """The server failed on a bug of its own (HTTP 500); the request may work again later."""


class CursorExpiredError(RunstateError):
    """An events cursor points before the oldest event still kept."""


class ErrorKind(NamedTuple):
    """One row of `ERRORS`: the HTTP status a code is sent with and the class it is raised as."""

    status: int
    error_class: type[RunstateError]


# The one table. Codes the server here never sends (the hosted service's plan limits) are kept so
# that code written against the official client branches the same way on ours.
ERRORS: dict[str, ErrorKind] = {
    "VALIDATION_FAILED": ErrorKind(400, ValidationError),
    "METHOD_NOT_ALLOWED": ErrorKind(405, ValidationError),
    "UNAUTHENTICATED": ErrorKind(401, AuthenticationError),
    "FORBIDDEN": ErrorKind(403, AuthenticationError),
    "ENTITLEMENT_EXCEEDED": ErrorKind(403, AuthenticationError),
    "SPACE_SUSPENDED": ErrorKind(403, AuthenticationError),
    "NOT_FOUND": ErrorKind(404, NotFoundError),
    "REQUEST_TIMEOUT": ErrorKind(408, UnavailableError),
    "CONFLICT": ErrorKind(409, ConflictError),
    "CLAIM_HELD": ErrorKind(409, ConflictError),
    "IDEMPOTENCY_CONFLICT": ErrorKind(409, ConflictError),
    "DEADLINE_EXCEEDED": ErrorKind(409, ConflictError),
    "CAPACITY_UNAVAILABLE": ErrorKind(409, ConflictError),
    "BACKLOG_FULL": ErrorKind(409, ConflictError),
    "BARRIER_RELEASED": ErrorKind(409, ConflictError),
    "BARRIER_CANCELLED": ErrorKind(409, ConflictError),
    "INSUFFICIENT_BUDGET": ErrorKind(409, ConflictError),
    "SCOPE_CANCELLED": ErrorKind(409, ScopeCancelledError),
    "STALE_CLAIM": ErrorKind(409, LeaseLostError),
    "LEASE_RENEWALS_EXHAUSTED": ErrorKind(409, LeaseLostError),
    "CURSOR_EXPIRED": ErrorKind(410, CursorExpiredError),
    "RATE_LIMITED": ErrorKind(429, RateLimitError),
    "SERVICE_RATE_LIMITED": ErrorKind(429, RateLimitError),
    "ALLOWANCE_EXHAUSTED": ErrorKind(429, RateLimitError),
    "ALLOWANCE_COOLDOWN": ErrorKind(429, RateLimitError),
    "CONCURRENCY_LIMITED": ErrorKind(429, RateLimitError),
    "OPERATIONS_EXHAUSTED": ErrorKind(429, RateLimitError),
    "INTERNAL": ErrorKind(500, InternalError),
    "UNAVAILABLE": ErrorKind(503, UnavailableError),
    # Made on this side, never sent by a server: status 0.
    "WAIT_TIMEOUT": ErrorKind(0, WaitTimeoutError),
}

# The HTTP status each code is sent with. `map_error` uses it only when it is given status 0.
STATUS_BY_CODE: dict[str, int] = {code: kind.status for code, kind in ERRORS.items() if kind.status}

# Families where the same request is answered the same way until someone changes something.
_PERMANENT: tuple[type[RunstateError], ...] = (
    ConfigError,
    ValidationError,
    AuthenticationError,
    NotFoundError,
    CursorExpiredError,
)


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
    kind = ERRORS.get(code)
    cls = RunstateError if kind is None else kind.error_class
    resolved = status or STATUS_BY_CODE.get(code, 503)
    return cls(code, resolved, message, request_id, retry_after_ms)


def is_permanent(error: BaseException) -> bool:
    """True when sending the same request again cannot succeed: a bad argument, a refused key, a
    missing resource, or any other 4xx that is not a timeout, a rate limit or a state conflict.

    If in doubt this says False: a loop that retries a permanent error wastes requests, but one
    that stops on a transient error stops a healthy worker.
    """
    if isinstance(error, _PERMANENT):
        return True
    if type(error) is RunstateError:  # a code this table does not know: judge by the status
        return 400 <= error.status < 500 and error.status not in (408, 409, 429)
    return False
