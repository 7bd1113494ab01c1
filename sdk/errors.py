"""The SDK's exceptions: one base class, one flat level of subclasses, one table.

::

    Exception
     +-- RunstateError            code, status, message, request_id, retry_after_ms, details
          +-- ConfigError           CONFIG_ERROR (status 0): no API key or space id, a bad argument
          +-- ValidationError       VALIDATION_FAILED, METHOD_NOT_ALLOWED: the same request would be
          |    |                    refused the same way again
          |    +-- ResultTooLargeError  VALIDATION_FAILED "... exceeds N bytes": a value over the limit
          +-- AuthenticationError   UNAUTHENTICATED, FORBIDDEN, ENTITLEMENT_EXCEEDED, SPACE_SUSPENDED
          |                         (also importable as `AuthError`, 0.3.0's name)
          +-- NotFoundError         NOT_FOUND, HISTORY_NOT_KEPT (also a name that a lookup did not find)
          +-- ConflictError         CONFLICT, CLAIM_HELD, IDEMPOTENCY_CONFLICT, CAPACITY_UNAVAILABLE,
          |    |                    BACKLOG_FULL, BARRIER_RELEASED
          |    +-- BudgetExceededError    INSUFFICIENT_BUDGET
          |    +-- DeadlineExceededError  DEADLINE_EXCEEDED      (also a StoppedError)
          |    +-- BarrierCancelledError  BARRIER_CANCELLED      (also a StoppedError)
          +-- StoppedError          STOPPED (status 0): the run was stopped, finished or ran out
          |    +-- ScopeCancelledError   SCOPE_CANCELLED
          +-- LeaseLostError        STALE_CLAIM, LEASE_RENEWALS_EXHAUSTED, LEASE_LOST (status 0: the
          |                         lease ran out by this process's clock without a renewal)
          +-- WaitTimeoutError      WAIT_TIMEOUT (status 0): a wait on this side ran out; also a
          |                         built-in `TimeoutError` (and importable as `runstate.TimeoutError`)
          +-- RateLimitError        RATE_LIMITED, SERVICE_RATE_LIMITED, ALLOWANCE_EXHAUSTED,
          |                         ALLOWANCE_COOLDOWN, CONCURRENCY_LIMITED, OPERATIONS_EXHAUSTED
          +-- UnavailableError      UNAVAILABLE, REQUEST_TIMEOUT: also a 5xx answer without an
          |    |                    error envelope
          |    +-- UnreachableError   no answer at all: the transport failed
          +-- InternalError         INTERNAL: a bug on the server (HTTP 500)
          +-- CursorExpiredError    CURSOR_EXPIRED
          +-- OnceFailedError       ONCE_FAILED (status 0): a `once` function used up its attempts
          +-- TaskFailedError       TASK_FAILED (status 0): a queue job failed, or a gather fell short

The families are those of the official 0.3.0 client where it has one (`StoppedError`,
`BudgetExceededError`, `ResultTooLargeError`, `OnceFailedError`, `TaskFailedError`, `AuthError`,
`TimeoutError`), refined where ours says more: code written against either catches what it
expects. Apart from the refinements drawn above, every class derives directly from
`RunstateError`: a `LeaseLostError` is *not* a `ConflictError`, even though both arrive as HTTP
409. The class depends only on the error code (and, for `ResultTooLargeError`, the message); the
`status` attribute is the HTTP status the server really sent. A code this table does not know is
kept on a plain `RunstateError`, never collapsed into another code.

`details` holds the facts the server gave beside the message, to act on without another read:
its error envelope's `details`, or `{}` when it gave none (as for the errors made on this side,
but the claim wait below). What they are, by code:

- `CLAIM_HELD`: `holder`, `generation` and `leaseExpiresAt` of the claim that holds the key (a
  `WaitTimeoutError` of `acquire(wait=True)` carries those of the last refusal it waited through);
- `CONFLICT` of a name taken (a pool, quota, budget or work limit of that name exists): its `id`,
  and when it was ensured with other settings, those it has (a pool's `units`, a quota's
  `unitsLimit` and `windowSeconds`, a budget's `limitMinor`, `currency` and `scale`);
- `CAPACITY_UNAVAILABLE`: the pool's `unitsAvailable`, `unitsTotal` and how many are `waiting`;
- `ALLOWANCE_EXHAUSTED`: the quota's `remaining` units, `windowStart` and how many are `waiting`;
- `INSUFFICIENT_BUDGET`: `availableMinor` and `requestedMinor`;
- `BACKLOG_FULL` of a work limit: `outstanding` and `maxOutstanding`;
- `BARRIER_RELEASED`: the barrier's `epoch`.

`ERRORS` is the one table of code -> usual HTTP status -> class. The server has its own table of
the codes it sends (`runstate.server.errors.STATUS`); a test ties the two together, so a code the
server sends always arrives here as the class of its family with the status the server uses.

An error answer without the envelope (made by a proxy or a load balancer in front of the server)
is a 5xx `UnavailableError`, or for a 4xx the class of the code its status names: `NOT_FOUND` for
404, `METHOD_NOT_ALLOWED` for 405, `UNAUTHENTICATED` for 401, `FORBIDDEN` for 403, `CONFLICT` for
409, `REQUEST_TIMEOUT` for 408, `RATE_LIMITED` for 429, `VALIDATION_FAILED` for any other; its
message gives the status and the start of the body.

Errors from the transport itself (a refused connection, a timeout) are retried by the request
layer; once the retries are used up they surface as `UnreachableError`, naming the server's URL,
with the last transport error chained as `__cause__`.

`is_permanent(err)` says whether sending the same request again can ever be answered differently:
a client loop (`consume()`, a settlement inside it) stops or gives up on those instead of retrying.
"""

