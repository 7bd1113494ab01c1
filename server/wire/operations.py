"""The wire shapes of the operators' views (`actors/coordination_reads.py`): a run's subtree across
primitives (`/ops/runs/{scope_id}`) and what waits in a space (`/ops/waits`); and a batch's
results (`server/views.py`), each operation's answer or refusal.

Every field follows the rule but two times the 0.3.0 client reads by their old names: a worker's
earliest lease end is `earliestLeaseExpiry`, and a waiter's start is `since`.
"""

from __future__ import annotations

from typing import Any

from ...actors.coordination_reads import (
    AllowanceWaitView, ParkedKeyView, ParkedQueueView, ParkedTaskView, ParkedTimersView, ParkedView, PoolWaitView, RunCounts, RunView,
    RunWaiter, RunWorker, WaitsView,
)
from ..views import BatchResultView, BatchView
from . import errors as _errors  # (a refusal's `error` is written by its shape: it comes first)
from .shape import Shape, component

__all__ = ["PARKED", "POOL_WAIT", "ALLOWANCE_WAIT", "RUN_WAITER", "RUN_WORKER", "RUN", "WAITS", "BATCH_RESULT", "BATCH", "COMPONENTS"]

_SINCE = {"since_ms": "since"}

# Parked calls: where they wait, then the holders they are for, only where their commands name them.
_HOLDERS = ("holders",)
PARKED = Shape(ParkedView, present=_HOLDERS)
PARKED_QUEUE = Shape(ParkedQueueView, present=_HOLDERS)
PARKED_TASK = Shape(ParkedTaskView)
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

# A batch's results: each the status, then the answer, or the refusal and its Retry-After, written
# only where the operation has them.
BATCH_RESULT = Shape(BatchResultView, present=("body", "error", "retry_after"))
BATCH = Shape(BatchView)


def _batch() -> dict[str, Any]:
    schema = component(BATCH)
    result = schema["properties"]["results"]["items"]["properties"]
    for name, description in (
        ("status", "the status the route alone would answer"),
        ("body", "the route's answer (absent for a 204 or a refusal)"),
        ("error", "a refusal: the error envelope's `error`"),
        ("retryAfter", "seconds, where the route alone would send Retry-After"),
    ):
        result[name] = {**result[name], "description": description}
    return schema

# The OpenAPI components these shapes make, by name: `Parked` is every entry a space's waits list.
COMPONENTS: dict[str, dict[str, Any]] = {
    "OpsRun": component(RUN),
    "Parked": component(PARKED, PARKED_QUEUE, PARKED_TASK, PARKED_TIMERS, PARKED_KEY, POOL_WAIT, ALLOWANCE_WAIT),
    "OpsWaits": component(WAITS),
    "BatchResults": _batch(),
}
