"""Operating the queue: usage counts its operations (renewals free, expiries as events), the metrics show queued
and running work per mailbox, and a parked long poll is answered 204 when shutdown begins."""

from __future__ import annotations

import orjson
import pytest
import trio
import trio.testing
from prometheus_client.parser import text_string_to_metric_families

import runstate.testing
from runstate.server.app import create_app
from runstate.server.settings import Settings
from runstate.testing import call_asgi

pytestmark = pytest.mark.trio

KEY = "test-key"


class Api:
    def __init__(self, app) -> None:  # type: ignore[no-untyped-def]
        self.app = app

    async def call(self, method: str, path: str, body=None):  # type: ignore[no-untyped-def]
        raw = None if body is None else orjson.dumps(body)
        status, _, answer = await call_asgi(self.app, method, "/v1/spaces/default" + path, {"authorization": f"Bearer {KEY}"}, raw)
        return status, (orjson.loads(answer) if answer else None)

    async def setup(self, tasks: int = 2):  # type: ignore[no-untyped-def]
        _, run = await self.call("POST", "/scopes", {})
        _, mailbox = await self.call("POST", "/mailboxes", {"name": "work"})
        for n in range(tasks):
            status, _ = await self.call("POST", "/tasks", {"scopeId": run["id"], "mailboxId": mailbox["id"], "taskKey": f"t{n}"})
            assert status == 201
        return run, mailbox

    async def receive(self, run, mailbox, lease_s: int = 5, wait_ms: int | None = None):  # type: ignore[no-untyped-def]
        body = {"scopeId": run["id"], "holder": "w", "holderSession": "s", "leaseSeconds": lease_s}
        if wait_ms is not None:
            body["waitMs"] = wait_ms
        return await self.call("POST", f"/mailboxes/{mailbox['id']}/recv", body)

    async def usage(self) -> dict:
        return (await self.call("GET", "/usage"))[1]


def app_and_api():  # type: ignore[no-untyped-def]
    app = create_app(Settings(api_key=KEY, seed=1))
    return app, Api(app)


async def test_queue_operations_are_counted_renewals_are_free_and_lost_leases_are_events(autojump_clock):
    """Submit, receive, complete and nack count; a delivery renewal is free; a lease that runs out is an event."""
    app, api = app_and_api()
    async with runstate.testing.serve_app(app):
        run, mailbox = await api.setup(tasks=3)
        _, first = await api.receive(run, mailbox)
        await api.call("POST", f"/messages/{first['message']['id']}/renew", {"token": first["token"]})
        await api.call("POST", f"/messages/{first['message']['id']}/complete", {"token": first["token"], "result": {"payload": 1}})
        _, second = await api.receive(run, mailbox)
        await api.call("POST", f"/messages/{second['message']['id']}/nack", {"token": second["token"], "retry": True})
        _, third = await api.receive(run, mailbox, lease_s=5)  # the third task; its lease runs out
        await trio.sleep(6)
        await trio.testing.wait_all_tasks_blocked()
        usage = await api.usage()
    assert usage["operations"] == {
        "deliveries.complete": 1,
        "deliveries.nack": 1,
        "deliveries.receive": 3,
        "mailboxes.create": 1,
        "scopes.create": 1,
        "tasks.submit": 3,
    }
    assert usage["free"] == {"deliveries.renew": 1}
    assert usage["events"]["deliveries.expire"] == 1


async def test_the_metrics_show_queued_and_running_work_per_mailbox(autojump_clock):
    """Three tasks, one received: queued 2 and running 1 in the mailbox, one delivery in flight in the space."""
    app, api = app_and_api()
    async with runstate.testing.serve_app(app):
        run, mailbox = await api.setup(tasks=3)
        await api.receive(run, mailbox)
        _, _, body = await call_asgi(app, "GET", "/metrics", {}, None)
    found = {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(body.decode())
        for sample in family.samples
    }
    labels = (("mailbox", "work"), ("space", "default"))
    assert found[("runstate_tasks_queued", labels)] == 2
    assert found[("runstate_tasks_running", labels)] == 1
    assert found[("runstate_deliveries_in_flight", (("space", "default"),))] == 1
    assert found[("runstate_operations_total", (("operation", "tasks.submit"), ("space", "default")))] == 3


