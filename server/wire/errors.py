"""The wire shape of the error envelope (`server/views.py`): every answer of 400 and above.

`details` is written only where a refusal has some, as the object it is (a typed view in it, such
as CLAIM_HELD's `ClaimHeldView`, by its own shape).
"""

from __future__ import annotations

from typing import Any

from ..views import ErrorEnvelopeView, ErrorView
from .shape import Shape, component

__all__ = ["ERROR", "ERROR_ENVELOPE", "COMPONENTS"]

ERROR = Shape(ErrorView, present=("details",))
ERROR_ENVELOPE = Shape(ErrorEnvelopeView)

# The OpenAPI components these shapes make, by name.
COMPONENTS: dict[str, dict[str, Any]] = {"Error": component(ERROR_ENVELOPE)}
