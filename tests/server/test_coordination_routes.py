"""Barrier, timer, task-group and event routes over HTTP (in-process ASGI), in virtual time.

Checked literally where the official 0.2.0 client reads them: `id` and `groupId`, `state` and
`epoch`, the `timers` list with `id`, `token` and `firedAt`, `events` and `nextCursor`; the codes
BARRIER_RELEASED, BARRIER_CANCELLED, STALE_CLAIM, CONFLICT (409) and CURSOR_EXPIRED (410); bad
input is a 400 with the envelope.
"""

from __future__ import annotations

from functools import partial

import pytest
import trio
import trio.testing

from runstate.actors.timestamps import parse_timestamp

from runstate.actors import Limits
from runstate.server.settings import Settings

from .asgi_client import API_KEY, SPACE, AsgiClient, client, start_runtime  # noqa: F401 - the fixture

pytestmark = pytest.mark.trio


async def test_barrier_routes(client: AsgiClient, autojump_clock):
    run = await client.run()
    created = await client.post("/barriers", {"scopeId": run, "target": 2})
    assert created.status == 201 and created.json["id"].startswith("br_")
    barrier = created.json["id"]
    assert (await client.get(f"/barriers/{barrier}")).json["state"] == "OPEN"
    assert (await client.post(f"/barriers/{barrier}/arrive", {"arrivalKey": "a"})).json["arrived"] == 1
    assert (await client.post(f"/barriers/{barrier}/arrive", {"arrivalKey": "a"})).json["arrived"] == 1
    released = await client.post(f"/barriers/{barrier}/arrive", {"arrivalKey": "b"})
    assert released.status == 200 and (released.json["state"], released.json["epoch"]) == ("RELEASED", 1)
    late = await client.post(f"/barriers/{barrier}/arrive", {"arrivalKey": "c"})
    assert (late.status, late.code) == (409, "BARRIER_RELEASED")
    other = (await client.post("/barriers", {"scopeId": run, "target": 5})).json["id"]
    await client.post(f"/scopes/{run}/cancel")
    cancelled = await client.post(f"/barriers/{other}/arrive", {"arrivalKey": "a"})
    assert (cancelled.status, cancelled.code) == (409, "BARRIER_CANCELLED")
    assert (await client.get(f"/barriers/{other}")).json["state"] == "CANCELLED"
    for bad in ({"scopeId": run}, {"scopeId": run, "target": 0}, {"scopeId": run, "target": "2"}):
        response = await client.post("/barriers", bad)
        assert (response.status, response.code) == (400, "VALIDATION_FAILED")
    assert (await client.get("/barriers/br_nothing")).status == 404


async def test_a_runs_barriers_timers_and_groups_are_listed_newest_first_cut_at_the_limit(client: AsgiClient, autojump_clock):
    """`/scopes/{id}/barriers`, `/timers` and `/groups`: the run's own, newest first, `limit` of
    them with `truncated` and `nextCursor` when more were left out; a group is listed under the
    run it is under."""
    run, other = await client.run(), await client.run()
    barriers = []
    for _ in range(3):
        barriers.append((await client.post("/barriers", {"scopeId": run, "target": 2})).json["id"])
        await trio.sleep(0.001)  # (newest first by creation, to the millisecond)
    await client.post("/barriers", {"scopeId": other, "target": 2})
    timers = []
    for _ in range(2):
        timers.append((await client.post("/timers", {"scopeId": run, "afterSeconds": 60})).json["id"])
        await trio.sleep(1)  # (newest first by creation)
    mailbox = await client.mailbox("listed")
    group = (await client.post(
        "/task-groups", {"mailboxId": mailbox, "condition": "N_ACCEPTED", "threshold": 1, "parentScopeId": run},
    )).json
    listed = (await client.get(f"/scopes/{run}/barriers?limit=2")).json
    assert listed == {"scopeId": run, "barriers": listed["barriers"], "truncated": True, "nextCursor": listed["nextCursor"]}
    assert [entry["id"] for entry in listed["barriers"]] == barriers[:0:-1] and listed["nextCursor"]
    rest = (await client.get(f"/scopes/{run}/barriers?limit=2&cursor={listed['nextCursor']}")).json
    assert ([entry["id"] for entry in rest["barriers"]], rest["truncated"], rest["nextCursor"]) == (barriers[:1], False, None)
    every = (await client.get(f"/scopes/{run}/barriers")).json
    assert ([entry["id"] for entry in every["barriers"]], every["truncated"]) == (barriers[::-1], False)
    listed = (await client.get(f"/scopes/{run}/timers")).json
    assert list(listed) == ["scopeId", "timers", "truncated", "nextCursor"]
    assert ([entry["id"] for entry in listed["timers"]], listed["truncated"]) == (timers[::-1], False)
    listed = (await client.get(f"/scopes/{run}/groups?limit=1")).json
    assert listed == {
        "scopeId": run, "groups": [(await client.get(f"/task-groups/{group['groupId']}")).json], "truncated": False, "nextCursor": None,
    }
    assert (await client.get("/scopes/sc_nothing/timers")).status == 404
    assert (await client.get(f"/scopes/{run}/groups?limit=0")).status == 400


