"""Capacity over HTTP (in process, ASGI): every pool, quota, work-limit and budget route, with the
statuses, error codes, Retry-After headers and row shapes the official client reads."""

from __future__ import annotations

import pytest
import trio

pytestmark = pytest.mark.trio


async def _put(api, tail: str, json: dict):  # type: ignore[no-untyped-def]
    return await api.request("PUT", "/v1/spaces/default" + tail, json=json)


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


async def test_a_refund_over_http(api):
    """A consumption given back (no body, or `{}`): the allowance with `refunded`, its units free
    again; again, 200 with 0; an id no longer kept is 409 CONFLICT, an unknown allowance 404; a
    retry with the Idempotency-Key answers the same."""
    run = await _run(api)
    status, _, allowance = await api.post("/allowances", {"name": "llm", "unitsLimit": 2, "windowSeconds": 60})
    base = f"/allowances/{allowance['id']}"
    status, _, consumed = await api.post(base + "/consume", {"scopeId": run, "units": 2, "holder": "w"})
    refund = f"/v1/spaces/default{base}/consumptions/{consumed['consumptionId']}/refund"
    status, _, refunded = await api.request("POST", refund, headers={"idempotency-key": "r1"})
    assert status == 200 and refunded["refunded"] == 2 and refunded["remaining"] == 2 and refunded["id"] == allowance["id"]
    status, _, again = await api.request("POST", refund, json={})
    assert status == 200 and again["refunded"] == 0 and again["remaining"] == 2
    status, _, retried = await api.request("POST", refund, headers={"idempotency-key": "r1"})
    assert status == 200 and retried == refunded
    status, _, body = await api.request("POST", f"/v1/spaces/default{base}/consumptions/cs_nope/refund")
    assert status == 409 and body["error"]["code"] == "CONFLICT" and "can no longer be given back" in body["error"]["message"]
    status, _, body = await api.request("POST", f"/v1/spaces/default/allowances/al_nope/consumptions/{consumed['consumptionId']}/refund")
    assert status == 404 and body["error"]["code"] == "NOT_FOUND"
    status, _, body = await api.request("POST", refund, json={"units": 1})
    assert status == 400 and body["error"]["code"] == "VALIDATION_FAILED"


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


async def test_by_name_over_http(api):
    """0.3.0's `PUT .../by-name/{name}` for pools, allowances and budgets: `{}` looks up (404 when
    missing), a body creates (200) or checks (409 CONFLICT on a difference); names are percent-decoded."""
    for kind, sizes, other in (
        ("permits", {"units": 2}, {"units": 3}),
        ("allowances", {"unitsLimit": 3, "windowSeconds": 1}, {"unitsLimit": 3, "windowSeconds": 60}),
        ("budgets", {"limitMinor": "500", "currency": "USD", "scale": 2}, {"limitMinor": "500", "currency": "EUR", "scale": 2}),
    ):
        status, _, body = await _put(api, f"/{kind}/by-name/web%20search", {})
        assert status == 404 and body["error"]["code"] == "NOT_FOUND", kind
        status, _, made = await _put(api, f"/{kind}/by-name/web%20search", sizes)
        assert status == 200 and made["name"] == "web search" and made["id"], kind
        status, _, found = await _put(api, f"/{kind}/by-name/web%20search", {})
        assert status == 200 and found["id"] == made["id"], kind
        status, _, same = await _put(api, f"/{kind}/by-name/web%20search", sizes)
        assert status == 200 and same["id"] == made["id"], kind
        status, _, body = await _put(api, f"/{kind}/by-name/web%20search", other)
        assert status == 409 and body["error"]["code"] == "CONFLICT", kind
    status, _, body = await _put(api, "/allowances/by-name/half", {"unitsLimit": 3})
    assert status == 400 and body["error"]["code"] == "VALIDATION_FAILED"
    status, _, found = await _put(api, "/budgets/by-name/web%20search", {})
    assert (found["scale"], found["limitMinor"], found["currency"]) == (2, "500", "USD")


