"""Capacity: pools (permits and grants), quotas (allowances and waiters), work limits, budgets.

Every mutation runs on the space's capacity actor. Creating a name that exists is 409 CONFLICT
whatever the settings (the official client then lists and compares itself). Lists are complete
and unpaginated, as the client reads them.
"""

from __future__ import annotations

import re
from typing import Any, Callable

from ...actors import capacity_reads as reads
from ...actors import commands as c
from ...actors.kernel_reads import KernelReads
from ...actors.quotas import REFUNDABLE_MAX, REFUND_WINDOW_MS
from ..api import NO_CONTENT, Doc, Reply, command_handler, endpoint, endpoint_and_dot_segments
from ..http import Handler, Request, Router
from ..services import ReadServices

router = Router()

BASE = "/v1/spaces/{space}"
ERRORS = ("400", "404", "409")
QUOTA_ERRORS = ("400", "404", "409", "429")


# A list answers its kind's listing view (`capacity_reads`), written by `wire/`.
def _lister(name: str, read: Callable[[KernelReads, str], list[Any]], listing: Callable[[tuple[Any, ...]], object]) -> Handler:
    async def handler(services: ReadServices, request: Request, space: str) -> tuple[int, object]:
        services.authorize(request, space)
        return 200, listing(tuple(read(services.kernel, space)))

    handler.__name__ = handler.__qualname__ = f"list_{name}"
    return handler


def _reader(read: Callable[[KernelReads, str, str], object], param: str) -> Handler:
    async def handler(services: ReadServices, request: Request, space: str, **params: str) -> tuple[int, object]:
        services.authorize(request, space)
        return 200, read(services.kernel, space, params[param])

    handler.__name__ = handler.__qualname__ = f"read_{read.__name__}"
    return handler


# -- pools -----------------------------------------------------------------------------------------

G = "Pools"
endpoint(router, "GET", BASE + "/permits", Doc("Every permit pool of the space", (Reply(200, "Pools"),), errors=("404",), group=G), _lister("permits", reads.pools, reads.PoolsView))
endpoint(router, "POST", BASE + "/permits", Doc(
    "Create a permit pool (409 CONFLICT if the name exists)", (Reply(201, "Pool", "Created"),), c.CreatePool,
    errors=ERRORS, idempotent=True, group=G, location=("/permits/{}", "id"),
), status=201)
endpoint_and_dot_segments(router, "PUT", BASE + "/permits/by-name/{name}", Doc(
    "Look up the pool of this name ({}), or create or check it (units; 409 CONFLICT when it differs)",
    (Reply(200, "Pool"),), c.EnsurePool, body_required=False, errors=ERRORS, idempotent=True, group=G,
), "name")
endpoint(router, "GET", BASE + "/permits/{permit_id}", Doc(
    "A permit pool, as its row in the listing", (Reply(200, "Pool"),), errors=("404",), group=G,
), _reader(reads.pool, "permit_id"))
endpoint(router, "POST", BASE + "/permits/{permit_id}/acquire", Doc(
    "Take units of a pool under a fenced lease (409 CAPACITY_UNAVAILABLE with Retry-After when too few are free "
    "or anyone is in the pool's line; with waiterId, the units held back for that signaled waiter)",
    (Reply(200, "Grant"),), c.AcquireGrant, errors=ERRORS, idempotent=True, group=G,
))
endpoint(router, "POST", BASE + "/permits/{permit_id}/wait", Doc(
    "Join the pool's FIFO line: SIGNALED when it is this waiter's turn (at once if nothing is ahead and the units are free)",
    (Reply(200, "PoolWaiter"),), c.WaitPool, errors=ERRORS, idempotent=True, group=G,
))
endpoint(router, "GET", BASE + "/permit-waiters/{waiter_id}", Doc(
    "A waiter in a pool's line", (Reply(200, "PoolWaiter"),), errors=("404",), group=G,
), _reader(reads.pool_waiter, "waiter_id"))
endpoint(router, "POST", BASE + "/permit-waiters/{waiter_id}/cancel", Doc(
    "Leave the line (a grant that came first stands)", (Reply(200, "PoolWaiter"),), c.CancelPoolWaiter,
    body_required=False, errors=ERRORS, idempotent=True, group=G,
))
endpoint(router, "POST", BASE + "/grants/{grant_id}/renew", Doc(
    "Renew a grant's lease", (Reply(200, "Grant"),), c.RenewGrant, errors=ERRORS, idempotent=True, group=G,
))
endpoint(router, "POST", BASE + "/grants/{grant_id}/release", Doc(
    "Give a grant's units back", (Reply(200, "Grant"),), c.ReleaseGrant, errors=ERRORS, idempotent=True, group=G,
))

