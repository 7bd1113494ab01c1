"""The wire shapes of barriers (`actors/barriers.py`'s view)."""

from __future__ import annotations

from typing import Any

from ...actors.barriers import BarrierView
from ...actors.coordination_reads import RunBarriersView
from .shape import Shape, component

__all__ = ["RUN_BARRIERS", "BARRIER", "COMPONENTS"]

BARRIER = Shape(BarrierView)
# A run's barriers, newest first (`/scopes/{scope_id}/barriers`).
RUN_BARRIERS = Shape(RunBarriersView)

# The OpenAPI components these shapes make, by name.
COMPONENTS: dict[str, dict[str, Any]] = {"Barrier": component(BARRIER), "RunBarriers": component(RUN_BARRIERS)}