async def test_a_pools_line_over_http(api):
    """0.3.0's slots(): a failed acquire, wait (no TTL sent), the waiter's read (WAITING, then
    SIGNALED once the units are back), acquire with waiterId, cancel with `{}`; a plain acquire
    while anyone waits is 409 CAPACITY_UNAVAILABLE with Retry-After."""
    run = await _run(api)
    status, _, pool = await _put(api, "/permits/by-name/browser", {"units": 1})
    acquire = {"scopeId": run, "units": 1, "holder": "w", "holderSession": "s", "leaseSeconds": 30}
    status, _, held = await api.post(f"/permits/{pool['id']}/acquire", acquire)
    assert status == 200
    status, _, waiter = await api.post(f"/permits/{pool['id']}/wait", {"scopeId": run, "units": 1, "holder": "w"})
    assert status == 200 and waiter["state"] == "WAITING" and waiter["waiterId"].startswith("pw_")
    status, _, second = await api.post(f"/permits/{pool['id']}/wait", {"scopeId": run, "units": 1, "holder": "x"})
    status, _, seen = await api.get(f"/permit-waiters/{waiter['waiterId']}")
    assert status == 200 and (seen["state"], seen["position"]) == ("WAITING", 1)
    status, _, body = await api.post(f"/permits/{pool['id']}/acquire", {**acquire, "waiterId": waiter["waiterId"]})
    assert status == 409 and body["error"]["code"] == "CAPACITY_UNAVAILABLE"
    status, _, _ = await api.post(f"/grants/{held['grantId']}/release", {"token": held["token"]})
    status, _, seen = await api.get(f"/permit-waiters/{waiter['waiterId']}")
    assert seen["state"] == "SIGNALED" and seen["turnEndsAt"]
    status, headers, body = await api.post(f"/permits/{pool['id']}/acquire", acquire)
    assert status == 409 and body["error"]["code"] == "CAPACITY_UNAVAILABLE" and 0 < float(headers["retry-after"]) <= 10
    status, _, grant = await api.post(f"/permits/{pool['id']}/acquire", {**acquire, "waiterId": waiter["waiterId"]})
    assert status == 200 and grant["grantId"] and grant["token"]
    status, _, cancelled = await api.post(f"/permit-waiters/{second['waiterId']}/cancel", {})
    assert status == 200 and cancelled["state"] == "CANCELLED"
    status, _, body = await api.get("/permit-waiters/pw_nope")
    assert status == 404 and body["error"]["code"] == "NOT_FOUND"


async def test_what_0_3_0_reads_from_budgets_and_admissions(api):
    """Settle with allowOverrun answers `state`; the budget view lists `reservations[]` with id and
    scopeId; admit with includeDescendants answers `taskKey` and reservation ids as strings."""
    run = await _run(api)
    status, _, child = await api.post("/scopes", {"parentId": run})
    status, _, budget = await _put(api, "/budgets/by-name/spend", {"limitMinor": "100", "currency": "USD", "scale": 2})
    status, _, box = await _put(api, "/mailboxes/by-name/jobs", {})
    status, _, task = await api.post("/tasks", {
        "scopeId": child["id"], "mailboxId": box["id"], "taskKey": "t1", "input": 1,
        "requirements": {"budgets": [{"name": "spend", "reserveMinor": "30"}]},
    })
    assert status in (200, 201), task
    admit = {"scopeId": run, "mailboxId": box["id"], "holder": "w", "holderSession": "s", "leaseSeconds": 30}
    status, _, _ = await api.post("/tasks/admit", admit)
    assert status == 204, "without includeDescendants only the run's own queue"
    status, _, admitted = await api.post("/tasks/admit", {**admit, "includeDescendants": True})
    assert status == 200 and admitted["taskKey"] == "t1" and all(isinstance(r, str) for r in admitted["reservations"])
    reservation = admitted["reservations"][0]
    status, _, view = await api.get(f"/budgets/{budget['id']}")
    assert [(r["id"], r["scopeId"]) for r in view["reservations"]] == [(reservation, child["id"])]
    settle = {"reservationId": reservation, "amountMinor": "10", "workKey": f"settle:{reservation}", "allowOverrun": True}
    status, _, settled = await api.post(f"/budgets/{budget['id']}/settle", settle)
    assert status == 200 and settled["state"] == "ACTIVE" and settled["reservedMinor"] == "20"
    status, _, voided = await api.post(f"/budgets/{budget['id']}/void", {"reservationId": reservation, "workKey": f"void:{reservation}"})
    assert status == 200 and voided["state"] == "VOIDED"
    status, _, body = await api.post(f"/budgets/{budget['id']}/settle", {**settle, "workKey": "again"})
    assert status == 409 and body["error"]["code"] == "CONFLICT", "0.3.0 tolerates CONFLICT on a released reservation"


