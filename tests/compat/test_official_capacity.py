"""The official runstate-sdk 0.2.0 client, unchanged, against a real server: pools, quotas, work
limits and budgets, every endpoint of PROTOCOL 2.7-2.10 that the client calls.

One script runs the scenarios concurrently against one server (each in its own run), so the
real-time parts (a 5 s grant kept alive for 7 s, a quota waiter granted at the next 2 s window)
overlap.
"""

from __future__ import annotations

import pytest

from ..servers import run_official

pytestmark = [pytest.mark.compat, pytest.mark.e2e]

SCRIPT = r'''
import asyncio, json, time
from runstate import AsyncRunstate, ConflictError, LeaseLostError, RunstateError, WaitTimeoutError, RateLimitError

results = {}

def client(holder):
    return AsyncRunstate(holder=holder)

def err(e):
    return {"code": e.code, "status": e.status, "type": type(e).__name__}

async def pools():
    a, b = client("pool-a"), client("pool-b")
    created = await a.pools.ensure("browsers", capacity=2)
    again = await b.pools.ensure("browsers", capacity=2)
    try:
        await a.pools.ensure("browsers", capacity=3)
        mismatch = None
    except ConflictError as e:
        mismatch = err(e)
    run = await a.scopes.create(name="pools")
    lease = await a.scope(run.id).pool("browsers").acquire(units=2)
    status = await a.scope(run.id).pool("browsers").status()
    busy = await b.scope(run.id).pool("browsers").try_acquire()
    started = time.monotonic()
    try:
        await b.scope(run.id).pool("browsers").acquire(timeout_ms=1000)
        waited = None
    except WaitTimeoutError as e:
        waited = {"code": e.code, "elapsed": time.monotonic() - started}
    try:
        await b.scope(run.id).pool("browsers").acquire(units=3, wait=False)
        too_many = None
    except RunstateError as e:
        too_many = err(e)
    await lease.renew()
    token, grant_id = lease.token(), lease.grant_id
    await lease.release()
    stale = {}
    for action in ("renew", "release"):
        try:
            await a._ctx.transport.request("POST", f"/v1/spaces/{a.space_id}/grants/{grant_id}/{action}", body={"token": token})
        except LeaseLostError as e:
            stale[action] = e.code
    got = await b.scope(run.id).pool("browsers").try_acquire(units=1)
    await got["lease"].release()

    async def work(held):
        await asyncio.sleep(7)
        return {"lost": held.is_lost, "units": (await a.scope(run.id).pool("browsers").status())["unitsAvailable"]}
    kept = await a.scope(run.id).pool("browsers").run(work, units=1, lease_seconds=5)
    after = await a.scope(run.id).pool("browsers").status()
    results["pools"] = {
        "created": created, "again": again, "mismatch": mismatch, "grant": {"id": lease.grant_id},
        "status": status, "busy": busy, "waited": waited, "too_many": too_many, "stale": stale,
        "second": got["kind"], "kept": kept, "after": after["unitsAvailable"],
    }

async def quotas():
    a = client("quota-a")
    created = await a.quotas.ensure("llm", units_per_window=3, window_seconds=2)
    again = await a.quotas.ensure("llm", units_per_window=3, window_seconds=2)
    try:
        await a.quotas.ensure("llm", units_per_window=4, window_seconds=2)
        mismatch = None
    except ConflictError as e:
        mismatch = err(e)
    run = await a.scopes.create(name="quotas")
    quota = a.scope(run.id).quota("llm")
    first = await quota.try_take(units=3)
    exhausted = await quota.try_take(units=1)
    try:
        await quota.take(units=1, wait=False)
        no_wait = None
    except WaitTimeoutError as e:
        no_wait = e.code
    started = time.monotonic()
    waited = await quota.take(units=2, timeout_ms=10000)
    waited_s = time.monotonic() - started
    status = await quota.status()
    try:
        await a._ctx.transport.request("POST", f"/v1/spaces/{a.space_id}/allowances/{status['id']}/consume", body={"scopeId": run.id, "units": 4, "holder": "x"})
        too_many = None
    except RunstateError as e:
        too_many = err(e)
    # A long window, used up: take() registers a waiter, times out and cancels it.
    await a.quotas.ensure("slow", units_per_window=1, window_seconds=3600)
    slow = a.scope(run.id).quota("slow")
    await slow.take()
    started = time.monotonic()
    try:
        await slow.take(timeout_ms=1000)
        timed_out = None
    except WaitTimeoutError as e:
        timed_out = {"code": e.code, "elapsed": time.monotonic() - started}
    slow_status = await slow.status()
    cooled = await quota.cooldown(30, reason="provider 429")
    try:
        await a._ctx.transport.request("POST", f"/v1/spaces/{a.space_id}/allowances/{status['id']}/consume", body={"scopeId": run.id, "units": 1, "holder": "x"})
        cooling = None
    except RateLimitError as e:
        cooling = {**err(e), "retry_after_ms": e.retry_after_ms}
    cooling_try = await quota.try_take()
    results["quotas"] = {
        "created": created, "again": again, "mismatch": mismatch, "first": first, "exhausted": exhausted,
        "no_wait": no_wait, "waited": waited, "waited_s": waited_s, "status": status, "too_many": too_many,
        "timed_out": timed_out, "slow_waiting": slow_status["waiting"], "cooled": cooled, "cooling": cooling,
        "cooling_try": cooling_try,
    }

async def work_limits():
    a = client("wl-a")
    run = await a.scopes.create(name="work-limits")
    created = await a.work_limits.ensure("crawl", scope_id=run.id, max_outstanding=1)
    again = await a.work_limits.ensure("crawl", scope_id=run.id, max_outstanding=1)
    try:
        await a.work_limits.ensure("crawl", scope_id=run.id, max_outstanding=2)
        mismatch = None
    except ConflictError as e:
        mismatch = err(e)
    await a.mailboxes.ensure("jobs")
    mailbox = a.scope(run.id).mailbox("jobs")
    ticket = await mailbox.submit({"n": 1}, key="a", work_limit="crawl")
    try:
        await mailbox.submit({"n": 2}, key="b", work_limit="crawl")
        full = None
    except ConflictError as e:
        full = err(e)
    await ticket.cancel()
    room = await mailbox.submit({"n": 2}, key="b", work_limit="crawl")
    results["work_limits"] = {"created": created, "again": again, "mismatch": mismatch, "full": full, "room": bool(room.id)}

async def budgets():
    a = client("budget-a")
    created = await a.budgets.ensure("spend", currency="USD", scale=2, limit="25.00")
    again = await a.budgets.ensure("spend", currency="USD", scale=2, limit="25")
    try:
        await a.budgets.ensure("spend", currency="USD", scale=2, limit="30")
        mismatch = None
    except RunstateError as e:
        mismatch = err(e)
    run = await a.scopes.create(name="budgets")
    budget = a.scope(run.id).budget("spend")
    reservation = await budget.reserve(amount="2.50")
    try:
        await budget.reserve(amount="23.00")
        short = None
    except ConflictError as e:
        short = err(e)
    settled = await reservation.settle(amount="1.25", usage_key="call-1")
    repeat = await reservation.settle(amount="1.25", usage_key="call-1")
    voided = await reservation.void(usage_key="call-1-void")
    status = await budget.status()
    results["budgets"] = {
        "created": created, "again": again, "mismatch": mismatch, "reserved": reservation.reserved,
        "reservation_state": reservation.state, "short": short, "settled": settled, "repeat": repeat,
        "voided": voided, "status": status,
    }

async def admission():
    a, w = client("admit-a"), client("admit-worker")
    await a.pools.ensure("adm-gpu", capacity=1)
    await a.quotas.ensure("adm-llm", units_per_window=10, window_seconds=60)
    await a.budgets.ensure("adm-spend", currency="USD", scale=2, limit="5.00")
    await a.mailboxes.ensure("adm-jobs")
    run = await a.scopes.create(name="admission")
    box = a.scope(run.id).mailbox("adm-jobs")
    needs = {"pools": [{"name": "adm-gpu", "units": 1}], "quotas": [{"name": "adm-llm", "units": 2}], "budgets": [{"name": "adm-spend", "reserveMinor": "150"}]}
    first = await box.submit({"n": 1}, key="a", requirements=needs)
    second = await box.submit({"n": 2}, key="b", requirements=needs)
    plain = await w.scope(run.id).mailbox("adm-jobs").receive()
    work = await w.scope(run.id).mailbox("adm-jobs").admit()
    admitted_view = await first.await_admission(timeout_ms=5000)
    pool_during = (await a.scope(run.id).pool("adm-gpu").status())["unitsAvailable"]
    await work.delivery.renew()
    started = time.monotonic()

    async def finish_first():
        await asyncio.sleep(1.5)
        await work.delivery.complete({"payload": "first done"})
    finishing = asyncio.ensure_future(finish_first())
    nxt = await w.scope(run.id).mailbox("adm-jobs").admit(wait_ms=10000)
    woke_after = time.monotonic() - started
    await finishing
    await nxt.delivery.complete()
    empty = await w.scope(run.id).mailbox("adm-jobs").admit()
    results["admission"] = {
        "plain": plain, "task": work.task.id, "first": first.id, "second": second.id, "payload": work.delivery.data,
        "attempt": work.attempt, "resources": work.resources, "admitted_state": admitted_view["state"],
        "pool_during": pool_during, "next_task": nxt.task.id, "woke_after": woke_after,
        "first_result": await first.result(timeout_ms=5000), "empty": empty,
        "pool_after": (await a.scope(run.id).pool("adm-gpu").status())["unitsAvailable"],
        "budget": await a.scope(run.id).budget("adm-spend").status(),
    }

async def main():
    await asyncio.gather(pools(), quotas(), work_limits(), budgets(), admission())
    print(json.dumps(results))

asyncio.run(main())
'''