# -- quotas ----------------------------------------------------------------------------------------

G = "Quotas"
endpoint(router, "GET", BASE + "/allowances", Doc("Every allowance of the space", (Reply(200, "Allowances"),), errors=("404",), group=G), _lister("allowances", reads.allowances, reads.AllowancesView))
endpoint(router, "POST", BASE + "/allowances", Doc(
    "Create an allowance: unitsLimit units per fixed window (409 CONFLICT if the name exists)",
    (Reply(201, "Allowance", "Created"),), c.CreateAllowance, errors=ERRORS, idempotent=True, group=G,
), status=201)
endpoint_and_dot_segments(router, "PUT", BASE + "/allowances/by-name/{name}", Doc(
    "Look up the allowance of this name ({}), or create or check it (unitsLimit and windowSeconds; 409 CONFLICT when it differs)",
    (Reply(200, "Allowance"),), c.EnsureAllowance, body_required=False, errors=ERRORS, idempotent=True, group=G,
), "name")
endpoint(router, "GET", BASE + "/allowances/{allowance_id}", Doc("An allowance and its current window", (Reply(200, "Allowance"),), errors=("404",), group=G), _reader(reads.allowance, "allowance_id"))
endpoint(router, "POST", BASE + "/allowances/{allowance_id}/consume", Doc(
    "Consume units in the current window (429 ALLOWANCE_EXHAUSTED or ALLOWANCE_COOLDOWN with Retry-After)",
    (Reply(200, "Consumption"),), c.Consume, errors=QUOTA_ERRORS, idempotent=True, group=G,
))
endpoint(router, "POST", BASE + "/allowances/{allowance_id}/wait", Doc(
    "Register a durable FIFO waiter (GRANTED at once when nothing is ahead and the units are free)",
    (Reply(200, "Waiter"),), c.WaitAllowance, errors=ERRORS, idempotent=True, group=G,
))
endpoint(router, "POST", BASE + "/allowances/{allowance_id}/cooldown", Doc(
    "A back-off reported by the provider: nothing is consumed or granted until it ends",
    (Reply(200, "Cooldown"),), c.Cooldown, errors=ERRORS, idempotent=True, group=G,
))
endpoint(router, "POST", BASE + "/allowances/{allowance_id}/consumptions/{consumption_id}/refund", Doc(
    "Give a recent consumption's units back to its window, once (refunded: the units; 0 when its window has ended or it was "
    f"refunded already; 409 CONFLICT when it is no longer kept: only the newest {REFUNDABLE_MAX} of the last "
    f"{REFUND_WINDOW_MS // 1000} s are)",
    (Reply(200, "Allowance"),), c.RefundConsumption, body_required=False, errors=ERRORS, idempotent=True, group=G,
))
endpoint(router, "GET", BASE + "/allowance-waiters/{waiter_id}", Doc("A waiter", (Reply(200, "Waiter"),), errors=("404",), group=G), _reader(reads.waiter, "waiter_id"))
endpoint(router, "POST", BASE + "/allowance-waiters/{waiter_id}/cancel", Doc(
    "Cancel a waiter still waiting (a grant that came first stands)", (Reply(200, "Waiter"),), c.CancelWaiter,
    body_required=False, errors=ERRORS, idempotent=True, group=G,
))

# -- work limits -----------------------------------------------------------------------------------

