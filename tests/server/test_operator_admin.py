"""Who does an operator's action, and with which key: the admin key performs them in any space it
knows (cancelling a run or a task, a forced claim release, requeuing or deleting dead letters);
every such record and event says who did it (the API key's id, or "admin")."""

from __future__ import annotations

import itertools

import orjson
import pytest

import runstate.testing
from runstate.actors.journal import MemoryJournal
from runstate.server.app import create_app
from runstate.server.settings import Settings
from runstate.testing import call_asgi

pytestmark = pytest.mark.trio

ADMIN = "admin-key-0123456789"


_sent = itertools.count()


async def request(app, method, path, key, body=None):
    headers = {"authorization": f"Bearer {key}"}
    if method != "GET":
        headers["idempotency-key"] = f"op-{next(_sent)}"
    raw = None
    if body is not None:
        raw = orjson.dumps(body)
        headers["content-type"] = "application/json"
    status, _, answer = await call_asgi(app, method, path, headers, raw)
    return status, orjson.loads(answer) if answer else None


@pytest.fixture
async def served():
    app = create_app(Settings(seed=3, admin_key=ADMIN))
    async with runstate.testing.serve_app(app):
        app.runtime.kernel.partition_of("research").journal = MemoryJournal(keep=True)  # what research's partition writes
        status, made = await request(app, "POST", "/v1/admin/keys", ADMIN, {"space": "research", "name": "crawler"})
        assert status == 201
        yield app, made


async def setup_work(app, key: str) -> dict:
    """In `research`: a run with a held claim, a queued task, and a dead letter."""
    base = "/v1/spaces/research"
    run = (await request(app, "POST", base + "/scopes", key, {}))[1]["id"]
    lease = (await request(app, "POST", base + "/claims", key, {
        "scopeId": run, "key": "k", "holder": "h", "holderSession": "s", "leaseSeconds": 60,
    }))[1]
    mailbox = (await request(app, "POST", base + "/mailboxes", key, {"name": "q", "maxAttempts": 1}))[1]["id"]
    sent = (await request(app, "POST", base + f"/mailboxes/{mailbox}/messages", key, {"scopeId": run, "payload": 1}))[1]
    delivery = (await request(app, "POST", base + f"/mailboxes/{mailbox}/recv", key, {
        "scopeId": run, "holder": "w", "holderSession": "s", "leaseSeconds": 30,
    }))[1]
    await request(app, "POST", base + f"/messages/{sent['id']}/nack", key, {"token": delivery["token"], "retry": False})
    task = (await request(app, "POST", base + "/tasks", key, {"scopeId": run, "mailboxId": mailbox, "taskKey": "t"}))[1]
    return {"run": run, "lease": lease, "mailbox": mailbox, "letter": sent["id"], "task": task["taskId"]}


async def test_the_admin_key_performs_the_operators_actions_in_any_space(served):
    """Each action answers 200 with the admin key, and its record and event say "admin"."""
    app, made = served
    work = await setup_work(app, made["key"])
    base = "/v1/spaces/research"
    actions = [
        ("/claims/k/force-release", {"scopeId": work["run"], "reason": "stuck"}, "claim.force_released"),
        (f"/tasks/{work['task']}/cancel", {"reason": "not needed"}, "task.ended"),
        (f"/mailboxes/{work['mailbox']}/dead-letters/requeue", {"all": True}, "dead_letters.requeued"),
        (f"/mailboxes/{work['mailbox']}/purge", {"reason": "drain"}, "mailbox.purged"),
        (f"/scopes/{work['run']}/cancel", None, "scope.ended"),
    ]
    journal = app.runtime.kernel.partition_of("research").journal
    for tail, body, record_type in actions:
        status, answer = await request(app, "POST", base + tail, ADMIN, body)
        assert status == 200, (tail, answer)
        written = [record for record in journal.records if record["type"] == record_type]
        assert written and written[-1]["by"] == "admin", (record_type, written)
    status, page = await request(app, "GET", base + "/watch?waitSeconds=0", ADMIN)
    by_type = {event["type"]: event["payload"].get("by") for event in page["events"]}
    assert by_type["claim.force_released"] == "admin" and by_type["dead_letters.requeued"] == "admin"
    assert by_type["task.cancelled"] == by_type["mailbox.purged"] == by_type["scope.cancelled"] == "admin"


async def test_an_api_keys_actions_are_recorded_with_its_id(served):
    app, made = served
    work = await setup_work(app, made["key"])
    base = "/v1/spaces/research"
    status, view = await request(app, "POST", base + "/claims/k/force-release", made["key"], {"scopeId": work["run"]})
    assert status == 200 and view["by"] == made["id"]
    await request(app, "POST", base + f"/mailboxes/{work['mailbox']}/dead-letters/delete", made["key"], {"all": True})
    status, page = await request(app, "GET", base + "/watch?waitSeconds=0", made["key"])
    by_type = {event["type"]: event["payload"].get("by") for event in page["events"]}
    assert by_type["claim.force_released"] == made["id"] and by_type["dead_letters.deleted"] == made["id"]
    # What the server itself ends says nobody did it.
    status, page = await request(app, "GET", base + "/watch?waitSeconds=0&types=delivery.dead_lettered", made["key"])
    assert page["events"] and "by" not in page["events"][0]["payload"]


async def test_the_admin_key_does_no_other_work_inside_a_space_and_makes_no_space(served):
    """Other writes are 403; an action in a space the server does not know is 404 and makes none."""
    app, made = served
    work = await setup_work(app, made["key"])
    base = "/v1/spaces/research"
    refused = [
        ("/scopes", {}),
        (f"/scopes/{work['run']}/complete", None),
        ("/claims", {"scopeId": work["run"], "key": "x", "holder": "h", "holderSession": "s"}),
        (f"/mailboxes/{work['mailbox']}/messages", {"scopeId": work["run"]}),
    ]
    for tail, body in refused:
        status, answer = await request(app, "POST", base + tail, ADMIN, body)
        assert status == 403 and answer["error"]["code"] == "FORBIDDEN", (tail, answer)
    status, _ = await request(app, "POST", "/v1/spaces/nowhere/tasks/tk_x/cancel", ADMIN, {})
    assert status == 404 and not app.runtime.kernel.space_known("nowhere")
    # A space's own key still cannot act in another space.
    _, other = await request(app, "POST", "/v1/admin/keys", ADMIN, {"space": "elsewhere"})
    status, _ = await request(app, "POST", base + f"/tasks/{work['task']}/cancel", other["key"], {})
    assert status == 404