@pytest.fixture(scope="module")
def outcome(official_client, module_server):
    return run_official(official_client, module_server, SCRIPT)


def test_pools_ensure_creates_once_and_verifies_by_listing(outcome):
    """POST /permits, then 409 CONFLICT and GET /permits for the second ensure; a different capacity is CONFLICT."""
    pools = outcome["pools"]
    assert pools["created"]["unitsTotal"] == 2 and pools["again"]["id"] == pools["created"]["id"]
    assert pools["mismatch"] == {"code": "CONFLICT", "status": 409, "type": "ConflictError"}


def test_a_full_pool_says_capacity_unavailable_and_a_waiting_acquire_times_out(outcome):
    """try_acquire maps CAPACITY_UNAVAILABLE to its kind; acquire(timeout_ms=1000) polls then raises
    WaitTimeoutError; more units than the pool has is a 400, not a wait."""
    pools = outcome["pools"]
    assert pools["status"]["unitsAvailable"] == 0 and pools["busy"] == {"kind": "capacity-unavailable"}
    assert pools["waited"]["code"] == "WAIT_TIMEOUT" and 0.9 <= pools["waited"]["elapsed"] < 3
    assert pools["too_many"] == {"code": "VALIDATION_FAILED", "status": 400, "type": "RunstateError"}