async def test_timer_routes(client: AsgiClient, autojump_clock):
    run = await client.run()
    created = await client.post("/timers", {"scopeId": run, "afterSeconds": 10})
    assert created.status == 201
    timer = created.json
    assert parse_timestamp(timer["fireAt"]) - parse_timestamp(timer["createdAt"]) == 10_000 and timer["state"] == "ARMED"
    empty = await client.post("/timers/poll", {"scopeId": run})
    assert empty.status == 200 and empty.json["timers"] == []
    await trio.sleep(10)
    await trio.testing.wait_all_tasks_blocked()
    listed = (await client.post("/timers/poll", {"scopeId": run})).json["timers"]
    assert [entry["id"] for entry in listed] == [timer["id"]] and listed[0]["token"]
    fired_ms = parse_timestamp(listed[0]["firedAt"])
    assert parse_timestamp(timer["fireAt"]) <= fired_ms < parse_timestamp(timer["fireAt"]) + 100
    wrong = await client.post(f"/timers/{timer['id']}/ack", {"token": "nope"})
    assert (wrong.status, wrong.code) == (409, "STALE_CLAIM")
    acked = await client.post(f"/timers/{timer['id']}/ack", {"token": listed[0]["token"]})
    assert acked.status == 200 and acked.json["state"] == "ACKED"
    other = (await client.post("/timers", {"scopeId": run, "at": "2027-01-15T09:00:00Z"})).json
    assert (await client.post(f"/timers/{other['id']}/cancel")).json["state"] == "CANCELLED"
    assert (await client.get(f"/timers/{other['id']}")).json["state"] == "CANCELLED"
    # A held poll that sees nothing answers the empty listing, not 204.
    held = await client.post("/timers/poll", {"scopeId": run, "waitMs": 2000})
    assert held.status == 200 and held.json["timers"] == []
    for bad in ({"scopeId": run}, {"scopeId": run, "afterSeconds": 1, "at": "2030-01-01T00:00:00Z"},
                {"scopeId": run, "afterSeconds": -1}, {"scopeId": run, "at": "tomorrow"}):
        response = await client.post("/timers", bad)
        assert (response.status, response.code) == (400, "VALIDATION_FAILED")


async def test_task_group_routes(client: AsgiClient, autojump_clock):
    mailbox = await client.mailbox("group-work")
    parent = await client.run()
    created = await client.post("/task-groups", {"mailboxId": mailbox, "condition": "N_ACCEPTED", "threshold": 1, "parentScopeId": parent})
    assert created.status == 201
    group = created.json
    assert group["groupId"].startswith("tg_") and group["state"] == "OPEN"
    gate = (await client.get(f"/scopes/{group['scopeId']}")).json
    assert gate["parentId"] == parent
    submitted = await client.post(f"/task-groups/{group['groupId']}/tasks", {"taskKey": "a", "input": {"q": 1}})
    assert submitted.status == 201 and submitted.json["taskId"].startswith("tk_")
    again = await client.post(f"/task-groups/{group['groupId']}/tasks", {"taskKey": "a", "input": {"q": 1}})
    assert again.status == 200 and again.json["taskId"] == submitted.json["taskId"]
    outside = (await client.post("/tasks", {"scopeId": parent, "mailboxId": mailbox, "taskKey": "x"})).json["taskId"]
    joined = await client.post(f"/task-groups/{group['groupId']}/join-task", {"taskId": outside})
    assert joined.status == 200 and len(joined.json["members"]) == 2
    task = submitted.json["taskId"]
    rejected = await client.post(f"/task-groups/{group['groupId']}/tasks/{outside}/reject")
    assert rejected.status == 200 and rejected.json["verdict"] == "REJECTED"
    conflict = await client.post(f"/task-groups/{group['groupId']}/tasks/{outside}/accept")
    assert (conflict.status, conflict.code) == (409, "CONFLICT")
    accepted = await client.post(f"/task-groups/{group['groupId']}/tasks/{task}/accept")
    assert accepted.json["state"] == "FINALIZED" and accepted.json["outcome"] == "SUCCEEDED"
    view = (await client.get(f"/task-groups/{group['groupId']}")).json
    assert (view["state"], view["outcome"], view["outcomeReason"]) == ("FINALIZED", "SUCCEEDED", "threshold_reached")
    closed = await client.post(f"/task-groups/{group['groupId']}/close")
    assert closed.status == 200 and set(closed.json) >= {"state", "outcome", "outcomeReason"}
    sealed = await client.post(f"/task-groups/{group['groupId']}/seal")
    assert (sealed.status, sealed.code) == (409, "CONFLICT")
    late = await client.post(f"/task-groups/{group['groupId']}/join-task", {"taskId": outside + "0"})
    assert late.status == 404
    for bad in ({"mailboxId": mailbox, "condition": "MOST"}, {"mailboxId": mailbox, "condition": "N_ACCEPTED"},
                {"mailboxId": mailbox, "condition": "ALL_TERMINAL", "expectedMembers": 101}):
        response = await client.post("/task-groups", bad)
        assert (response.status, response.code) == (400, "VALIDATION_FAILED"), response
    assert (await client.post("/task-groups", {"mailboxId": "mb_none", "condition": "ALL_TERMINAL"})).status == 404