async def test_a_grant_is_released_with_an_observation(api):
    """`observation` on a grant's release (what `PoolLease.release(observation)` sends) is taken
    as a claim's is, and journaled with the release: the units go back and the token is spent. It
    was refused as a record the journal did not know (503 UNAVAILABLE, the release not recorded)."""
    run = await _run(api)
    status, _, pool = await api.post("/permits", {"name": "gpu", "units": 1})
    acquire = {"scopeId": run, "units": 1, "holder": "w", "holderSession": "s", "leaseSeconds": 30}
    status, _, grant = await api.post(f"/permits/{pool['id']}/acquire", acquire)
    assert status == 200
    release = {"token": grant["token"], "observation": {"latencyMs": 12, "ok": True}}
    status, _, released = await api.post(f"/grants/{grant['grantId']}/release", release)
    assert status == 200 and released["released"] is True, released
    status, _, listing = await api.get("/permits")
    assert listing["permits"][0]["unitsAvailable"] == 1
    status, _, body = await api.post(f"/grants/{grant['grantId']}/renew", {"token": grant["token"]})
    assert status == 409 and body["error"]["code"] == "STALE_CLAIM"


async def test_a_requirement_naming_a_field_it_does_not_take_is_refused(api):
    """A requirement is `{name, units}` (a pool's, a quota's) or `{name, reserveMinor}` (a
    budget's); any other field is refused with 400 naming it, on a submit and on a mailbox's
    defaults alike. A misspelt `units` was dropped in silence and the task admitted with 1 unit."""
    run = await _run(api)
    await api.post("/permits", {"name": "gpu", "units": 4})
    await api.post("/budgets", {"name": "spend", "currency": "USD", "scale": 2, "limitMinor": "100"})
    _, _, box = await api.post("/mailboxes", {"name": "jobs"})
    task = {"scopeId": run, "mailboxId": box["id"], "taskKey": "t"}
    for requirements, field in (
        ({"pools": [{"name": "gpu", "unit": 2}]}, "unit"),
        ({"pools": [{"name": "gpu", "units": 2, "reserveMinor": "5"}]}, "reserveMinor"),
        ({"budgets": [{"name": "spend", "reserveMinor": "5", "units": 1}]}, "units"),
    ):
        status, _, body = await api.post("/tasks", {**task, "requirements": requirements})
        assert status == 400 and body["error"]["code"] == "VALIDATION_FAILED", body
        assert repr(field) in body["error"]["message"], body
        status, _, body = await _put(api, "/mailboxes/by-name/defaults", {"requirements": requirements})
        assert status == 400 and repr(field) in body["error"]["message"], body
    status, _, _ = await api.post("/tasks", {**task, "requirements": {"pools": [{"name": "gpu", "units": 2}]}})
    assert status == 201
    admit = {"scopeId": run, "mailboxId": box["id"], "holder": "w", "holderSession": "s"}
    status, _, admitted = await api.post("/tasks/admit", admit)
    assert status == 200 and [grant["units"] for grant in admitted["grants"]] == [2]