def test_a_released_grant_token_is_stale_and_its_units_are_free(outcome):
    """renew/release of a released grant are STALE_CLAIM (LeaseLostError); the units can be taken again."""
    pools = outcome["pools"]
    assert pools["stale"] == {"renew": "STALE_CLAIM", "release": "STALE_CLAIM"} and pools["second"] == "acquired"


def test_run_renews_a_5s_grant_for_7s_and_releases_it(outcome):
    """PoolRef.run keeps a 5 s lease alive by background renewal, then releases the units."""
    pools = outcome["pools"]
    assert pools["kept"] == {"lost": False, "units": 1} and pools["after"] == 2


def test_quotas_consume_exhaust_and_wait_for_the_next_window(outcome):
    """try_take consumes, then says exhausted; take(wait=False) raises; take() registers a durable
    waiter that the server grants at the next 2 s window, consuming for it."""
    quotas = outcome["quotas"]
    assert quotas["again"]["id"] == quotas["created"]["id"] and quotas["mismatch"]["code"] == "CONFLICT"
    assert quotas["first"]["kind"] == "consumed" and quotas["first"]["consumption"]["remaining"] == 0
    assert quotas["exhausted"] == {"kind": "exhausted"} and quotas["no_wait"] == "WAIT_TIMEOUT"
    waited = quotas["waited"]
    assert waited["consumptionId"].startswith("cs_") and waited["units"] == 2 and waited["remaining"] == 1
    assert quotas["waited_s"] < 4
    assert quotas["too_many"] == {"code": "VALIDATION_FAILED", "status": 400, "type": "RunstateError"}