async def test_event_routes(nursery, autojump_clock):
    # Holds shortened (1 s by default, 2 s for 0.2.0, 3 s at most) so that the test runs quickly.
    limits = Limits(watch_wait_s_default=1, watch_wait_s_legacy_max=2, watch_wait_s_max=3)
    client = AsgiClient(await start_runtime(nursery, Settings(api_key=API_KEY, space_id=SPACE, seed=7, limits=limits)))
    run = await client.run()
    first = await client.get("/events")
    assert first.status == 200 and [event["type"] for event in first.json["events"]] == ["scope.created"]
    event = first.json["events"][0]
    assert set(event) == {"eventId", "type", "createdAt", "scopeId", "aggregate", "payload"}
    assert event["aggregate"] == {"type": "scope", "id": run} and event["scopeId"] == run
    cursor = first.json["nextCursor"]
    # An empty watch is held (the default without waitSeconds) and answers JSON with nextCursor.
    start = trio.current_time()
    empty = await client.get(f"/watch?cursor={cursor}")
    assert empty.status == 200 and empty.json == {"events": [], "nextCursor": cursor}
    assert trio.current_time() - start == pytest.approx(1, abs=0.05)
    # A client older than 0.3.0 is held at most the legacy cap whatever it asks; 0.3.0 up to the cap.
    start = trio.current_time()
    await client.get(f"/watch?cursor={cursor}&waitSeconds=60")
    assert trio.current_time() - start == pytest.approx(2, abs=0.05)
    start = trio.current_time()
    await client.request("GET", f"/watch?cursor={cursor}&waitSeconds=60", headers={"user-agent": "runstate-sdk-python/0.3.0"})
    assert trio.current_time() - start == pytest.approx(3, abs=0.05)
    for agent, held in (("runstate-sdk-typescript/0.1.0", 3), ("runstate-sdk-python/0.2.0", 2), ("curl/8.0", 2)):
        start = trio.current_time()
        await client.request("GET", f"/watch?cursor={cursor}&waitSeconds=60", headers={"user-agent": agent})
        assert trio.current_time() - start == pytest.approx(held, abs=0.05), agent

    got = []

    async def watch():
        got.append(await client.get(f"/watch?cursor={cursor}&waitSeconds=3&types=barrier.created"))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(watch)
        await trio.sleep(1)
        await client.post("/barriers", {"scopeId": run, "target": 1})
    page = got[0].json
    assert [event["type"] for event in page["events"]] == ["barrier.created"] and int(page["nextCursor"]) > int(cursor)
    aggregate = await client.get(f"/watch?aggregate=scope:{run}&waitSeconds=0")
    assert [event["type"] for event in aggregate.json["events"]] == ["scope.created"]
    for bad in ("/watch?cursor=abc", "/watch?aggregate=nocolon", "/watch?limit=0", "/watch?waitSeconds=-1", "/events?limit=5000"):
        response = await client.get(bad)
        assert (response.status, response.code) == (400, "VALIDATION_FAILED"), bad
    expired = await client.get("/events?cursor=999")
    assert (expired.status, expired.code) == (410, "CURSOR_EXPIRED")
    assert (await client.get("/watch?scopeId=sc_nothing&waitSeconds=0")).status == 404


