"""A key with the viewer role: every read of its space answers, every change is 403 FORBIDDEN
naming the role and changes nothing. The routes are taken from the router itself, so a route
added later is covered without a change here."""

from __future__ import annotations

import orjson
import pytest

import runstate.testing
from runstate.server.app import create_app
from runstate.server.routes import ROUTER
from runstate.server.settings import Settings
from runstate.testing import call_asgi

pytestmark = pytest.mark.trio

KEY = "editor-key-0123456789"
ADMIN = "admin-key-0123456789"
BASE = "/v1/spaces/default"


async def request(app, method: str, path: str, key: str, body: dict | None = None):  # type: ignore[no-untyped-def]
    headers = {"authorization": f"Bearer {key}"}
    raw = None
    if body is not None:
        raw = orjson.dumps(body)
        headers["content-type"] = "application/json"
    status, _, answer = await call_asgi(app, method, path, headers, raw)
    return status, orjson.loads(answer) if answer else None


async def made(app, path: str, body: dict, status: int = 201) -> dict:  # type: ignore[no-untyped-def]
    """A POST/PUT of the editor key, checked."""
    method = "PUT" if "/by-name/" in path or "/runs/" in path else "POST"
    got, answer = await request(app, method, BASE + path, KEY, body)
    assert got in (200, 201), (path, got, answer)
    return answer


async def one_of_everything(app) -> dict[str, str]:  # type: ignore[no-untyped-def]
    """A run holding one thing of every kind a route names, made with the editor key: the value
    of every path parameter, so that each GET route reads something that exists."""
    run = (await made(app, "/scopes", {"name": "seen"}))["id"]
    await made(app, "/runs/nightly", {})
    await made(app, "/claims", {"key": "report", "scopeId": run, "holder": "w", "holderSession": "s", "leaseSeconds": 60})
    mailbox = (await made(app, "/mailboxes", {"name": "jobs"}))["id"]
    message = (await made(app, f"/mailboxes/{mailbox}/messages", {"scopeId": run, "payload": {"n": 1}}))
    task = (await made(app, "/tasks", {"scopeId": run, "mailboxId": mailbox, "taskKey": "t", "input": {}}))
    pool = (await made(app, "/permits", {"name": "gpu", "units": 1}))["id"]
    grant = await made(app, f"/permits/{pool}/acquire", {"scopeId": run, "units": 1, "holder": "w", "holderSession": "s"}, 200)
    pool_waiter = await made(app, f"/permits/{pool}/wait", {"scopeId": run, "holder": "x", "ttlSeconds": 60})
    allowance = (await made(app, "/allowances", {"name": "llm", "unitsLimit": 1, "windowSeconds": 60}))["id"]
    consumption = await made(app, f"/allowances/{allowance}/consume", {"scopeId": run, "units": 1, "holder": "w"}, 200)
    allowance_waiter = await made(app, f"/allowances/{allowance}/wait", {"scopeId": run, "units": 1, "holder": "w", "ttlSeconds": 30})
    budget = (await made(app, "/budgets", {"name": "spend", "currency": "USD", "scale": 2, "limitMinor": "1000"}))["id"]
    barrier = (await made(app, "/barriers", {"scopeId": run, "target": 2}))["id"]
    timer = (await made(app, "/timers", {"scopeId": run, "afterSeconds": 600}))["id"]
    group = await made(app, "/task-groups", {"mailboxId": mailbox, "condition": "ALL_TERMINAL", "parentScopeId": run})
    return {
        "space": "default", "scope_id": run, "name": "nightly", "key": "report", "mailbox_id": mailbox,
        "message_id": message.get("id") or message["messageId"], "task_id": task.get("id") or task["taskId"], "permit_id": pool,
        "grant_id": grant["grantId"], "waiter_id": pool_waiter["waiterId"], "allowance_id": allowance,
        "budget_id": budget, "barrier_id": barrier, "timer_id": timer, "group_id": group["groupId"],
        "allowance_waiter": allowance_waiter["waiterId"], "consumption_id": consumption["consumptionId"],
    }


def path_of(route, values: dict[str, str]) -> str:  # type: ignore[no-untyped-def]
    segments = []
    for segment, name in zip(route.pattern, route.params):
        if name == "waiter_id" and "allowance-waiters" in route.pattern:
            segments.append(values["allowance_waiter"])
        else:
            segments.append(segment if name is None else values[name])
    return "/" + "/".join(segments)


# Query parameters a GET route requires.
QUERIES = {"/v1/spaces/{space}/once": "?scopeId={scope_id}&key=report"}

SPACE_ROUTES = [route for route in ROUTER.routes if route.pattern[:2] == ("v1", "spaces")]


def history_query(route, newest_lsn: int) -> str:  # type: ignore[no-untyped-def]
    """The point a history route reads at: where everything made above stands."""
    if route.path == "/v1/spaces/{space}/history/diff":
        return f"?from=lsn:1&to=lsn:{newest_lsn}"
    if route.path.startswith("/v1/spaces/{space}/history"):
        return f"{'&' if '?' in QUERIES.get(route.path.replace('/history', '', 1), '') else '?'}at=lsn:{newest_lsn}"
    return ""


