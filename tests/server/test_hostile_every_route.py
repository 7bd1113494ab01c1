"""Every route of the router, fed hostile input: always a 4xx with the error envelope, never a 5xx.

The routes are taken from the router itself, so a route added later is covered without a change
here. Each gets: no key, a wrong key, a malformed Authorization header; then (with the key)
broken JSON, bytes that are not UTF-8, a JSON array, a bare string, deeply nested JSON, a body
over the limit, every field of the wrong type, huge strings, and path segments that are
percent-encoded garbage. Afterwards the server is healthy and a whole claim, task and delivery
cycle works, and the mailbox counts agree with the messages (the state is consistent).
"""

from __future__ import annotations

import json

import pytest

from runstate.server.routes import ROUTER

from .conftest import KEY

pytestmark = pytest.mark.trio

FIELDS = ["key", "scopeId", "holder", "holderSession", "leaseSeconds", "token", "observation", "name", "parentId",
          "deadline", "childLimit", "mode", "backlogLimit", "maxAttempts", "payload", "workKey", "waitMs", "result",
          "retry", "error", "taskKey", "mailboxId", "input", "subscriberId", "reason", "space", "spaces"]
WRONG = [7, -1, 2**70, 1.5, True, None, [], {}, "", "x" * 70_000, "\u0000\ud800", [[[[]]]], {"a": {"b": {}}}]

BODIES = [
    b"{",
    b"\xff\xfe\xfd",
    b'{"name": "\xc3\x28"}',
    b"[1, 2, 3]",
    b'"a string"',
    b"null",
    b"NaN",
    b"{'single': 'quotes'}",
    b'{"a":' * 5000 + b"1" + b"}" * 5000,
    b"[" * 200_000 + b"]" * 200_000,
    b'{"name": "' + b"x" * (1024 * 1024 + 10) + b'"}',
    b"\x00" * 1000,
]


def _paths(route) -> list[str]:  # type: ignore[no-untyped-def]
    values = {
        "space": ["default", "other", "%ff%fe", "a" * 300],
        "scope_id": ["sc_nope", "%00", "..", "x" * 2000],
        "key": ["k", "%2F%2F", "%ff", "k" * 600],
        "mailbox_id": ["mb_nope", "%ff"],
        "message_id": ["ms_nope", "%C3%28"],
        "task_id": ["tk_nope", "%ff%ff"],
        "key_id": ["ak_nope"],
    }
    paths = [""]
    for segment, name in zip(route.pattern, route.params):
        choices = values.get(name, ["x"]) if name else [segment]
        paths = [f"{path}/{choice}" for path in paths for choice in choices][:8]
    return paths


def assert_refused(status: int, body, route) -> None:  # type: ignore[no-untyped-def]
    assert 400 <= status < 500, f"{route.method} {'/'.join(route.pattern)}: {status} {body}"
    assert isinstance(body, dict) and set(body) == {"error"}, body
    assert body["error"]["code"] and body["error"]["message"] and body["error"]["requestId"]


ROUTES = [route for route in ROUTER.routes if not route.public]


@pytest.mark.parametrize("route", ROUTES, ids=lambda r: f"{r.method} /{'/'.join(r.pattern)}")
async def test_without_a_valid_key_every_route_is_401(api, route, autojump_clock):
    """No key, a wrong key and malformed Authorization headers are refused before anything else."""
    path = _paths(route)[0]
    for key, headers in [(None, {}), ("wrong", {}), (None, {"authorization": "Basic eA=="}), (None, {"authorization": "Bearer "}),
                         (None, {"authorization": "Bearer " + "k" * 10_000})]:
        status, _, body = await api.request(route.method, path, key=key, headers=headers, body=b"{}" if route.method == "POST" else None)
        assert_refused(status, body, route)
        assert status in (401, 404), (route.method, path, status)


@pytest.mark.parametrize("route", ROUTES, ids=lambda r: f"{r.method} /{'/'.join(r.pattern)}")
async def test_malformed_bodies_and_paths_are_4xx_with_the_envelope(api, route, autojump_clock):
    """Broken, non-UTF-8, nested, oversized bodies, and garbage path segments: a 4xx every time."""
    for path in _paths(route):
        for raw in BODIES:
            status, _, body = await api.request(route.method, path, body=raw, headers={"content-type": "application/json"})
            if status < 400:  # a GET ignores its body; a body-less POST may too
                assert route.method == "GET" or raw in (b"null",) or not path.startswith("/v1/spaces/default"), (path, raw[:40], status)
                continue
            assert_refused(status, body, route)


@pytest.mark.parametrize("route", [r for r in ROUTES if r.method == "POST"], ids=lambda r: f"{r.method} /{'/'.join(r.pattern)}")
async def test_every_field_of_the_wrong_type(api, route, autojump_clock):
    """Each known field set to numbers, booleans, nulls, lists, objects, huge and broken strings."""
    path = _paths(route)[0]
    for field in FIELDS:
        for value in WRONG:
            raw = json.dumps({field: value}).encode("utf-8", "surrogatepass")
            status, _, body = await api.request("POST", path, body=raw, headers={"content-type": "application/json"})
            if status >= 400:
                assert_refused(status, body, route)
            else:  # only fields a route ignores, or optional ones given a value it takes
                assert status in (200, 201, 204), (path, field, value, status)


async def test_after_all_of_it_the_server_is_healthy_and_consistent(api, autojump_clock):
    """A barrage of hostile requests on every route, then a full claim, task and delivery cycle."""
    for route in ROUTES:
        for raw in BODIES[:6]:
            await api.request(route.method, _paths(route)[0], body=raw)
    status, _, body = await api.request("GET", "/healthz", key=None)
    assert (status, body) == (200, {"status": "ok"})
    status, _, run = await api.post("/scopes", {"name": "after"})
    assert status == 201
    status, _, lease = await api.post("/claims", {"key": "k", "scopeId": run["id"], "holder": "h", "holderSession": "s"})
    assert status == 200 and lease["generation"] == 1
    status, _, mailbox = await api.post("/mailboxes", {"name": "after"})
    assert status == 201
    status, _, task = await api.post("/tasks", {"scopeId": run["id"], "mailboxId": mailbox["id"], "taskKey": "t", "input": {"n": 1}})
    assert status == 201
    status, _, delivery = await api.post(f"/mailboxes/{mailbox['id']}/recv", {"scopeId": run["id"], "holder": "w", "holderSession": "s"})
    assert status == 200 and delivery["message"]["taskId"] == task["taskId"]
    status, _, done = await api.post(f"/messages/{delivery['message']['id']}/complete", {"token": delivery["token"], "result": {"payload": 42}})
    assert status == 200 and done["taskState"] == "SUCCEEDED"
    status, _, view = await api.request("GET", f"/v1/spaces/default/tasks/{task['taskId']}")
    assert view["outcome"] == 42
    kernel = api.rs.kernel
    for space in kernel.spaces():
        for box in space.mailboxes.all():
            live = [m for m in space.messages.all() if m.mailbox_id == box.id]
            assert box.queued == sum(m.state == "QUEUED" for m in live)
            assert box.leased == sum(m.state == "LEASED" for m in live)
            assert box.dead == sum(m.state == "DEAD" for m in live)
    assert KEY