async def test_a_watch_for_an_event_type_that_does_not_exist_is_refused_naming_the_nearest(client: AsgiClient, autojump_clock):
    """types names the event types of the log: one that is none of them (a typo) is 400 naming it
    and the nearest type, at once, rather than a watch held to its end that no event can answer."""
    start = trio.current_time()
    response = await client.get("/watch?types=scope.created,claim.taken&waitSeconds=20")
    assert (response.status, response.code) == (400, "VALIDATION_FAILED") and trio.current_time() == start
    assert response.json["error"]["message"].startswith("unknown event type 'claim.taken' (did you mean 'claim.taken_over'?): ")
    run = await client.run()
    page = (await client.get("/watch?types=claim.acquired, scope.created&waitSeconds=0")).json
    assert [event["scopeId"] for event in page["events"]] == [run]


async def test_diagnostics_routes(client: AsgiClient, autojump_clock):
    """ops/runs shows a run's holders (claims, once keys, deliveries) with what they hold as keys
    (claim keys, once keys, the delivered task's key) and their earliest lease end, and counts by
    state over its subtree; ops/waits lists the receives held now."""
    run = await client.run()
    child = (await client.post("/scopes", {"parentId": run})).json["id"]
    mailbox = await client.mailbox()
    await client.post("/claims", {"scopeId": child, "key": "k1", "holder": "w1", "holderSession": "s", "leaseSeconds": 60})
    await client.post("/claims", {"scopeId": run, "key": "k2", "holder": "w1", "holderSession": "s", "leaseSeconds": 30})
    await client.post("/tasks", {"scopeId": child, "mailboxId": mailbox, "taskKey": "t"})
    await client.post("/tasks", {"scopeId": child, "mailboxId": mailbox, "taskKey": "u"})
    delivery = (await client.recv(mailbox, child)).json
    await client.post("/barriers", {"scopeId": child, "target": 2})
    await client.post("/once/acquire", {"scopeId": child, "key": "o1", "holder": "w2", "holderSession": "s2", "leaseSeconds": 20})
    view = (await client.get(f"/ops/runs/{run}")).json
    assert view["scopeId"] == run and view["waiting"] == []
    once_holder, worker = view["workers"]  # soonest lease end first
    assert once_holder["holder"] == "w2" and once_holder["keys"] == ["o1"]
    assert worker["holder"] == "w1" and sorted(worker["keys"]) == ["k1", "k2", "t"]
    assert worker["deliveries"] == [delivery["message"]["id"]]
    claims = (await client.get(f"/scopes/{run}/claims")).json["claims"]
    assert worker["earliestLeaseExpiry"] == min(claim["leaseExpiresAt"] for claim in claims)
    assert view["counts"]["tasks"] == {"QUEUED": 1, "RUNNING": 1}
    assert view["counts"]["scopes"] == {"ACTIVE": 2} and view["counts"]["barriers"] == {"OPEN": 1}
    assert (await client.get("/ops/runs/sc_nothing")).status == 404

    other = await client.run()
    held = []

    async def hold():
        held.append(await client.recv(mailbox, other, waitMs=5_000))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(hold)
        await trio.sleep(1)
        waits = (await client.get("/ops/waits")).json["waits"]
        assert waits == [{"on": "queue", "calls": 1, "mailboxId": mailbox, "scopeId": other, "holders": ["w1"]}]
        assert (await client.get(f"/ops/runs/{other}")).json["parked"] == waits
    assert held[0].status == 204
    assert (await client.get("/ops/waits")).json["waits"] == []


async def test_a_read_waiting_for_a_tasks_end_is_shown_as_such_not_as_a_receive(client: AsgiClient, autojump_clock):
    """`GET /tasks/{id}?waitMs=` parks on the task's queue, as a receive does, but waits for no
    delivery: ops/waits shows it by task, apart from the receives held on that queue (`runstate
    top` names the task), and the console's queues do not count it among the workers waiting."""
    from runstate.server.console.views.lists import _receivers
    from runstate.server.top import _where

    run, mailbox = await client.run(), await client.mailbox()
    task = (await client.post("/tasks", {"scopeId": run, "mailboxId": mailbox, "taskKey": "t"})).json["taskId"]
    other = await client.run()
    answered = []

    async def read_task():
        answered.append(await client.get(f"/tasks/{task}?waitMs=5000"))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(read_task)
        nursery.start_soon(read_task)
        await trio.sleep(1)
        waits = (await client.get("/ops/waits")).json["waits"]
        assert waits == [{"on": "task", "calls": 2, "scopeId": run, "taskId": task}]
        assert (await client.get(f"/ops/runs/{run}")).json["parked"] == waits
        assert _where(waits[0], {}) == f"{task} in {run}"  # as `runstate top` names it
        assert _receivers(client.runtime.kernel, "default") == {mailbox: 0}
        nursery.start_soon(partial(client.recv, mailbox, other, waitMs=5_000))
        await trio.sleep(1)
        waits = (await client.get("/ops/waits")).json["waits"]
        assert waits == [
            {"on": "queue", "calls": 1, "mailboxId": mailbox, "scopeId": other, "holders": ["w1"]},
            {"on": "task", "calls": 2, "scopeId": run, "taskId": task},
        ]
        assert _receivers(client.runtime.kernel, "default") == {mailbox: 1}
    assert [response.status for response in answered] == [200, 200]