def test_a_timed_out_take_cancels_its_waiter(outcome):
    """take(timeout_ms=1000) on a used-up hour window raises WaitTimeoutError and cancels its waiter."""
    quotas = outcome["quotas"]
    assert quotas["timed_out"]["code"] == "WAIT_TIMEOUT" and quotas["timed_out"]["elapsed"] < 3
    assert quotas["slow_waiting"] == 0


def test_a_cooldown_is_allowance_cooldown_with_retry_after(outcome):
    """cooldown() answers its end; consume is then 429 ALLOWANCE_COOLDOWN (RateLimitError) with
    Retry-After, and try_take says exhausted."""
    quotas = outcome["quotas"]
    assert quotas["cooled"]["reason"] == "provider 429" and quotas["cooled"]["cooldownUntil"]
    cooling = quotas["cooling"]
    assert cooling["code"] == "ALLOWANCE_COOLDOWN" and cooling["status"] == 429 and cooling["type"] == "RateLimitError"
    assert 25_000 <= cooling["retry_after_ms"] <= 30_000
    assert quotas["cooling_try"] == {"kind": "exhausted"}


def test_work_limits_ensure_and_a_full_limit_is_backlog_full(outcome):
    """work_limits.ensure creates once and verifies; a submit past maxOutstanding is BACKLOG_FULL;
    a cancelled task makes room."""
    limits = outcome["work_limits"]
    assert limits["created"]["maxOutstanding"] == 1 and limits["again"]["id"] == limits["created"]["id"]
    assert limits["mismatch"]["code"] == "CONFLICT"
    assert limits["full"] == {"code": "BACKLOG_FULL", "status": 409, "type": "ConflictError"} and limits["room"]


def test_budgets_reserve_settle_void_in_exact_minor_units(outcome):
    """ensure compares limitMinor as a string; reserve answers reservedMinor as digits; a reservation
    that does not fit is INSUFFICIENT_BUDGET; settle is idempotent per usage key; void gives the rest back."""
    budgets = outcome["budgets"]
    assert budgets["created"]["limitMinor"] == "2500" and budgets["again"]["id"] == budgets["created"]["id"]
    assert budgets["mismatch"] == {"code": "CONFLICT", "status": 409, "type": "RunstateError"}
    assert budgets["reserved"] == "2.50" and budgets["reservation_state"] == "ACTIVE"
    assert budgets["short"] == {"code": "INSUFFICIENT_BUDGET", "status": 409, "type": "ConflictError"}
    assert budgets["settled"]["settledMinor"] == "125" and budgets["settled"]["state"] == "ACTIVE"
    assert budgets["repeat"] == budgets["settled"]
    assert budgets["voided"]["state"] == "VOIDED" and budgets["voided"]["reservedMinor"] == "0"
    status = budgets["status"]
    assert (status["spentMinor"], status["reservedMinor"], status["availableMinor"]) == ("125", "0", "2375")


def test_admit_delivers_a_task_with_its_grants_consumptions_and_reservations(outcome):
    """submit(requirements=) is left alone by receive(); admit() leases it with everything it names;
    the task is RUNNING (await_admission); the grant lives with the delivery and goes when it completes."""
    admission = outcome["admission"]
    assert admission["plain"] is None and admission["task"] == admission["first"]
    assert admission["payload"] == {"n": 1} and admission["attempt"] == 1 and admission["admitted_state"] == "RUNNING"
    resources = admission["resources"]
    assert [g["units"] for g in resources["grants"]] == [1] and [c["units"] for c in resources["consumptions"]] == [2]
    assert len(resources["reservations"]) == 1 and isinstance(resources["reservations"][0], str)
    assert admission["pool_during"] == 0 and admission["pool_after"] == 1
    assert admission["first_result"]["state"] == "SUCCEEDED" and admission["first_result"]["outcome"] == "first done"
    assert admission["budget"]["reservedMinor"] == "300"


def test_a_waiting_admit_is_woken_when_the_grant_frees(outcome):
    """admit(wait_ms=10000) parks while the pool is full and returns the next task right after the
    first delivery completes (about 1.5 s), not at the end of its wait; then nothing is left (None)."""
    admission = outcome["admission"]
    assert admission["next_task"] == admission["second"] and 1.2 <= admission["woke_after"] < 4
    assert admission["empty"] is None