from __future__ import annotations

import builtins
import re
from typing import Any, Mapping, NamedTuple

__all__ = [
    "RunstateError",
    "ConfigError",
    "ValidationError",
    "ResultTooLargeError",
    "AuthenticationError",
    "AuthError",
    "NotFoundError",
    "ConflictError",
    "BudgetExceededError",
    "DeadlineExceededError",
    "BarrierCancelledError",
    "StoppedError",
    "ScopeCancelledError",
    "LeaseLostError",
    "WaitTimeoutError",
    "TimeoutError",
    "RateLimitError",
    "UnavailableError",
    "UnreachableError",
    "InternalError",
    "CursorExpiredError",
    "OnceFailedError",
    "TaskFailedError",
    "ErrorKind",
    "ERRORS",
    "STATUS_BY_CODE",
    "RETRYABLE_CODES",
    "map_error",
    "is_permanent",
    "is_runstate_error",
]

# Codes that mean "busy right now": the waits of the 0.3.0-style API sit them out by themselves,
# and an error with one of them says so in `retryable`.
RETRYABLE_CODES = frozenset({
    "RATE_LIMITED", "SERVICE_RATE_LIMITED", "CONCURRENCY_LIMITED", "CLAIM_HELD", "CAPACITY_UNAVAILABLE",
    "ALLOWANCE_EXHAUSTED", "ALLOWANCE_COOLDOWN", "BACKLOG_FULL",
})
"""The codes that mean "busy right now": an error with one of them has `retryable` true."""


