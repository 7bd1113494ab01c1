"""The wire shapes of barriers (`actors/barriers.py`'s view)."""

from __future__ import annotations

from typing import Any

from ...actors.barriers import BarrierView
from .shape import Shape, component

__all__ = ["BARRIER", "COMPONENTS"]

BARRIER = Shape(BarrierView)

# The OpenAPI components these shapes make, by name.
COMPONENTS: dict[str, dict[str, Any]] = {"Barrier": component(BARRIER)}