async def test_metrics_show_coordination_by_state(client: AsgiClient, autojump_clock):
    from prometheus_client.parser import text_string_to_metric_families

    run = await client.run()
    barrier = (await client.post("/barriers", {"scopeId": run, "target": 1})).json["id"]
    await client.post(f"/barriers/{barrier}/arrive", {"arrivalKey": "a"})
    await client.post("/barriers", {"scopeId": run, "target": 2})
    await client.post("/timers", {"scopeId": run, "afterSeconds": 60})
    from runstate.server.http import serve_http
    from runstate.server.routes import ROUTER
    from runstate.testing import call_asgi

    async def app(scope, receive, send):
        await serve_http(client.runtime, ROUTER, scope, receive, send)

    status, _, body = await call_asgi(app, "GET", "/metrics", {}, None, client=("127.0.0.1", 40000))
    assert status == 200
    found = {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(body.decode()) for sample in family.samples
    }
    assert found[("runstate_barriers", (("space", "default"), ("state", "OPEN")))] == 1
    assert found[("runstate_barriers", (("space", "default"), ("state", "RELEASED")))] == 1
    assert found[("runstate_timers", (("space", "default"), ("state", "ARMED")))] == 1
    assert found[("runstate_events_kept", (("space", "default"),))] == 6


async def test_named_timer_and_barrier_routes(client: AsgiClient, autojump_clock):
    """What 0.3.0's `sleep` and `together` send: a timer by name answers `now` and `fireAt` (the
    client sleeps the difference) and, once fired, its token; a barrier by name answers `id` and
    `epoch`, its arrival `state`. Names are percent-decoded; bad bodies are 400s."""
    run = await client.run()
    armed = await client.request("PUT", "/timers/by-name/nap%20time", {"scopeId": run, "afterSeconds": 5})
    assert armed.status == 200 and armed.json["name"] == "nap time" and armed.json["token"] is None
    assert parse_timestamp(armed.json["fireAt"]) - parse_timestamp(armed.json["now"]) == 5_000
    await trio.sleep(5)
    await trio.testing.wait_all_tasks_blocked()
    fired = (await client.request("PUT", "/timers/by-name/nap%20time", {"scopeId": run, "afterSeconds": 5})).json
    assert (fired["id"], fired["state"]) == (armed.json["id"], "FIRED") and fired["token"]
    assert (await client.post(f"/timers/{fired['id']}/ack", {"token": fired["token"]})).json["state"] == "ACKED"
    # A timer that exists is answered as it is whatever the body says: {scopeId} alone looks it up.
    for body in ({"scopeId": run}, {"scopeId": run, "afterSeconds": 1, "at": "2030-01-01T00:00:00Z"}):
        found = await client.request("PUT", "/timers/by-name/nap%20time", body)
        assert found.status == 200 and (found.json["id"], found.json["state"]) == (armed.json["id"], "ACKED")
    for bad in ({"scopeId": run}, {"afterSeconds": 1}, {"scopeId": run, "afterSeconds": 1, "at": "2030-01-01T00:00:00Z"}):
        response = await client.request("PUT", "/timers/by-name/other", bad)
        assert (response.status, response.code) == (400, "VALIDATION_FAILED")
    assert [timer["name"] for timer in (await client.get(f"/scopes/{run}/timers")).json["timers"]] == ["nap time"]
    assert (await client.request("PUT", "/timers/by-name/x", {"scopeId": "sc_nothing", "afterSeconds": 1})).status == 404

    barrier = await client.request("PUT", "/barriers/by-name/meet", {"scopeId": run, "target": 2})
    assert barrier.status == 200 and (barrier.json["epoch"], barrier.json["name"]) == (1, "meet")
    again = await client.request("PUT", "/barriers/by-name/meet", {"scopeId": run, "target": 2})
    assert again.json["id"] == barrier.json["id"]
    conflict = await client.request("PUT", "/barriers/by-name/meet", {"scopeId": run, "target": 3})
    assert (conflict.status, conflict.code) == (409, "CONFLICT")
    first = await client.post(f"/barriers/{barrier.json['id']}/arrive", {"arrivalKey": "host-1"})
    assert first.json["state"] == "OPEN"
    assert (await client.post(f"/barriers/{barrier.json['id']}/arrive", {"arrivalKey": "host-2"})).json["state"] == "RELEASED"
    for bad in ({"scopeId": run}, {"scopeId": run, "target": 0}, {"target": 2}):
        response = await client.request("PUT", "/barriers/by-name/b", bad)
        assert (response.status, response.code) == (400, "VALIDATION_FAILED")
    assert (await client.request("PUT", "/barriers/by-name/" + "n" * 257, {"scopeId": run, "target": 1})).code == "VALIDATION_FAILED"