async def test_a_viewer_key_reads_every_get_route_and_is_refused_every_change(tmp_path):
    """Every GET under /v1/spaces/{space} answers 200 to a viewer key (with something real at
    each id), its history (a server with a data directory) included; every POST and PUT answers
    403 FORBIDDEN naming the role, and the space's event log and usage are what they were. The
    admin routes need the admin key from it as from any API key; `GET /v1/key` says its role."""
    assert {route.method for route in SPACE_ROUTES} == {"GET", "POST", "PUT"}
    app = create_app(Settings(api_key=KEY, seed=1, admin_key=ADMIN, data_dir=str(tmp_path / "data")))
    async with runstate.testing.serve_app(app):
        status, key = await request(app, "POST", "/v1/admin/keys", ADMIN, {"space": "default", "name": "dashboard", "role": "viewer"})
        assert status == 201 and key["role"] == "viewer", key
        viewer = key["key"]
        values = await one_of_everything(app)
        _, before_usage = await request(app, "GET", BASE + "/usage", KEY)
        _, before_events = await request(app, "GET", BASE + "/events?limit=1000", KEY)
        newest_lsn = (await request(app, "GET", BASE + "/history", KEY))[1]["kept"]["newest"]["lsn"]
        reads = changes = 0
        for route in SPACE_ROUTES:
            path = path_of(route, values)
            if route.method == "GET":
                path += QUERIES.get(route.path.replace("/history", "", 1), "").format(**values) + history_query(route, newest_lsn)
                status, answer = await request(app, "GET", path, viewer)
                assert status == 200, (path, status, answer)
                reads += 1
            else:
                status, answer = await request(app, route.method, path, viewer, {})
                assert status == 403, (route.method, path, status, answer)
                assert answer["error"]["code"] == "FORBIDDEN" and "viewer role" in answer["error"]["message"], answer
                changes += 1
        assert reads >= 20 and changes >= 50
        assert (await request(app, "GET", BASE + "/usage", KEY))[1] == before_usage
        assert (await request(app, "GET", BASE + "/events?limit=1000", KEY))[1]["events"] == before_events["events"]
        for route in ROUTER.routes:
            if route.pattern[:2] == ("v1", "admin"):
                status, answer = await request(app, route.method, path_of(route, {"key_id": key["id"]}), viewer, {} if route.method == "POST" else None)
                assert status == 403 and "admin key" in answer["error"]["message"], (route.path, status, answer)
        status, whoami = await request(app, "GET", "/v1/key", viewer)
        assert status == 200 and whoami["role"] == "viewer" and whoami["spaces"] == ["default"]


async def test_roles_are_listed_checked_and_a_key_without_one_is_an_editor():
    """`GET /v1/admin/keys` shows each key's role; a key made without one is an editor and may
    change things; an unknown role is a 400 that names the roles."""
    app = create_app(Settings(api_key=KEY, seed=1, admin_key=ADMIN))
    async with runstate.testing.serve_app(app):
        status, plain = await request(app, "POST", "/v1/admin/keys", ADMIN, {"space": "research"})
        assert status == 201 and plain["role"] == "editor"
        assert (await request(app, "POST", "/v1/spaces/research/scopes", plain["key"], {}))[0] == 201
        await request(app, "POST", "/v1/admin/keys", ADMIN, {"space": "research", "role": "viewer"})
        _, listed = await request(app, "GET", "/v1/admin/keys", ADMIN)
        assert sorted(key["role"] for key in listed["keys"]) == ["editor", "editor", "viewer"]
        status, refused = await request(app, "POST", "/v1/admin/keys", ADMIN, {"space": "research", "role": "owner"})
        assert status == 400 and refused["error"]["code"] == "VALIDATION_FAILED"
        assert "editor, viewer" in refused["error"]["message"]
        status, refused = await request(app, "POST", "/v1/admin/keys", ADMIN, {"space": "research", "role": 3})
        assert status == 400


async def test_a_viewers_role_is_journaled_with_its_key_and_survives_a_restart(tmp_path):
    """The role is in `key.registered` only for a viewer (an editor's record is as it was before
    roles); after a restart from the data directory the viewer key still reads and is refused."""
    settings = Settings(api_key=KEY, seed=1, admin_key=ADMIN, data_dir=str(tmp_path))
    app = create_app(settings)
    async with runstate.testing.serve_app(app):
        _, editor = await request(app, "POST", "/v1/admin/keys", ADMIN, {"space": "default"})
        _, viewer = await request(app, "POST", "/v1/admin/keys", ADMIN, {"space": "default", "role": "viewer"})
        records = {key.id: record for key in app.runtime.kernel.keys.all() for record in app.runtime.kernel.keys.image()
                   if record["id"] == key.id and record["type"] == "key.registered"}
        assert "role" not in records[editor["id"]] and records[viewer["id"]]["role"] == "viewer"
    app = create_app(settings)
    async with runstate.testing.serve_app(app):
        assert (await request(app, "GET", BASE + "/scopes", viewer["key"]))[0] == 200
        status, refused = await request(app, "POST", BASE + "/scopes", viewer["key"], {})
        assert status == 403 and "viewer role" in refused["error"]["message"]
        assert (await request(app, "POST", BASE + "/scopes", editor["key"], {}))[0] == 201
        _, listed = await request(app, "GET", "/v1/admin/keys", ADMIN)
        assert {key["id"]: key["role"] for key in listed["keys"]}[viewer["id"]] == "viewer"