G = "Work limits"
endpoint(router, "GET", BASE + "/work-limits", Doc("Every work limit of the space", (Reply(200, "WorkLimits"),), errors=("404",), group=G), _lister("workLimits", reads.work_limits, reads.WorkLimitsView))
endpoint(router, "POST", BASE + "/work-limits", Doc(
    "Create a work limit: submits naming it get 409 BACKLOG_FULL past maxOutstanding tasks not ended",
    (Reply(201, "WorkLimit", "Created"),), c.CreateWorkLimit, errors=ERRORS, idempotent=True, group=G,
), status=201)

# -- budgets ---------------------------------------------------------------------------------------

G = "Budgets"
endpoint(router, "GET", BASE + "/budgets", Doc("Every budget of the space", (Reply(200, "Budgets"),), errors=("404",), group=G), _lister("budgets", reads.budgets, reads.BudgetsView))
endpoint(router, "POST", BASE + "/budgets", Doc(
    "Create a budget (amounts in minor units, as digit strings; 409 CONFLICT if the name exists)",
    (Reply(201, "Budget", "Created"),), c.CreateBudget, errors=ERRORS, idempotent=True, group=G,
    location=("/budgets/{}", "id"),
), status=201)
endpoint_and_dot_segments(router, "PUT", BASE + "/budgets/by-name/{name}", Doc(
    "Look up the budget of this name ({}), or create or check it (limitMinor, currency USD and scale 2 by default; 409 CONFLICT when it differs)",
    (Reply(200, "Budget"),), c.EnsureBudget, body_required=False, errors=ERRORS, idempotent=True, group=G,
), "name")
endpoint(router, "GET", BASE + "/budgets/{budget_id}", Doc("A budget with its active reservations, and those its settleBy released in the last retention_s", (Reply(200, "Budget"),), errors=("404",), group=G), _reader(reads.budget, "budget_id"))
# 0.3.0 names the reservation it charges late only in its idempotency key, `late:<id>`, sent with
# holder `late-charge`: read as `lateOf`, so that the charge is taken in a run that has ended.
_LATE_KEY = re.compile(r"late:(\S+)")
LATE_HOLDER = "late-charge"
_reserve = command_handler(c.Reserve, 201)


async def reserve(services: Any, request: Request, **params: str) -> tuple[int, Any]:
    late = _LATE_KEY.fullmatch(request.headers.get("idempotency-key", ""))
    if late is not None:
        body = request.json().data
        if body.get("holder") == LATE_HOLDER and "lateOf" not in body:
            body["lateOf"] = late.group(1)
    return await _reserve(services, request, **params)


endpoint(router, "POST", BASE + "/budgets/{budget_id}/reserve", Doc(
    "Reserve an amount for an active run (409 INSUFFICIENT_BUDGET when it does not fit); lateOf a reservation its "
    "settleBy released, one minor unit to settle its cost against late, in its run even once ended",
    (Reply(201, "Reservation", "Reserved"),), c.Reserve, errors=ERRORS, idempotent=True, group=G,
), reserve, status=201, batchable=True, settle=False)
endpoint(router, "POST", BASE + "/budgets/{budget_id}/settle", Doc(
    "Charge what was spent (at most what the reservation holds, or with allowOverrun what the budget can still cover; "
    "idempotent per workKey)", (Reply(200, "Reservation"),), c.Settle,
    errors=ERRORS, idempotent=True, group=G,
))
endpoint(router, "POST", BASE + "/budgets/{budget_id}/void", Doc(
    "Give back what the reservation still holds (idempotent per workKey)", (Reply(200, "Reservation"),), c.Void,
    errors=ERRORS, idempotent=True, group=G,
))

# -- admission -------------------------------------------------------------------------------------

endpoint(router, "POST", BASE + "/tasks/admit", Doc(
    "Lease the oldest task delivery whose requirements all fit, taking them with it (a long poll with waitMs)",
    (Reply(200, "Admission", "Admitted"), Reply(204, NO_CONTENT, "Nothing can be admitted (after waiting up to waitMs)")),
    c.Admit, errors=ERRORS, idempotent=True, group="Tasks",
), long_poll=True)