async def test_a_work_limit_counts_the_tasks_of_every_run(api):
    """A work limit's `scopeId` is the run it was made for, shown with it, not a filter (as the API
    reference says): a task submitted under it in another run counts, and is held to it."""
    run = await _run(api)
    _, _, other = await api.post("/scopes", {})
    _, _, mailbox = await api.post("/mailboxes", {"name": "jobs"})
    _, _, limit = await api.post("/work-limits", {"name": "crawl", "scopeId": run, "maxOutstanding": 1})
    status, _, _ = await api.post("/tasks", {"scopeId": other["id"], "mailboxId": mailbox["id"], "taskKey": "a", "workLimit": "crawl"})
    assert status == 201
    status, _, listing = await api.get("/work-limits")
    assert [(row["scopeId"], row["outstanding"]) for row in listing["workLimits"]] == [(run, 1)]
    status, _, body = await api.post("/tasks", {"scopeId": run, "mailboxId": mailbox["id"], "taskKey": "b", "workLimit": limit["id"]})
    assert status == 409 and body["error"]["code"] == "BACKLOG_FULL"


async def test_a_late_charge_is_taken_in_a_run_that_has_ended(api, autojump_clock):
    """Work outlived its reservation's settleBy and its run was cancelled meanwhile: 0.3.0's late
    charge (reserve one minor unit, holder `late-charge`, idempotency key `late:<id>`, then settle
    the cost with allowOverrun) was refused SCOPE_CANCELLED, and spend that happened went
    unrecorded. It is taken now, once per released reservation and only as that, while any other
    reservation in the ended run is still refused."""
    run = await _run(api)
    status, _, other_run = await api.post("/scopes", {"name": "other"})
    status, _, budget = await _put(api, "/budgets/by-name/spend", {"limitMinor": "1000", "currency": "USD", "scale": 2})
    base = f"/budgets/{budget['id']}"
    status, _, first = await api.post(base + "/reserve", {"scopeId": run, "holder": "w", "amountMinor": "300"})
    await trio.sleep(1800)
    status, _, active = await api.post(base + "/reserve", {"scopeId": run, "holder": "w", "amountMinor": "100"})
    rid = first["reservationId"]
    await trio.sleep(1801)  # past the first one's settleBy (an hour): released; the second one holds on
    await api.post(f"/scopes/{run}/cancel", {})
    status, _, body = await api.post(base + "/settle", {"reservationId": rid, "amountMinor": "250", "workKey": f"settle:{rid}", "allowOverrun": True})
    assert status == 409 and body["error"]["code"] == "CONFLICT"
    status, _, body = await api.post(base + "/reserve", {"scopeId": run, "holder": "w", "amountMinor": "1"})
    assert status == 409 and body["error"]["code"] == "SCOPE_CANCELLED", "no new reservation in an ended run"
    late = {"scopeId": run, "holder": "late-charge", "amountMinor": "1"}
    status, _, vehicle = await api.post(base + "/reserve", late, headers={"idempotency-key": f"late:{rid}"})
    assert status == 201 and vehicle["reservedMinor"] == "1", vehicle
    again = await api.post(base + "/reserve", late, headers={"idempotency-key": f"late:{rid}"})
    assert again[0] == 201 and again[2]["reservationId"] == vehicle["reservationId"]  # (the stored answer)
    settle = {"reservationId": vehicle["reservationId"], "amountMinor": "250", "workKey": f"late:{rid}", "allowOverrun": True}
    status, _, settled = await api.post(base + "/settle", settle)
    assert status == 200 and settled["state"] == "SETTLED"
    status, _, view = await api.get(base)
    assert (view["spentMinor"], view["reservedMinor"]) == ("250", "100"), view
    refused = [
        ({**late, "lateOf": rid}, 409, "CONFLICT"),  # charged late once already
        ({**late, "lateOf": active["reservationId"]}, 409, "CONFLICT"),  # not released: settle it
        ({**late, "amountMinor": "50", "lateOf": rid}, 400, "VALIDATION_FAILED"),  # only the one minor unit
        ({**late, "scopeId": other_run["id"], "lateOf": rid}, 400, "VALIDATION_FAILED"),  # only in its run
        ({**late, "lateOf": "rs_nope"}, 404, "NOT_FOUND"),
    ]
    for body, status_wanted, code in refused:
        status, _, answer = await api.post(base + "/reserve", body)
        assert (status, answer["error"]["code"]) == (status_wanted, code), (body, answer)
    status, _, view = await api.get(base)
    assert (view["spentMinor"], view["reservedMinor"]) == ("250", "100"), "a refused late charge changed nothing"
