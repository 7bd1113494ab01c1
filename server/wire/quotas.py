"""The wire shapes of quotas (`actors/quotas.py`'s views)."""

from __future__ import annotations

from typing import Any

from ...actors.quotas import (
    AllowanceExhaustedView, AllowanceMismatchView, AllowanceView, AllowanceWaiterView, ConsumptionView, CooldownView,
    RefundedAllowanceView,
)
from ...actors.capacity_reads import AllowancesView
from .shape import Shape, component

__all__ = [
    "ALLOWANCE", "REFUNDED_ALLOWANCE", "CONSUMPTION", "ALLOWANCE_WAITER", "COOLDOWN", "ALLOWANCE_EXHAUSTED", "ALLOWANCE_MISMATCH", "COMPONENTS",
]

# The clients read a window's bounds and a cooldown's end without the `At` of other instants
# (`windowStart`, `windowEnd`, `cooldownUntil`), and a window's length in whole seconds.
_START = {"window_start_ms": "windowStart"}
_UNTIL = {"cooldown_until_ms": "cooldownUntil"}

ALLOWANCE = Shape(AllowanceView, rename={**_START, "window_end_ms": "windowEnd", **_UNTIL}, seconds={"window_ms": "windowSeconds"})
# A refund answers the allowance with the units it gave back (`refunded`).
REFUNDED_ALLOWANCE = ALLOWANCE.extended(RefundedAllowanceView)
CONSUMPTION = Shape(ConsumptionView, rename=_START)
# A waiter for an allowance's units: its id is written as `waiterId` and again as `id`.
ALLOWANCE_WAITER = Shape(AllowanceWaiterView, rename=_START, also={"id": "waiter_id"})
COOLDOWN = Shape(CooldownView, rename=_UNTIL)
# The details of ALLOWANCE_EXHAUSTED, and of the CONFLICT of an allowance declared otherwise.
ALLOWANCE_EXHAUSTED = Shape(AllowanceExhaustedView, rename=_START)
ALLOWANCE_MISMATCH = Shape(AllowanceMismatchView, seconds={"window_ms": "windowSeconds"})

# Every allowance of a space (`GET /allowances`).
ALLOWANCES = Shape(AllowancesView)

# The OpenAPI components these shapes make, by name.
COMPONENTS: dict[str, dict[str, Any]] = {
    "Allowance": component(ALLOWANCE, REFUNDED_ALLOWANCE),
    "Allowances": component(ALLOWANCES),
    "Consumption": component(CONSUMPTION),
    "Waiter": component(ALLOWANCE_WAITER),
    "Cooldown": component(COOLDOWN),
}