async def test_group_members_take_requirements_and_the_groups_gate_scope(client: AsgiClient, autojump_clock):
    """What 0.3.0's `gather` sends: the group answers its gate `scopeId`; a member submitted with
    requirements is admitted (in the gate scope) only with them; verdicts come with `{}`; a nack's
    error is the failed member's reason; cancelling the gate ends what is left."""
    await client.post("/permits", {"name": "browser", "units": 1})
    mailbox = await client.mailbox("gather-work")
    run = await client.run()
    group = (await client.post("/task-groups", {
        "parentScopeId": run, "mailboxId": mailbox, "condition": "N_ACCEPTED", "threshold": 1, "expectedMembers": 3,
    })).json
    gate = group["scopeId"]
    assert gate != run and (await client.get(f"/scopes/{gate}")).json["parentId"] == run
    needs = {"pools": [{"name": "browser", "units": 1}]}
    members = []
    for key in ("a", "b", "c"):
        response = await client.post(f"/task-groups/{group['groupId']}/tasks", {"taskKey": key, "input": key, "requirements": needs})
        assert response.status == 201
        members.append(response.json["taskId"])
    bad = await client.post(f"/task-groups/{group['groupId']}/tasks", {"taskKey": "d", "requirements": {"pools": "x"}})
    assert (bad.status, bad.code) == (400, "VALIDATION_FAILED")
    assert (await client.recv(mailbox, gate)).status == 204  # members with requirements wait for admission
    admit = {"scopeId": gate, "mailboxId": mailbox, "holder": "w", "holderSession": "s", "leaseSeconds": 30}
    one = (await client.post("/tasks/admit", admit)).json
    assert one["taskId"] == members[0] and len(one["grants"]) == 1
    assert (await client.post("/tasks/admit", admit)).status == 204  # the one browser is taken
    await client.post(f"/messages/{one['messageId']}/nack", {"token": one["token"], "retry": False, "error": "ValueError: no"})
    failed = (await client.get(f"/tasks/{members[0]}")).json
    assert (failed["state"], failed["outcomeReason"]) == ("FAILED", "handler_error: ValueError: no")
    assert (await client.post(f"/task-groups/{group['groupId']}/tasks/{members[0]}/reject", {})).status == 200
    two = (await client.post("/tasks/admit", admit)).json
    await client.post(f"/messages/{two['messageId']}/complete", {"token": two["token"], "result": {"payload": "B"}})
    assert (await client.get(f"/tasks/{members[1]}")).json["outcome"] == "B"
    accepted = await client.post(f"/task-groups/{group['groupId']}/tasks/{members[1]}/accept", {})
    assert accepted.status == 200 and accepted.json["state"] == "FINALIZED"
    assert (await client.post(f"/scopes/{gate}/cancel", {})).status == 200
    left = (await client.get(f"/tasks/{members[2]}")).json
    assert (left["state"], left["outcomeReason"]) == ("CANCELLED", "scope_cancelled")


async def test_ops_runs_lists_who_waits_in_a_pools_line(client: AsgiClient, autojump_clock):
    """0.3.0's `status()` reads `waiting[].permit` and `.units`: the waiters of a pool's line in the
    run's subtree, oldest first, while they wait or have their turn; not once they leave."""
    run = await client.run()
    child = (await client.post("/scopes", {"parentId": run})).json["id"]
    pool = (await client.post("/permits", {"name": "browser", "units": 2})).json["id"]
    held = await client.post(f"/permits/{pool}/acquire", {"scopeId": run, "units": 2, "holder": "w0", "holderSession": "s", "leaseSeconds": 60})
    assert held.status in (200, 201)
    first = await client.post(f"/permits/{pool}/wait", {"scopeId": child, "units": 1, "holder": "w1"})
    if first.status == 404 and first.code in (None, "NOT_FOUND") and "no such route" in first.json["error"]["message"]:
        pytest.skip("this server has no pool lines (POST /permits/{id}/wait)")
    await trio.sleep(1)
    second = (await client.post(f"/permits/{pool}/wait", {"scopeId": run, "units": 2, "holder": "w2"})).json
    waiting = (await client.get(f"/ops/runs/{run}")).json["waiting"]
    assert [(entry["permit"], entry["units"], entry["holder"]) for entry in waiting] == [("browser", 1, "w1"), ("browser", 2, "w2")]
    assert (await client.get(f"/ops/runs/{child}")).json["waiting"][0]["waiterId"] == first.json["waiterId"]
    await client.post(f"/permit-waiters/{second['waiterId']}/cancel", {})
    assert [entry["holder"] for entry in (await client.get(f"/ops/runs/{run}")).json["waiting"]] == ["w1"]


