"""Capacity gauges, read from each space at scrape time: pool units in use, quota units left and
waiters, budget amounts spent and reserved (in minor units, as floats only here: Prometheus has
no integers, and a gauge is for watching, not for accounting)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator, Mapping

from prometheus_client.core import GaugeMetricFamily, Metric

if TYPE_CHECKING:
    from ..actors.space import SpaceState

__all__ = ["capacity_families"]


def capacity_families(spaces: "Mapping[str, SpaceState]", now_ms: int) -> Iterator[Metric]:
    total = GaugeMetricFamily("runstate_pool_units", "Units of each permit pool.", labels=["space", "pool"])
    in_use = GaugeMetricFamily("runstate_pool_units_in_use", "Units of each permit pool held under a lease now.", labels=["space", "pool"])
    remaining = GaugeMetricFamily("runstate_quota_remaining", "Units left in each allowance's current window.", labels=["space", "allowance"])
    waiting = GaugeMetricFamily("runstate_quota_waiters", "Allowance waiters still waiting.", labels=["space", "allowance"])
    spent = GaugeMetricFamily("runstate_budget_spent_minor", "What each budget has settled, in minor units.", labels=["space", "budget"])
    reserved = GaugeMetricFamily("runstate_budget_reserved_minor", "What each budget's active reservations hold, in minor units.", labels=["space", "budget"])
    for space_id, space in spaces.items():
        part = getattr(space, "capacity", None)
        if part is None:
            continue
        for pool in part.pools.all():
            total.add_metric([space_id, pool.name], pool.units_total)
            in_use.add_metric([space_id, pool.name], part.pools.in_use(pool, now_ms))
        for allowance in part.allowances.all():
            remaining.add_metric([space_id, allowance.name], allowance.remaining_at(now_ms))
            waiting.add_metric([space_id, allowance.name], len(allowance.queue))
        for budget in part.budgets.all():
            spent.add_metric([space_id, budget.name], float(budget.spent))
            reserved.add_metric([space_id, budget.name], float(budget.reserved))
    yield from (total, in_use, remaining, waiting, spent, reserved)
