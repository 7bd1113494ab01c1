"""Arguments checked on this side before anything is sent, in the server's own words.

A value the server would refuse with `VALIDATION_FAILED` raises `ValidationError` here, at the
call that got it, with the message the server would send; a loop such as `consume()` then never
starts instead of asking the server the same wrong question forever.

The ranges are the published limits of the v1 API (`leaseSeconds` 5-600). A server configured
with other limits still has the last word on everything in range; if in doubt, the server's
answer is the one to trust.
"""

from __future__ import annotations

import math
import re
from typing import Any

from .errors import ValidationError

__all__ = [
    "LEASE_SECONDS_MIN",
    "LEASE_SECONDS_MAX",
    "KEY_LEN_MAX",
    "HOLDER_LEN_MAX",
    "REASON_LEN_MAX",
    "check_lease_seconds",
    "check_wait_ms",
    "check_text",
    "check_positive",
    "check_id",
]

# Published, with their documentation, where they bound something: `runstate.claims` (the lease
# and the key), `runstate.client` (the holder), `runstate.mailboxes` (a settlement's reason).
LEASE_SECONDS_MIN = 5
LEASE_SECONDS_MAX = 600
# A claim key, a task key, a work key.
KEY_LEN_MAX = 512
# A holder, a holder session, a subscriber id.
HOLDER_LEN_MAX = 256
# Why a delivery was retried or rejected (a nack's `error`), kept as its task's `outcomeReason`.
REASON_LEN_MAX = 2000


def _refuse(message: str) -> ValidationError:
    return ValidationError("VALIDATION_FAILED", 400, message)


def _integer(field: str, value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise _refuse(f"field {field!r} must be an integer")
    return value


def check_lease_seconds(value: Any, field: str = "leaseSeconds") -> int:
    """A lease length in whole seconds within the published limits."""
    lease_s = _integer(field, value)
    if not LEASE_SECONDS_MIN <= lease_s <= LEASE_SECONDS_MAX:
        raise _refuse(f"{field} must be between {LEASE_SECONDS_MIN} and {LEASE_SECONDS_MAX}, got {lease_s}")
    return lease_s


def check_wait_ms(value: Any, field: str = "waitMs") -> int:
    """A long-poll wait in milliseconds: 0 or more (the server caps long ones)."""
    wait_ms = _integer(field, value)
    if wait_ms < 0:
        raise _refuse(f"{field} must not be negative")
    return wait_ms


def check_text(field: str, value: Any, length_max: int) -> str:
    """A non-empty string of at most `length_max` characters."""
    if not isinstance(value, str):
        raise _refuse(f"field {field!r} must be a string")
    if not value:
        raise _refuse(f"{field} must not be empty")
    if len(value) > length_max:
        raise _refuse(f"{field} is longer than {length_max} characters")
    return value


def check_positive(field: str, value: Any, *, allow_zero: bool = False) -> float:
    """A client-side setting (a poll interval, a timeout) that must be a positive number."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        raise ValueError(f"{field} must be a number, got {value!r}")
    if value < 0 or (value == 0 and not allow_zero):
        raise ValueError(f"{field} must be {'0 or more' if allow_zero else 'more than 0'}, got {value!r}")
    return float(value)


# What an id given to a handle must not hold: the server's ids are letters, digits and _, and a
# handle puts its id in a request's path as it is, where an empty one, `/`, `?`, `#`, `%` or a
# space would name another route (`rs.scope("")` would read the list of scopes).
_NOT_AN_ID = re.compile(r"[\s/?#%\\]")


def check_id(field: str, value: Any) -> str:
    """An id for a handle (`rs.scope(scope_id)`, `run.task(task_id)`...): a non-empty string that
    can stand in a path as it is (the server's ids are letters, digits and _)."""
    if not isinstance(value, str):
        raise _refuse(f"field {field!r} must be a string")
    if not value or value in (".", "..") or _NOT_AN_ID.search(value):
        raise _refuse(f"{field} {value!r} is not an id (the server's ids are letters, digits and _)")
    return value
