"""The wire shapes of budgets (`actors/budgets.py`'s views)."""

from __future__ import annotations

from typing import Any

from ...actors.budgets import (
    ActiveReservationView, BudgetMismatchView, BudgetReservationsView, BudgetView, InsufficientBudgetView, ReservationView,
)
from ...actors.capacity_reads import BudgetsView
from .shape import Shape, component

__all__ = [
    "BUDGET", "BUDGET_RESERVATIONS", "ACTIVE_RESERVATION", "RESERVATION", "INSUFFICIENT_BUDGET", "BUDGET_MISMATCH",
    "COMPONENTS",
]

# Amounts are decimal strings of minor units (`xMinor`), as requests carry them.
BUDGET = Shape(BudgetView)
# A reservation as a budget lists it.
ACTIVE_RESERVATION = Shape(ActiveReservationView)
# A budget read by its id: with its active reservations, and those its settleBy released lately.
BUDGET_RESERVATIONS = BUDGET.extended(BudgetReservationsView)
# A reservation: its end, if nobody settles it, is `settleBy`, the name a reserve's request gives it.
RESERVATION = Shape(ReservationView, rename={"settle_by_ms": "settleBy"})
# The details of INSUFFICIENT_BUDGET, and of the CONFLICT of a budget declared otherwise.
INSUFFICIENT_BUDGET = Shape(InsufficientBudgetView)
BUDGET_MISMATCH = Shape(BudgetMismatchView)

# Every budget of a space (`GET /budgets`), each without its reservations.
BUDGETS = Shape(BudgetsView)

# The OpenAPI components these shapes make, by name.
COMPONENTS: dict[str, dict[str, Any]] = {
    "Budget": component(BUDGET, BUDGET_RESERVATIONS),
    "Budgets": component(BUDGETS),
    "Reservation": component(RESERVATION),
}