async def test_a_parked_long_poll_is_answered_204_when_shutdown_begins(autojump_clock):
    """A receive waiting 30 s on an empty queue gets 204 the moment shutdown begins, not 30 s later."""
    app, api = app_and_api()
    async with runstate.testing.serve_app(app):
        run, mailbox = await api.setup(tasks=0)
        answers = []

        async def poll() -> None:
            answers.append((await api.receive(run, mailbox, wait_ms=30_000), trio.current_time()))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(poll)
            await trio.sleep(2)
            await trio.testing.wait_all_tasks_blocked()
            assert answers == [] and app.runtime.telemetry.in_flight == 1
            began = trio.current_time()
            app.lifecycle.begin_shutdown("SIGTERM")
        (status, body), at = answers[0]
        assert status == 204 and body is None and at == began
        # A new long poll during the drain does not park either.
        before = trio.current_time()
        assert (await api.receive(run, mailbox, wait_ms=30_000))[0] == 204
        assert trio.current_time() == before


async def test_recv_leases_from_its_own_scope_and_refuses_to_be_asked_for_descendants(autojump_clock):
    """recv and recv-many lease from the queue of the scope they name, as the official clients
    expect; a body asking for the scope's descendants too (a field of `tasks/admit`) is refused
    with 400 naming the field, never answered from the scope alone as if it had been honoured."""
    app, api = app_and_api()
    async with runstate.testing.serve_app(app):
        run, mailbox = await api.setup(tasks=0)
        _, child = await api.call("POST", "/scopes", {"parentId": run["id"]})
        status, _ = await api.call("POST", f"/mailboxes/{mailbox['id']}/messages", {"scopeId": child["id"], "payload": 1})
        assert status in (200, 201)
        asked = {"scopeId": run["id"], "holder": "w", "holderSession": "s", "includeDescendants": True}
        for tail, body in (("recv", asked), ("recv-many", {**asked, "maxMessages": 2})):
            status, answer = await api.call("POST", f"/mailboxes/{mailbox['id']}/{tail}", body)
            assert status == 400 and answer["error"]["code"] == "VALIDATION_FAILED", (tail, answer)
            assert "unknown field 'includeDescendants'" in answer["error"]["message"], answer
        status, _ = await api.receive(run, mailbox)
        assert status == 204, "the run's own queue is empty: the child's message is not its to lease"
        status, delivery = await api.receive(child, mailbox)
        assert status == 200 and delivery["message"]["payload"] == 1


async def test_a_returned_delivery_is_queued_again_at_once_without_counting_its_attempt(autojump_clock):
    """maxAttempts 1: three deliveries returned unhandled leave the task its one attempt, which a
    retry then uses up. Only the current holder's token returns it, and only before it is settled;
    its place in the queue is kept, and the return itself is counted as an operation."""
    app, api = app_and_api()
    async with runstate.testing.serve_app(app):
        _, run = await api.call("POST", "/scopes", {})
        _, mailbox = await api.call("POST", "/mailboxes", {"name": "once-only", "maxAttempts": 1})
        for key in ("t0", "t1"):
            await api.call("POST", "/tasks", {"scopeId": run["id"], "mailboxId": mailbox["id"], "taskKey": key})
        started = trio.current_time()
        for attempt in (1, 2, 3):
            status, got = await api.receive(run, mailbox)
            assert status == 200 and got["message"]["attempt"] == attempt and got["message"]["payload"] is None
            message_id = got["message"]["id"]
            assert (await api.call("POST", f"/messages/{message_id}/return", {"token": "nope"}))[1]["error"]["code"] == "STALE_CLAIM"
            status, returned = await api.call("POST", f"/messages/{message_id}/return", {"token": got["token"]})
            assert status == 200 and returned["state"] == "QUEUED" and returned["taskState"] == "QUEUED"
            again = await api.call("POST", f"/messages/{message_id}/return", {"token": got["token"]})
            assert again[1]["error"]["code"] == "STALE_CLAIM"  # returned once; the token is spent
        assert trio.current_time() == started  # no backoff: back at once, ahead of the younger task
        _, last = await api.receive(run, mailbox)
        assert last["message"]["id"] == message_id and last["message"]["attempt"] == 4
        status, nacked = await api.call("POST", f"/messages/{message_id}/nack", {"token": last["token"], "retry": True})
        assert status == 200 and nacked["state"] == "DEAD" and nacked["taskState"] == "FAILED"
        settled = await api.call("POST", f"/messages/{message_id}/return", {"token": last["token"]})
        assert settled[1]["error"]["code"] == "STALE_CLAIM"  # a settled delivery is not returned
        _, task = await api.call("GET", f"/tasks/{nacked['taskId']}")
        assert "1 of 1 attempts used" in task["outcomeReason"]
        usage = await api.usage()
    assert usage["operations"]["deliveries.return"] == 3
