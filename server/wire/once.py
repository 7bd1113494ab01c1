"""The wire shapes of once keys (`actors/once.py`'s views)."""

from __future__ import annotations

from typing import Any

from ...actors.once import OnceAcquiredView, OnceHeldView, OnceRenewedView, OnceView
from .shape import Shape, component

__all__ = ["ONCE", "ONCE_HELD", "ONCE_ACQUIRED", "ONCE_RENEWED", "COMPONENTS"]

# A lease's end and length keep the names a claim gives them (`leaseExpiresAt`, `leaseSeconds`),
# which the official clients read.
_END = {"expires_ms": "leaseExpiresAt"}
_LENGTH = {"lease_ms": "leaseSeconds"}

ONCE = Shape(OnceView)
ONCE_HELD = Shape(OnceHeldView, rename=_END)
ONCE_ACQUIRED = Shape(OnceAcquiredView, rename=_END, seconds=_LENGTH)
ONCE_RENEWED = Shape(OnceRenewedView, rename=_END, seconds=_LENGTH)

# The OpenAPI components these shapes make, by name: one for every answer about a once key, as
# the clients read them (only `state` is always there).
COMPONENTS: dict[str, dict[str, Any]] = {
    "Once": component(ONCE, ONCE_HELD, ONCE_ACQUIRED, ONCE_RENEWED),
}
