"""The wire shape of a space's usage (`actors/usage.py`'s view): operations, free operations and
events counted, by name."""

from __future__ import annotations

from typing import Any

from ...actors.usage import UsageView
from .shape import Shape, component

__all__ = ["USAGE", "COMPONENTS"]

USAGE = Shape(UsageView)

# The OpenAPI components these shapes make, by name.
COMPONENTS: dict[str, dict[str, Any]] = {"Usage": component(USAGE)}