class RunstateError(Exception):
    """Base class of every error the SDK raises on purpose.

    `code` is the stable, machine-readable value to branch on; `message` is for people;
    `status` is the HTTP status the server sent (0 for an error raised on this side);
    `request_id` is the server's id of the request, to quote in a report.
    `retry_after_ms` comes from a `Retry-After` header on an error answer; the SDK's own wait
    loops do not act on it, it is there for callers who want to.
    `details` is what the server said beside the message (who holds a claim and until when, what
    is left of a pool...: the module docstring lists them by code), `{}` when it said nothing more.
    """

    def __init__(
        self,
        code: str,
        status: int,
        message: str,
        request_id: str | None = None,
        retry_after_ms: int | None = None,
        details: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.status = status
        self.message = message
        self.request_id = request_id
        self.retry_after_ms = retry_after_ms
        self.details: dict[str, Any] = dict(details) if details else {}

    def __repr__(self) -> str:
        return f"{type(self).__name__}(code={self.code!r}, status={self.status}, message={self.message!r})"

    def __str__(self) -> str:
        return self.message

    @property
    def retry_after(self) -> float | None:
        """`retry_after_ms` in seconds (0.3.0's name), or None."""
        return None if self.retry_after_ms is None else self.retry_after_ms / 1000

    @property
    def retryable(self) -> bool:
        """True for contention that passes by itself (a held key, a full pool, a rate limit)."""
        return self.code in RETRYABLE_CODES


class ConfigError(RunstateError):
    """The client cannot be built or called like this: a missing API key or space id, a bad argument."""

    def __init__(self, message: str) -> None:
        super().__init__("CONFIG_ERROR", 0, message)


class ValidationError(RunstateError):
    """The request itself is wrong (a value out of range, a payload over the limit): sending it
    again gets the same answer. Raised by the client before sending when it can tell, with the
    server's own wording."""


class ResultTooLargeError(ValidationError):
    """An input, payload or result over its size limit (the server's message says "exceeds N
    bytes"); also raised on this side before sending a result that is too large."""


class AuthenticationError(RunstateError):
    """The API key was refused, or it may not do this."""


class NotFoundError(RunstateError):
    """The space, scope, task or named resource does not exist."""


class ConflictError(RunstateError):
    """The request conflicts with the current state (a held claim, a duplicate name...)."""


class BudgetExceededError(ConflictError):
    """A reservation does not fit in what is left of the budget (INSUFFICIENT_BUDGET)."""


class StoppedError(RunstateError):
    """The run was stopped, finished, or passed its deadline, so the call cannot go on.

    Made by the server as `ScopeCancelledError` and the two conflicts below; made on this side
    (code `STOPPED`, status 0) by the run-bound API once it has seen its run end. It takes either
    the base arguments or just a message: `StoppedError("the run has stopped")`.
    """

    def __init__(
        self,
        code: str = "the run has stopped",
        status: int | None = None,
        message: str | None = None,
        request_id: str | None = None,
        retry_after_ms: int | None = None,
        details: Mapping[str, Any] | None = None,
    ) -> None:
        if status is None and message is None:  # StoppedError("why"), as the 0.3.0 client makes it
            code, status, message = "STOPPED", 0, code
        super().__init__(code, status or 0, message or "", request_id, retry_after_ms, details)


class ScopeCancelledError(StoppedError):
    """The scope, or one of its ancestors, is no longer active."""


class DeadlineExceededError(ConflictError, StoppedError):
    """A deadline has already passed (DEADLINE_EXCEEDED): a conflict, and for run-bound code a stop."""


class BarrierCancelledError(ConflictError, StoppedError):
    """The barrier's scope ended while it waited (BARRIER_CANCELLED)."""


class LeaseLostError(RunstateError):
    """The lease's token is no longer current: another holder may own the key now."""


class WaitTimeoutError(RunstateError, builtins.TimeoutError):
    """A wait on the client side (claim, task result) ran out; nothing changed on the server.

    It is also a built-in `TimeoutError`, and `runstate.TimeoutError` is this class (0.3.0's name).
    """

    def __init__(
        self,
        code: str,
        status: int = 0,
        message: str = "",
        request_id: str | None = None,
        retry_after_ms: int | None = None,
        details: Mapping[str, Any] | None = None,
    ) -> None:
        if not message:  # WaitTimeoutError("why"), as the 0.3.0 client makes its TimeoutError
            code, message = "WAIT_TIMEOUT", code
        RunstateError.__init__(self, code, status, message, request_id, retry_after_ms, details)
        self.args = (message,)


# 0.3.0's name for it. Imported by name it shadows the built-in, as 0.3.0's does; it is a subclass.
TimeoutError = WaitTimeoutError


class RateLimitError(RunstateError):
    """Too many requests or too much concurrency for now; see `retry_after_ms`."""


class UnavailableError(RunstateError):
    """The server is not serving this now (starting, draining, overloaded), or a 5xx came without a
    usable error envelope (a proxy's 502, 503 or 504). Worth trying again later. A 4xx without an
    envelope is raised as the family its status names (`NotFoundError` for a 404...), not as this."""


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


class OnceFailedError(RunstateError):
    """A `once` function failed as many times as it was allowed to; `attempts` says how many.
    Every later call with the same arguments in the run raises it too, without running."""

    def __init__(self, message: str, attempts: int) -> None:
        super().__init__("ONCE_FAILED", 0, message)
        self.attempts = attempts


class TaskFailedError(RunstateError):
    """A queue job ended without a result (its handler failed on every attempt, it was cancelled
    or expired), or a gather can no longer get the results it needs. `reason` is the task's own
    reason (`handler_error: ...`, `cancelled`, ...); `job_id` the task's id when there is one."""

    def __init__(self, message: str, *, job_id: str | None = None, reason: str | None = None) -> None:
        super().__init__("TASK_FAILED", 0, message)
        self.job_id = job_id
        self.reason = message if reason is None else reason


# 0.3.0's name for the authentication family.
AuthError = AuthenticationError


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
    # A past point older than the history the server keeps (its `details` say the oldest kept).
    "HISTORY_NOT_KEPT": ErrorKind(410, NotFoundError),
    "REQUEST_TIMEOUT": ErrorKind(408, UnavailableError),
    "CONFLICT": ErrorKind(409, ConflictError),
    "CLAIM_HELD": ErrorKind(409, ConflictError),
    "IDEMPOTENCY_CONFLICT": ErrorKind(409, ConflictError),
    "DEADLINE_EXCEEDED": ErrorKind(409, DeadlineExceededError),
    "CAPACITY_UNAVAILABLE": ErrorKind(409, ConflictError),
    "BACKLOG_FULL": ErrorKind(409, ConflictError),
    "BARRIER_RELEASED": ErrorKind(409, ConflictError),
    "BARRIER_CANCELLED": ErrorKind(409, BarrierCancelledError),
    "INSUFFICIENT_BUDGET": ErrorKind(409, BudgetExceededError),
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
"""The one table of error code -> usual HTTP status -> class (see the module docstring)."""

# A size refusal: the server's VALIDATION_FAILED message names the limit ("exceeds 65536 bytes").
_TOO_LARGE = re.compile(r"exceeds \d+ bytes")

# The HTTP status each code is sent with. `map_error` uses it only when it is given status 0.
STATUS_BY_CODE: dict[str, int] = {code: kind.status for code, kind in ERRORS.items() if kind.status}
"""Each code's usual HTTP status, from `ERRORS`."""

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
    details: Mapping[str, Any] | None = None,
) -> RunstateError:
    """The exception for an error code; an unknown code gives a plain `RunstateError`.

    `status` is kept as given. Only a status of 0 (an error made on this side, never a server
    answer) is replaced by the code's usual HTTP status, or 503 for an unknown code. `details`
    (the envelope's, a JSON object) becomes the error's `details`.
    """
    kind = ERRORS.get(code)
    cls = RunstateError if kind is None else kind.error_class
    if cls is ValidationError and _TOO_LARGE.search(message):
        cls = ResultTooLargeError
    resolved = status or STATUS_BY_CODE.get(code, 503)
    return cls(code, resolved, message, request_id, retry_after_ms, details)


def is_runstate_error(error: object) -> bool:
    """True for any error the SDK raises on purpose (0.3.0 has this helper too)."""
    return isinstance(error, RunstateError)


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
