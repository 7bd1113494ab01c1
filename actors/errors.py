"""The refusals the kernel decides, as stable codes.

A `KernelError` is a normal answer, not a fault: a held claim, a stale token, a cancelled scope.
It carries the wire code of the v1 API and a message a person can act on; the HTTP shell
maps the code to a status. Anything else raised inside a turn is a bug and is reported as one.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "KernelError",
    "VALIDATION_FAILED",
    "UNAUTHENTICATED",
    "NOT_FOUND",
    "CONFLICT",
    "CLAIM_HELD",
    "IDEMPOTENCY_CONFLICT",
    "SCOPE_CANCELLED",
    "DEADLINE_EXCEEDED",
    "STALE_CLAIM",
    "BACKLOG_FULL",
    "UNAVAILABLE",
    "INTERNAL",
    "quote",
    "QUOTE_CHARS_MAX",
]

VALIDATION_FAILED = "VALIDATION_FAILED"
UNAUTHENTICATED = "UNAUTHENTICATED"
NOT_FOUND = "NOT_FOUND"
CONFLICT = "CONFLICT"
CLAIM_HELD = "CLAIM_HELD"
IDEMPOTENCY_CONFLICT = "IDEMPOTENCY_CONFLICT"
SCOPE_CANCELLED = "SCOPE_CANCELLED"
DEADLINE_EXCEEDED = "DEADLINE_EXCEEDED"
STALE_CLAIM = "STALE_CLAIM"
BACKLOG_FULL = "BACKLOG_FULL"
UNAVAILABLE = "UNAVAILABLE"
# Not a protocol code: a bug inside the kernel, answered 500 with the envelope.
INTERNAL = "INTERNAL"

# How much of a refused value a message quotes: enough to recognise it, never the whole of a
# 100 KB id sent back in every refusal (and written to every log line about it).
QUOTE_CHARS_MAX = 100


def quote(value: Any) -> str:
    """`repr(value)` for a message, cut after QUOTE_CHARS_MAX characters with the full length said."""
    text = repr(value)
    if len(text) <= QUOTE_CHARS_MAX:
        return text
    return f"{text[:QUOTE_CHARS_MAX]}... ({len(text)} characters)"


class KernelError(Exception):
    """A decided refusal: `code` is the wire code, `details` extra fields for the error envelope
    (a JSON object, or a typed view that the shell writes as its wire shape declares)."""

    def __init__(
        self,
        code: str,
        message: str,
        *,
        details: Any = None,
        retry_after_s: float | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.details = details
        self.retry_after_s = retry_after_s

    def __repr__(self) -> str:
        return f"KernelError({self.code}, {self.message!r})"