async def test_ops_waits_lists_the_waiters_of_pools_and_allowances(client: AsgiClient, autojump_clock):
    """Beside the parked calls, who waits in a pool's line and in an allowance's queue, oldest first,
    until they leave (a grant, a cancel, their TTL)."""
    run = await client.run()
    pool = (await client.post("/permits", {"name": "gpu", "units": 1})).json["id"]
    await client.post(f"/permits/{pool}/acquire", {"scopeId": run, "units": 1, "holder": "w0", "holderSession": "s", "leaseSeconds": 60})
    in_line = (await client.post(f"/permits/{pool}/wait", {"scopeId": run, "units": 1, "holder": "w1"})).json
    allowance = (await client.post("/allowances", {"name": "llm", "unitsLimit": 1, "windowSeconds": 3600})).json["id"]
    await client.post(f"/allowances/{allowance}/consume", {"scopeId": run, "units": 1, "holder": "w0"})
    queued = (await client.post(f"/allowances/{allowance}/wait", {"scopeId": run, "units": 1, "holder": "w2", "ttlSeconds": 60})).json
    waits = (await client.get("/ops/waits")).json["waits"]
    assert [(w["on"], w.get("permit") or w.get("allowance"), w["holder"], w["waiterId"], w["scopeId"]) for w in waits] == [
        ("pool", "gpu", "w1", in_line["waiterId"], run), ("allowance", "llm", "w2", queued["waiterId"], run),
    ]
    await client.post(f"/permit-waiters/{in_line['waiterId']}/cancel", {})
    await client.post(f"/allowance-waiters/{queued['waiterId']}/cancel", {})
    assert (await client.get("/ops/waits")).json["waits"] == []


async def test_events_latest_gives_the_newest_and_the_cursor_to_follow_from(client: AsgiClient, autojump_clock):
    """`latest=N`: the newest N events kept, oldest of them first; `latest=0`: only the cursor;
    with a cursor or a limit beside it, 400."""
    for _ in range(5):
        await client.run()
    newest = (await client.get("/events?latest=2")).json
    assert [event["eventId"] for event in newest["events"]] == ["ev_4", "ev_5"] and newest["nextCursor"] == "5"
    assert (await client.get("/events?latest=0")).json == {"events": [], "nextCursor": "5"}
    assert len((await client.get("/events?latest=1000")).json["events"]) == 5
    both = await client.get("/events?latest=1&cursor=2")
    assert both.status == 400 and both.code == "VALIDATION_FAILED"
    with_limit = await client.get("/events?latest=3&limit=1")  # latest is the count: limit is not dropped in silence
    assert with_limit.status == 400 and "not both" in with_limit.json["error"]["message"]
    assert (await client.get("/events?latest=1001")).status == 400


async def test_events_number_a_tasks_attempts_as_its_view_does(client: AsgiClient, autojump_clock):
    """task.started said attempt 0 and task.succeeded 1 for the same first attempt; after a takeover,
    started 1, retried 1, succeeded 2. One numbering now, the task view's: 1, 1; then 2, 2."""
    run, mailbox = await client.run(), await client.mailbox()
    task = (await client.post("/tasks", {"scopeId": run, "mailboxId": mailbox, "taskKey": "k"})).json["taskId"]
    first = (await client.recv(mailbox, run, leaseSeconds=5)).json
    assert first["message"]["attempt"] == 1 and (await client.get(f"/tasks/{task}")).json["attempt"] == 1
    await trio.sleep(6)  # the first worker vanished: its lease runs out, the task goes back
    second = (await client.recv(mailbox, run)).json
    assert second["message"]["attempt"] == 2 and (await client.get(f"/tasks/{task}")).json["attempt"] == 2
    await client.post(f"/messages/{second['message']['id']}/complete", {"token": second["token"], "result": {"payload": 1}})
    events = (await client.get(f"/watch?waitSeconds=0&aggregate=task:{task}")).json["events"]
    attempts = [(event["type"], event["payload"].get("attempt")) for event in events if event["type"] != "task.created"]
    assert attempts == [("task.started", 1), ("task.retried", 1), ("task.started", 2), ("task.succeeded", 2)]


