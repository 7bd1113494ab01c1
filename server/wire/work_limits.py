"""The wire shapes of work limits (`actors/work_limits.py`'s views)."""

from __future__ import annotations

from typing import Any

from ...actors.work_limits import WorkLimitFullView, WorkLimitView
from ...actors.capacity_reads import WorkLimitsView
from .shape import Shape, component

__all__ = ["WORK_LIMIT", "WORK_LIMIT_FULL", "COMPONENTS"]

WORK_LIMIT = Shape(WorkLimitView)
# BACKLOG_FULL's details for a work limit.
WORK_LIMIT_FULL = Shape(WorkLimitFullView)

# The OpenAPI components these shapes make, by name.
# Every work limit of a space (`GET /work-limits`).
WORK_LIMITS = Shape(WorkLimitsView)

COMPONENTS: dict[str, dict[str, Any]] = {"WorkLimit": component(WORK_LIMIT), "WorkLimits": component(WORK_LIMITS)}
