"""The wire shapes of the operators' views (`actors/coordination_reads.py`): a run's subtree across
primitives (`/ops/runs/{scope_id}`) and what waits in a space (`/ops/waits`).

Every field follows the rule but two times the 0.3.0 client reads by their old names: a worker's
earliest lease end is `earliestLeaseExpiry`, and a waiter's start is `since`.
"""

from __future__ import annotations

from typing import Any

from ...actors.coordination_reads import (
    AllowanceWaitView, ParkedKeyView, ParkedQueueView, ParkedTimersView, ParkedView, PoolWaitView, RunCounts, RunView, RunWaiter,
    RunWorker, WaitsView,
)
from .shape import Shape, component

__all__ = ["PARKED", "POOL_WAIT", "ALLOWANCE_WAIT", "RUN_WAITER", "RUN_WORKER", "RUN", "WAITS", "COMPONENTS"]

_SINCE = {"since_ms": "since"}

# Parked calls: where they wait, then the holders they are for, only where their commands name them.
_HOLDERS = ("holders",)
PARKED = Shape(ParkedView, present=_HOLDERS)
PARKED_QUEUE = Shape(ParkedQueueView, present=_HOLDERS)
PARKED_TIMERS = Shape(ParkedTimersView, present=_HOLDERS)
PARKED_KEY = Shape(ParkedKeyView, present=_HOLDERS)

# Waiters in pools' lines and allowances' queues.
RUN_WAITER = Shape(RunWaiter, rename=_SINCE)
POOL_WAIT = Shape(PoolWaitView, rename=_SINCE)
ALLOWANCE_WAIT = Shape(AllowanceWaitView, rename=_SINCE)

RUN_WORKER = Shape(RunWorker, rename={"earliest_lease_expiry_ms": "earliestLeaseExpiry"})
RUN_COUNTS = Shape(RunCounts)
RUN = Shape(RunView)
WAITS = Shape(WaitsView)

# The OpenAPI components these shapes make, by name: `Parked` is every entry a space's waits list.
COMPONENTS: dict[str, dict[str, Any]] = {
    "OpsRun": component(RUN),
    "Parked": component(PARKED, PARKED_QUEUE, PARKED_TIMERS, PARKED_KEY, POOL_WAIT, ALLOWANCE_WAIT),
    "OpsWaits": component(WAITS),
}
