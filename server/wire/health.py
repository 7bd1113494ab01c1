"""The wire shape of `/healthz`'s answer (`server/views.py`)."""

from __future__ import annotations

from typing import Any

from ..views import HealthView
from .shape import Shape, component

__all__ = ["HEALTH", "COMPONENTS"]

HEALTH = Shape(HealthView)

# The OpenAPI components these shapes make, by name.
COMPONENTS: dict[str, dict[str, Any]] = {"Health": component(HEALTH)}
