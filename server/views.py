"""The shell's own typed views: the answers no kernel read makes, the error envelope and the
health probe's answer. Their wire is declared in `wire/` (`errors.py`, `health.py`) like the
kernel's views, so the encoder and the OpenAPI components come from one declaration.

Named tuples: the envelope is made on every refusal, and a named tuple is the cheapest typed
value to make (orjson hands it to the wire's encoder like any view).
"""

from __future__ import annotations

from typing import Literal, NamedTuple

from ..actors.shapes import JsonObject

__all__ = ["ErrorView", "ErrorEnvelopeView", "HealthView"]


class ErrorView(NamedTuple):
    """A refusal: its code (which picks the official client's exception), what happened, the
    request's id, and the facts a caller can act on (`details`: who holds a claim, until when),
    left out of the answer where there are none."""

    code: str
    message: str
    request_id: str
    details: JsonObject | None = None


class ErrorEnvelopeView(NamedTuple):
    """Every answer of 400 and above: `{"error": {...}}`."""

    error: ErrorView


class HealthView(NamedTuple):
    """`/healthz`'s answer: `ok` (ready, takes changes) or `live` (the liveness probe)."""

    status: Literal["ok", "live"]
