"""Capacity over HTTP (in process, ASGI): every pool, quota, work-limit and budget route, with the
statuses, error codes, Retry-After headers and row shapes the official client reads."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.trio


async def _run(api) -> str:
    status, _, body = await api.post("/scopes", {"name": "capacity"})
    assert status == 201
    return body["id"]


async def test_pools_over_http(api):
    """Create (201; 409 CONFLICT on the name), list, acquire, 409 CAPACITY_UNAVAILABLE with
    Retry-After, 400 for more than the pool has, renew, release, stale token 409 STALE_CLAIM."""
    run = await _run(api)
    status, _, pool = await api.post("/permits", {"name": "gpu", "units": 2})
    assert status == 201 and pool["unitsTotal"] == 2 and pool["unitsAvailable"] == 2
    status, _, body = await api.post("/permits", {"name": "gpu", "units": 2})
    assert status == 409 and body["error"]["code"] == "CONFLICT"
    status, _, listing = await api.get("/permits")
    assert status == 200 and [row["name"] for row in listing["permits"]] == ["gpu"]
    acquire = {"scopeId": run, "units": 2, "holder": "w", "holderSession": "s", "leaseSeconds": 30}
    status, _, grant = await api.post(f"/permits/{pool['id']}/acquire", acquire)
    assert status == 200 and grant["grantId"].startswith("gr_") and grant["token"] and grant["leaseExpiresAt"].endswith("Z")
    status, headers, body = await api.post(f"/permits/{pool['id']}/acquire", {**acquire, "units": 1})
    assert status == 409 and body["error"]["code"] == "CAPACITY_UNAVAILABLE" and float(headers["retry-after"]) > 0
    status, _, body = await api.post(f"/permits/{pool['id']}/acquire", {**acquire, "units": 3})
    assert status == 400 and body["error"]["code"] == "VALIDATION_FAILED"
    status, _, renewed = await api.post(f"/grants/{grant['grantId']}/renew", {"token": grant["token"], "leaseSeconds": 60})
    assert status == 200 and renewed["leaseSeconds"] == 60
    status, _, released = await api.post(f"/grants/{grant['grantId']}/release", {"token": grant["token"], "observation": None})
    assert status == 200 and released["released"] is True
    status, _, body = await api.post(f"/grants/{grant['grantId']}/renew", {"token": grant["token"]})
    assert status == 409 and body["error"]["code"] == "STALE_CLAIM"
    status, _, body = await api.post("/permits/pm_nope/acquire", acquire)
    assert status == 404 and body["error"]["code"] == "NOT_FOUND"


async def test_quotas_over_http(api):
    """Create, list, read, consume, 429 ALLOWANCE_EXHAUSTED with Retry-After, wait, waiter read and
    cancel (no body), cooldown and 429 ALLOWANCE_COOLDOWN, more than the limit is a 400."""
    run = await _run(api)
    status, _, allowance = await api.post("/allowances", {"name": "llm", "unitsLimit": 2, "windowSeconds": 60})
    assert status == 201 and allowance["unitsLimit"] == 2 and allowance["windowSeconds"] == 60
    status, _, body = await api.post("/allowances", {"name": "llm", "unitsLimit": 2, "windowSeconds": 60})
    assert status == 409 and body["error"]["code"] == "CONFLICT"
    status, _, listing = await api.get("/allowances")
    assert status == 200 and listing["allowances"][0]["id"] == allowance["id"]
    base = f"/allowances/{allowance['id']}"
    status, _, consumed = await api.post(base + "/consume", {"scopeId": run, "units": 2, "holder": "w"})
    assert status == 200 and set(consumed) >= {"consumptionId", "units", "windowStart", "remaining"} and consumed["remaining"] == 0
    status, headers, body = await api.post(base + "/consume", {"scopeId": run, "units": 1, "holder": "w"})
    assert status == 429 and body["error"]["code"] == "ALLOWANCE_EXHAUSTED" and 0 < float(headers["retry-after"]) <= 60
    status, _, body = await api.post(base + "/consume", {"scopeId": run, "units": 3, "holder": "w"})
    assert status == 400
    status, _, waiter = await api.post(base + "/wait", {"scopeId": run, "units": 1, "holder": "w", "ttlSeconds": 30})
    assert status == 200 and waiter["state"] == "WAITING" and waiter["waiterId"].startswith("aw_")
    status, _, seen = await api.get(f"/allowance-waiters/{waiter['waiterId']}")
    assert status == 200 and seen["state"] == "WAITING"
    status, _, cancelled = await api.request("POST", f"/v1/spaces/default/allowance-waiters/{waiter['waiterId']}/cancel")
    assert status == 200 and cancelled["state"] == "CANCELLED"
    status, _, body = await api.post(base + "/wait", {"scopeId": run, "units": 1, "holder": "w", "ttlSeconds": 4})
    assert status == 400, "a waiter's TTL is 5-3600 s"
    status, _, cooled = await api.post(base + "/cooldown", {"seconds": 20, "reason": "provider said so"})
    assert status == 200 and cooled["allowanceId"] == allowance["id"] and cooled["reason"] == "provider said so"
    status, headers, body = await api.post(base + "/consume", {"scopeId": run, "units": 1, "holder": "w"})
    assert status == 429 and body["error"]["code"] == "ALLOWANCE_COOLDOWN" and float(headers["retry-after"]) > 0
    status, _, view = await api.get(base)
    assert status == 200 and view["remaining"] == 0 and view["cooldownUntil"] is not None
    status, _, body = await api.get("/allowance-waiters/aw_nope")
    assert status == 404


async def test_work_limits_over_http(api):
    """Create, list, and a submit past maxOutstanding is 409 BACKLOG_FULL with Retry-After."""
    run = await _run(api)
    _, _, mailbox = await api.post("/mailboxes", {"name": "jobs"})
    status, _, limit = await api.post("/work-limits", {"name": "crawl", "scopeId": run, "maxOutstanding": 1})
    assert status == 201 and limit["maxOutstanding"] == 1
    status, _, body = await api.post("/work-limits", {"name": "crawl", "scopeId": run, "maxOutstanding": 1})
    assert status == 409 and body["error"]["code"] == "CONFLICT"
    status, _, listing = await api.get("/work-limits")
    assert status == 200 and listing["workLimits"][0]["name"] == "crawl"
    task = {"scopeId": run, "mailboxId": mailbox["id"], "workLimit": "crawl"}
    status, _, _ = await api.post("/tasks", {**task, "taskKey": "a"})
    assert status == 201
    status, headers, body = await api.post("/tasks", {**task, "taskKey": "b"})
    assert status == 409 and body["error"]["code"] == "BACKLOG_FULL" and "retry-after" in headers
    plain = {"scopeId": run, "mailboxId": mailbox["id"]}
    status, _, body = await api.post("/tasks", {**plain, "taskKey": "c", "requirements": {"pools": [{"name": "nope", "units": 1}]}})
    assert status == 404 and body["error"]["code"] == "NOT_FOUND"
    for bad in ({"gpus": []}, {"pools": [{"units": 1}]}, {"budgets": [{"name": "b", "reserveMinor": 5}]}, [1]):
        status, _, body = await api.post("/tasks", {**plain, "taskKey": "c", "requirements": bad})
        assert status == 400 and body["error"]["code"] == "VALIDATION_FAILED", bad


async def test_budgets_over_http(api):
    """Create, list, read (with reservations), reserve (201; 409 INSUFFICIENT_BUDGET), settle,
    void; minor amounts are canonical digit strings both ways and anything else is a 400."""
    run = await _run(api)
    status, _, budget = await api.post("/budgets", {"name": "spend", "currency": "USD", "scale": 2, "limitMinor": "1000"})
    assert status == 201 and budget["limitMinor"] == "1000" and budget["scale"] == 2 and budget["availableMinor"] == "1000"
    for bad in (1000, "01000", "-5", "1e3", "10.0", ""):
        status, _, body = await api.post("/budgets", {"name": f"bad{bad}", "currency": "USD", "scale": 2, "limitMinor": bad})
        assert status == 400 and body["error"]["code"] == "VALIDATION_FAILED", bad
    status, _, body = await api.post("/budgets", {"name": "spend", "currency": "USD", "scale": 2, "limitMinor": "1000"})
    assert status == 409
    status, _, listing = await api.get("/budgets")
    assert status == 200 and listing["budgets"][0]["id"] == budget["id"]
    base = f"/budgets/{budget['id']}"
    status, _, reservation = await api.post(base + "/reserve", {"scopeId": run, "holder": "w", "amountMinor": "600"})
    assert status == 201 and reservation["reservedMinor"] == "600" and reservation["state"] == "ACTIVE"
    status, _, body = await api.post(base + "/reserve", {"scopeId": run, "holder": "w", "amountMinor": "401"})
    assert status == 409 and body["error"]["code"] == "INSUFFICIENT_BUDGET"
    rid = reservation["reservationId"]
    status, _, settled = await api.post(base + "/settle", {"reservationId": rid, "amountMinor": "250", "workKey": "u1"})
    assert status == 200 and settled["settledMinor"] == "250" and settled["reservedMinor"] == "350" and settled["state"] == "ACTIVE"
    status, _, voided = await api.post(base + "/void", {"reservationId": rid, "workKey": "u2"})
    assert status == 200 and voided["state"] == "VOIDED"
    status, _, view = await api.get(base)
    assert status == 200 and (view["spentMinor"], view["reservedMinor"], view["availableMinor"]) == ("250", "0", "750")
    assert view["reservations"] == []


async def test_capacity_gauges_follow_the_state():
    """/metrics shows pool units in use, quota units left and waiters, budget spent and reserved."""
    import orjson
    from prometheus_client.parser import text_string_to_metric_families

    import runstate.testing
    from runstate.testing import call_asgi

    async with runstate.testing.serve(api_key="k") as rs:
        headers = {"authorization": "Bearer k", "content-type": "application/json"}

        async def post(path, body):
            status, _, raw = await call_asgi(rs.app, "POST", "/v1/spaces/default" + path, headers, orjson.dumps(body))
            return orjson.loads(raw)

        run = (await post("/scopes", {}))["id"]
        pool = await post("/permits", {"name": "gpu", "units": 4})
        await post(f"/permits/{pool['id']}/acquire", {"scopeId": run, "units": 3, "holder": "h", "holderSession": "s"})
        allowance = await post("/allowances", {"name": "llm", "unitsLimit": 5, "windowSeconds": 60})
        await post(f"/allowances/{allowance['id']}/consume", {"scopeId": run, "units": 2, "holder": "h"})
        budget = await post("/budgets", {"name": "spend", "currency": "USD", "scale": 2, "limitMinor": "900"})
        reservation = await post(f"/budgets/{budget['id']}/reserve", {"scopeId": run, "holder": "h", "amountMinor": "300"})
        await post(f"/budgets/{budget['id']}/settle", {"reservationId": reservation["reservationId"], "amountMinor": "100", "workKey": "k"})
        _, _, body = await call_asgi(rs.app, "GET", "/metrics", {"authorization": "Bearer k"}, None, client=("127.0.0.1", 4000))
    found = {(s.name, tuple(sorted(s.labels.items()))): s.value for f in text_string_to_metric_families(body.decode()) for s in f.samples}
    assert found[("runstate_pool_units_in_use", (("pool", "gpu"), ("space", "default")))] == 3
    assert found[("runstate_pool_units", (("pool", "gpu"), ("space", "default")))] == 4
    assert found[("runstate_quota_remaining", (("allowance", "llm"), ("space", "default")))] == 3
    assert found[("runstate_quota_waiters", (("allowance", "llm"), ("space", "default")))] == 0
    assert found[("runstate_budget_spent_minor", (("budget", "spend"), ("space", "default")))] == 100
    assert found[("runstate_budget_reserved_minor", (("budget", "spend"), ("space", "default")))] == 200
