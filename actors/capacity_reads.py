"""Reads of capacity: the primitives' typed views straight from the state, without a turn (see
`reads.py`); the shell writes them (`server/wire/`)."""

from __future__ import annotations

from typing import NamedTuple

from .budgets import BudgetReservationsView, BudgetView
from .capacity import CapacityCommands
from .pools import PoolView, PoolWaiterView
from .quotas import AllowanceView, AllowanceWaiterView
from .work_limits import WorkLimitView
from .kernel_reads import KernelReads

__all__ = [
    "pools", "pool", "allowances", "allowance", "waiter", "pool_waiter", "pool_waiting", "work_limits", "budgets", "budget",
    "PoolsView", "AllowancesView", "WorkLimitsView", "BudgetsView",
]


# Every entity of one kind in a space, in creation order: complete and unpaginated, as the
# official client reads the list.
class PoolsView(NamedTuple):
    permits: tuple[PoolView, ...]


class AllowancesView(NamedTuple):
    allowances: tuple[AllowanceView, ...]


class WorkLimitsView(NamedTuple):
    work_limits: tuple[WorkLimitView, ...]


class BudgetsView(NamedTuple):
    budgets: tuple[BudgetView, ...]


def _part(kernel: KernelReads, space: str) -> CapacityCommands:
    return kernel.space_view(space).capacity


def pools(kernel: KernelReads, space: str) -> list[PoolView]:
    """Every pool of the space, in creation order (the client reads the list as complete)."""
    part, now_ms = _part(kernel, space), kernel.clock.now_ms()
    return [part.pools.view(pool, now_ms) for pool in part.pools.all()]


def pool(kernel: KernelReads, space: str, pool_id: str) -> PoolView:
    """One pool, as its row in the listing (what its creation's Location reads)."""
    part = _part(kernel, space)
    return part.pools.view(part.pools.get(pool_id), kernel.clock.now_ms())


def allowances(kernel: KernelReads, space: str) -> list[AllowanceView]:
    part, now_ms = _part(kernel, space), kernel.clock.now_ms()
    return [part.allowances.view(allowance, now_ms) for allowance in part.allowances.all()]


def allowance(kernel: KernelReads, space: str, allowance_id: str) -> AllowanceView:
    part = _part(kernel, space)
    return part.allowances.view(part.allowances.get(allowance_id), kernel.clock.now_ms())


def waiter(kernel: KernelReads, space: str, waiter_id: str) -> AllowanceWaiterView:
    part = _part(kernel, space)
    return part.allowances.waiter_view(part.allowances.waiter(waiter_id))


def pool_waiter(kernel: KernelReads, space: str, waiter_id: str) -> PoolWaiterView:
    """A waiter in a pool's line, as 0.3.0's slots() polls it."""
    part = _part(kernel, space)
    return part.pools.waiter_view(part.pools.waiter(waiter_id))


def pool_waiting(kernel: KernelReads, space: str, scope_ids: list[str]) -> list[PoolWaiterView]:
    """Who of these scopes is in a pool's line (WAITING or SIGNALED), in the order they joined."""
    part, scopes = _part(kernel, space), set(scope_ids)
    return [part.pools.waiter_view(w) for w in part.pools.waiters() if w.state in ("WAITING", "SIGNALED") and w.scope_id in scopes]


def work_limits(kernel: KernelReads, space: str) -> list[WorkLimitView]:
    part = _part(kernel, space)
    return [part.work_limits.view(limit) for limit in part.work_limits.all()]


def budgets(kernel: KernelReads, space: str) -> list[BudgetView]:
    part = _part(kernel, space)
    return [part.budgets.view(budget) for budget in part.budgets.all()]


def budget(kernel: KernelReads, space: str, budget_id: str) -> BudgetReservationsView:
    """A budget with its active reservations, and those its settleBy released within `retention_s`
    (0.3.0 reads them to charge a settle that came too late)."""
    part = _part(kernel, space)
    return part.budgets.reservations_view(part.budgets.get(budget_id), kernel.clock.now_ms(), part.limits.retention_s * 1000)