async def test_event_and_listing_numbers_other_than_ascii_digits_are_refused(client: AsgiClient, autojump_clock):
    """`limit`, `latest`, `cursor` and `waitSeconds` of the event routes, and `limit` of a run's
    barriers, timers and groups, are ASCII digits, and not too many of them: "²" is a digit to
    `str.isdigit` that `int()` refuses, "٣" one it reads as 3, and 5000 digits are past what
    `int()` converts; each is a 400 naming the parameter, never a 500 or a number read."""
    run = await client.run()
    asked = [("/events", name) for name in ("limit", "latest", "cursor")]
    asked += [("/watch", name) for name in ("limit", "cursor", "waitSeconds")]
    asked += [(f"/scopes/{run}/{what}", "limit") for what in ("barriers", "timers", "groups")]
    for path, name in asked:
        for text in ("%C2%B2", "%D9%A3", "1" * 5000):  # "²", "٣" (ARABIC-INDIC DIGIT THREE)
            response = await client.get(f"{path}?{name}={text}")
            assert (response.status, response.code) == (400, "VALIDATION_FAILED"), (path, name, text[:8], response)
            assert name in response.json["error"]["message"]


async def test_a_poll_for_one_timer_names_a_timer_of_its_scope(client: AsgiClient, autojump_clock):
    """A poll with `timerId` runs on its scope's timers, and is woken by their firings only: a
    timer of another scope is refused (404 naming both), rather than held the whole wait while it
    fires elsewhere and then answered as if nothing had."""
    run, other = await client.run(), await client.run()
    elsewhere = (await client.post("/timers", {"scopeId": other, "afterSeconds": 5})).json["id"]
    start = trio.current_time()
    refused = await client.post("/timers/poll", {"scopeId": run, "timerId": elsewhere, "waitMs": 30000})
    assert (refused.status, refused.code) == (404, "NOT_FOUND"), refused
    assert elsewhere in refused.json["error"]["message"] and run in refused.json["error"]["message"]
    assert trio.current_time() - start < 1
    held = await client.post("/timers/poll", {"scopeId": other, "timerId": elsewhere, "waitMs": 30000})
    assert [entry["id"] for entry in held.json["timers"]] == [elsewhere]
    assert trio.current_time() - start == pytest.approx(5, abs=0.1)


async def test_a_held_poll_for_one_timer_that_ends_empty_still_says_how_the_timer_stands(client: AsgiClient, autojump_clock):
    """A poll with `timerId` answers `timer` (the timer as it stands) beside the listing; a held one
    whose wait ends with nothing fired answers it too, as the same poll without a wait does."""
    run = await client.run()
    timer = (await client.post("/timers", {"scopeId": run, "afterSeconds": 60})).json["id"]
    at_once = (await client.post("/timers/poll", {"scopeId": run, "timerId": timer})).json
    held = (await client.post("/timers/poll", {"scopeId": run, "timerId": timer, "waitMs": 2000})).json
    assert at_once == held
    assert (held["timer"]["id"], held["timer"]["state"], held["timers"]) == (timer, "ARMED", [])


async def test_a_group_sealed_by_its_expected_members_says_so_in_the_event_log(client: AsgiClient, autojump_clock):
    """A group is sealed by `seal`/`close` or by the join that brings its `expectedMembers`; the
    event log says `group.sealed` either way, once, after that join's `group.joined` (a watcher
    of `group.sealed` learns that no member will join any more)."""
    mailbox = await client.mailbox("sealed-by-count")
    parent = await client.run()
    group = (await client.post("/task-groups", {
        "mailboxId": mailbox, "condition": "ALL_TERMINAL", "expectedMembers": 2, "parentScopeId": parent,
    })).json["groupId"]
    for key in ("a", "b"):
        assert (await client.post(f"/task-groups/{group}/tasks", {"taskKey": key})).status == 201
    assert (await client.get(f"/task-groups/{group}")).json["state"] == "SEALED"
    events = (await client.get(f"/watch?waitSeconds=0&aggregate=group:{group}")).json["events"]
    assert [event["type"] for event in events] == ["group.created", "group.joined", "group.joined", "group.sealed"]
    other = (await client.post("/task-groups", {"mailboxId": mailbox, "condition": "ALL_TERMINAL", "parentScopeId": parent})).json["groupId"]
    await client.post(f"/task-groups/{other}/tasks", {"taskKey": "c"})
    await client.post(f"/task-groups/{other}/seal")
    events = (await client.get(f"/watch?waitSeconds=0&aggregate=group:{other}")).json["events"]
    assert [event["type"] for event in events] == ["group.created", "group.joined", "group.sealed"]
