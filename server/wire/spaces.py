"""The wire shapes of the spaces as the admin lists them (`server/views.py`'s `SpacesView`)."""

from __future__ import annotations

from typing import Any

from ..views import SpaceRowView, SpacesView
from .shape import Shape, component

__all__ = ["SPACE_ROW", "SPACES", "COMPONENTS"]

SPACE_ROW = Shape(SpaceRowView)
SPACES = Shape(SpacesView)

# The OpenAPI components these shapes make, by name.
COMPONENTS: dict[str, dict[str, Any]] = {"Spaces": component(SPACES)}
