"""The OpenAPI description is complete and true: every route is in it with its method and path
parameters, nothing else is, it is served without a key, and a live server's answers to
generated requests (valid and invalid) are never a 5xx and always match it (schemathesis).
"""

from __future__ import annotations

import os
import re

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis import checks as st_checks

import orjson
import trio
import trio.testing

from runstate.server.http import serve_http
from runstate.server.openapi import OPENAPI_PATH, openapi
from runstate.server.routes import ROUTER
from runstate.server.runtime import Runtime
from runstate.server.settings import Settings
from runstate.testing import call_asgi

from ..servers import ServerProcess

METHODS = ("get", "post", "put", "patch", "delete")
# Requests per operation and way (valid or invalid, random or existing ids) in `make test`; `make
# fuzz` sends ten times as many.
EXAMPLES = int(os.environ.get("SCHEMATHESIS_EXAMPLES", "10"))
API_KEY = "openapi-key"
SPACE = "default"


def _routes() -> dict[tuple[str, str], set[str]]:
    found = {}
    for route in ROUTER.routes:
        path = "/" + "/".join(route.pattern)
        found[(route.method.lower(), path)] = {name for name in route.params if name is not None}
    return found


def _spec_params(document: dict, path: str, operation: dict) -> set[str]:
    names = set()
    for parameter in operation.get("parameters", []):
        if "$ref" in parameter:
            parameter = document["components"]["parameters"][parameter["$ref"].rsplit("/", 1)[1]]
        if parameter["in"] == "path":
            names.add(parameter["name"])
    assert names == set(re.findall(r"{(\w+)}", path)), f"{path}: path parameters {names} do not match the template"
    return names


def test_every_route_is_described_and_nothing_else():
    """Each (method, path) of the router is in the document with the same path parameters, and back."""
    document = openapi()
    described = {}
    for path, item in document["paths"].items():
        for method, operation in item.items():
            assert method in METHODS
            described[(method, path)] = _spec_params(document, path, operation)
            assert operation["responses"], f"{method} {path} has no responses"
    routes = _routes()
    assert sorted(set(routes) - set(described)) == [], "routes missing from the OpenAPI document"
    assert sorted(set(described) - set(routes)) == [], "operations in the OpenAPI document with no route"
    for key, params in routes.items():
        assert described[key] == params, f"{key}: parameters {described[key]} in the document, {params} in the router"


def _query(document: dict, operation: dict) -> dict[str, bool]:
    """An operation's query parameters: name -> required."""
    found = {}
    for parameter in operation.get("parameters", []):
        if "$ref" in parameter:
            parameter = document["components"]["parameters"][parameter["$ref"].rsplit("/", 1)[1]]
        if parameter["in"] == "query":
            found[parameter["name"]] = parameter["required"]
    return found


def test_a_history_read_takes_the_query_parameters_of_the_read_it_twins_and_at():
    """`/history/<read>` is the read at a past point: the same query parameters, required where
    they are (`GET /history/once` needs scopeId and key as `GET /once` does), and `at`."""
    document = openapi()
    paths = document["paths"]
    twins = 0
    for path, item in paths.items():
        live = path.replace("/history/", "/", 1)
        if "/history/" not in path or live not in paths or "get" not in paths[live]:
            continue
        twins += 1
        expected = {**_query(document, paths[live]["get"]), "at": False}
        assert _query(document, item["get"]) == expected, path
    assert twins > 20


def test_errors_point_at_the_envelope_and_the_key_is_a_bearer_scheme():
    """Every 4xx/5xx answer is the error envelope; the security scheme is HTTP bearer."""
    document = openapi()
    assert document["openapi"] == "3.1.0"
    assert document["components"]["securitySchemes"]["bearer"] == {**document["components"]["securitySchemes"]["bearer"], "type": "http", "scheme": "bearer"}
    for path, item in document["paths"].items():
        for method, operation in item.items():
            for status, response in operation["responses"].items():
                if status.startswith(("4", "5")):
                    schema = response["content"]["application/json"]["schema"]
                    assert schema == {"$ref": "#/components/schemas/Error"}, (method, path, status)
    recv = document["paths"]["/v1/spaces/{space}/mailboxes/{mailbox_id}/recv"]["post"]["responses"]
    assert "204" in recv and "content" not in recv["204"]


def _bodies(document: dict) -> list[tuple[str, str, dict]]:
    """(method, path, top-level schema) of every operation that takes a JSON body."""
    found = []
    for path, item in document["paths"].items():
        for method, operation in item.items():
            if "requestBody" in operation:
                found.append((method, path, operation["requestBody"]["content"]["application/json"]["schema"]))
    return found


def test_a_request_body_is_closed_as_the_route_refuses_a_field_it_does_not_read():
    """Every request body's schema says that no field but its properties is taken."""
    bodies = _bodies(openapi())
    assert len(bodies) > 50
    for method, path, body in bodies:
        assert body["additionalProperties"] is False, (method, path)


@pytest.mark.trio
async def test_an_integer_query_parameter_is_refused_outside_its_schema_and_taken_within(api):
    """Each query parameter the document types as an integer (live reads; the history's twins
    take the same) is refused with 400 naming it when it is not an integer or is outside its
    bounds, and taken at each bound: the document says what the server reads."""
    document = openapi()
    checked = set()
    for path, item in document["paths"].items():
        operation = item.get("get")
        if operation is None or "/history" in path:
            continue
        parameters = [document["components"]["parameters"][p["$ref"].rsplit("/", 1)[1]] if "$ref" in p else p
                      for p in operation["parameters"]]
        query = [p for p in parameters if p["in"] == "query"]
        required = {p["name"]: "x" for p in query if p["required"]}
        if any(p["name"] == "waitSeconds" for p in query):
            required["waitSeconds"] = "0"  # an empty watch answers at once (the test's own value comes after)
        target = re.sub(r"{(\w+)}", lambda found: "default" if found[1] == "space" else "x1", path)
        for parameter in query:
            schema, name = parameter["schema"], parameter["name"]
            if schema.get("type") != "integer":
                continue
            checked.add(name)
            refused = ["x", "1.5", str(schema["minimum"] - 1)]
            if "maximum" in schema:
                refused.append(str(schema["maximum"] + 1))
            for value in refused:
                query_string = "&".join(f"{k}={v}" for k, v in {**required, name: value}.items())
                status, _, body = await api.request("GET", f"{target}?{query_string}")
                assert status == 400 and name in body["error"]["message"], (path, name, value, body)
            for value in (schema["minimum"], schema.get("maximum", schema["minimum"])):
                query_string = "&".join(f"{k}={v}" for k, v in {**required, name: value}.items())
                status, _, body = await api.request("GET", f"{target}?{query_string}")
                assert status != 400, (path, name, value, body)
    assert checked == {"limit", "waitMs", "olderThanSeconds", "newerThanSeconds", "latest", "waitSeconds"}


def test_every_change_lists_the_403_a_viewer_key_gets():
    """Every keyed route that is not a GET says it may answer 403 (a key of the viewer role, or the
    admin key outside an operator's action); a GET of a space does not."""
    document = openapi()
    for path, item in document["paths"].items():
        for method, operation in item.items():
            if operation.get("security") == []:  # a public route
                continue
            if method != "get":
                assert "403" in operation["responses"], (method, path)
            elif path.startswith("/v1/spaces/"):
                assert "403" not in operation["responses"], (method, path)


def test_the_headers_answers_carry_are_declared():
    """The document declares the headers the answers carry: WWW-Authenticate on every 401, Allow on
    a 405, Retry-After on every 429 and where a 409 or 503 may carry it, the capped wait on the
    answers of a long poll, and where a past read stands on the history's answers."""
    paths = openapi()["paths"]
    for path, item in paths.items():
        for method, operation in item.items():
            responses = operation["responses"]
            if "401" in responses:
                assert responses["401"]["headers"]["WWW-Authenticate"]["required"] is True, (method, path)
            if "429" in responses:
                assert responses["429"]["headers"]["Retry-After"]["required"] is True, (method, path)
            for status in ("409", "503"):
                if status in responses:
                    assert responses[status]["headers"]["Retry-After"]["required"] is False, (method, path)
            if path.startswith("/v1/spaces/{space}/history/") and not path.endswith("/diff"):
                headers = responses["200"]["headers"]
                assert headers["runstate-as-of-lsn"]["required"] and headers["runstate-as-of"]["required"], path
    waits = sorted((method, path) for path, item in paths.items() for method, operation in item.items()
                   if "/history/" not in path
                   and any("runstate-wait-capped-ms" in answer.get("headers", {}) for answer in operation["responses"].values()))
    assert waits == sorted([
        ("post", "/v1/spaces/{space}/claims"), ("post", "/v1/spaces/{space}/mailboxes/{mailbox_id}/recv"),
        ("post", "/v1/spaces/{space}/mailboxes/{mailbox_id}/recv-many"), ("get", "/v1/spaces/{space}/tasks/{task_id}"),
        ("get", "/v1/spaces/{space}/once"), ("post", "/v1/spaces/{space}/tasks/admit"), ("post", "/v1/spaces/{space}/timers/poll"),
    ])
    retry_after = paths["/v1/spaces/{space}/claims"]["post"]["responses"]["409"]["headers"]["Retry-After"]["schema"]
    assert re.fullmatch(retry_after["pattern"], "29.998") and re.fullmatch(retry_after["pattern"], "1")


@pytest.mark.trio
async def test_a_route_the_document_opens_to_all_answers_without_a_key_and_the_others_ask_for_one(api):
    """A route the document gives no security (`security: []`) is answered without a key; a GET
    that takes a bearer key (`/v1/cluster`, the reads of a space) answers 401 without one."""
    document = openapi()
    opened = []
    for path, item in document["paths"].items():
        operation = item.get("get")
        if operation is None:
            continue
        target = re.sub(r"{(\w+)}", lambda found: "default" if found[1] == "space" else "1", path)
        status, _, _ = await call_asgi(api.app, "GET", target, {}, None)
        if operation.get("security") == []:
            opened.append(path)
            assert status != 401, path
        elif operation.get("security") == [{}, {"bearer": []}]:  # a key is optional: none from loopback, as here
            opened.append(path)
            assert status != 401, path
        else:
            assert status == 401, path
    assert sorted(opened) == ["/healthz", "/metrics", "/v1/cluster/partitions/{partition}/snapshot", "/v1/openapi.json"]


ADMIN_KEY = "openapi-admin-key-0123456789"


@pytest.mark.trio
async def test_every_route_with_a_body_refuses_a_field_outside_its_schema(nursery, autojump_clock):
    """What the closed schemas say is what the server does: each route that takes a body answers
    a field its schema does not list with 400 naming it (path ids made up: the body is read first)."""
    runtime = Runtime(Settings(api_key=API_KEY, space_id=SPACE, admin_key=ADMIN_KEY, seed=7))
    await nursery.start(runtime.run)
    while not runtime.ready:
        await trio.testing.wait_all_tasks_blocked()

    async def app(scope, receive, send):  # type: ignore[no-untyped-def]
        await serve_http(runtime, ROUTER, scope, receive, send)

    for method, path, body in _bodies(openapi()):
        target = re.sub(r"{(\w+)}", lambda found: SPACE if found[1] == "space" else "x1", path)
        key = ADMIN_KEY if path.startswith("/v1/admin") else API_KEY
        headers = {"authorization": f"Bearer {key}", "content-type": "application/json"}
        status, _, raw = await call_asgi(app, method.upper(), target, headers, b'{"notAField": 1}')
        assert status == 400, (method, path, raw)
        assert b"unknown field 'notAField'" in raw, (method, path, raw)

    # And what the 403s say: a key of the viewer role is refused every change of its space.
    admin = {"authorization": f"Bearer {ADMIN_KEY}", "content-type": "application/json"}
    _, _, raw = await call_asgi(app, "POST", "/v1/admin/keys", admin, b'{"space": "default", "role": "viewer"}')
    viewer = {"authorization": f"Bearer {orjson.loads(raw)['key']}", "content-type": "application/json"}
    changes = [(method, path) for path, item in openapi()["paths"].items() for method in item
               if method != "get" and path.startswith("/v1/spaces/")]
    assert len(changes) > 50
    for method, path in changes:
        target = re.sub(r"{(\w+)}", lambda found: SPACE if found[1] == "space" else "x1", path)
        status, _, raw = await call_asgi(app, method.upper(), target, viewer, b"{}")
        assert status == 403 and b"viewer role" in raw, (method, path, raw)


@pytest.mark.trio
async def test_the_document_is_served_without_a_key(api):
    """GET /v1/openapi.json answers the document to anyone."""
    status, headers, body = await api.request("GET", OPENAPI_PATH, key=None)
    assert status == 200 and headers["content-type"] == "application/json"
    assert body == openapi()


# -- schemathesis against a real server ---------------------------------------------------------
#
# Driven by hand rather than through schemathesis' pytest plugin: each operation's strategy is run
# under hypothesis with a bounded number of examples, positive (valid by the document) and
# negative (invalid) alike, once with random ids in the path and once with ids of things that
# exist (a run, a mailbox, a task, a message, a held claim), so the requests reach the kernel.

CHECKS = [
    st_checks.not_a_server_error,
    st_checks.status_code_conformance,
    st_checks.content_type_conformance,
    st_checks.response_schema_conformance,
    st_checks.response_headers_conformance,
]


def _existing(server: ServerProcess) -> dict[str, str]:
    with server.client() as http:
        base = f"/v1/spaces/{SPACE}"
        scope_id = http.post(base + "/scopes", json={"name": "fuzz"}).json()["id"]
        mailbox_id = http.post(base + "/mailboxes", json={"name": "fuzz"}).json()["id"]
        task = http.post(base + "/tasks", json={"scopeId": scope_id, "mailboxId": mailbox_id, "taskKey": "t", "input": {"n": 1}}).json()
        # The task is settled, so that a read of it with `waitMs` answers at once (a share of the
        # operations may hold no other operation that would settle it).
        delivery = http.post(base + f"/mailboxes/{mailbox_id}/recv", json={"scopeId": scope_id, "holder": "h", "holderSession": "s", "waitMs": 0}).json()
        settled = http.post(base + f"/messages/{delivery['message']['id']}/complete", json={"token": delivery["token"], "result": {"ok": True}})
        assert settled.status_code == 200, settled.text
        http.post(base + "/claims", json={"key": "k", "scopeId": scope_id, "holder": "h", "holderSession": "s", "leaseSeconds": 600})
        http.put(base + "/runs/fuzz", json={})  # a run and a mailbox named "fuzz" (routes by name)
        # A permit pool, an allowance and a budget, so their routes have something to act on.
        permit_id = http.post(base + "/permits", json={"name": "fuzz", "units": 3}).json()["id"]
        grant = http.post(base + f"/permits/{permit_id}/acquire", json={"scopeId": scope_id, "units": 1, "holder": "h", "holderSession": "s", "leaseSeconds": 600}).json()
        allowance_id = http.post(base + "/allowances", json={"name": "fuzz", "unitsLimit": 1, "windowSeconds": 3600}).json()["id"]
        consumed = http.post(base + f"/allowances/{allowance_id}/consume", json={"scopeId": scope_id, "units": 1, "holder": "h"}).json()
        waiter = http.post(base + f"/allowances/{allowance_id}/wait", json={"scopeId": scope_id, "units": 1, "holder": "h", "ttlSeconds": 600}).json()
        budget_id = http.post(base + "/budgets", json={"name": "fuzz", "currency": "USD", "scale": 2, "limitMinor": "1000"}).json()["id"]
        barrier_id = http.post(base + "/barriers", json={"scopeId": scope_id, "target": 2}).json()["id"]
        timer_id = http.post(base + "/timers", json={"scopeId": scope_id, "afterSeconds": 3600}).json()["id"]
        group_id = http.post(base + "/task-groups", json={"mailboxId": mailbox_id, "condition": "ALL_TERMINAL"}).json()["groupId"]
    capacity = {"permit_id": permit_id, "grant_id": grant["grantId"], "allowance_id": allowance_id, "waiter_id": waiter["waiterId"], "budget_id": budget_id,
                "consumption_id": consumed["consumptionId"]}
    return {
        "space": SPACE, "scope_id": scope_id, "mailbox_id": mailbox_id, "task_id": task["taskId"], "message_id": task["messageId"],
        "key": "k", "key_id": "ak_0", "barrier_id": barrier_id, "timer_id": timer_id, "group_id": group_id, **capacity, "name": "fuzz",
        "partition": "1",
    }


# The document's hundred operations are shared out, in document order, among CHUNKS test classes
# (`TestGeneratedRequests3`), each with a server of its own: `make test` runs `--dist loadscope`, so
# its processes share the classes as they share the simulation's seeds, and no one of them carries
# the whole run (218 s in one test, before). Each operation is a test of its own, which a failure
# names. The server's document must list exactly the operations collected here (none left out).
CHUNKS = 12


def _operations() -> list[tuple[str, str]]:
    """The document's operations but the one that serves it: schemathesis leaves out the operation
    it loaded the document from (`test_the_document_is_served_without_a_key` covers that one)."""
    return [(method, path) for path, item in openapi()["paths"].items() for method in item if path != OPENAPI_PATH]


OPERATIONS = _operations()


def _generate(loaded, existing: dict[str, str], method: str, path: str) -> list[str]:  # type: ignore[no-untyped-def]
    """EXAMPLES valid and EXAMPLES invalid requests of one operation, with random path ids and with
    ids of things that exist; what failed, in words."""
    from hypothesis import given

    operation = loaded[path][method.upper()]
    headers = {"authorization": f"Bearer {API_KEY}"}
    names = {p.name for p in operation.path_parameters}
    failures: list[str] = []
    for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
        for fixed in (None, {name: existing[name] for name in names}) if names else (None,):
            try:
                strategy = operation.as_strategy(generation_mode=mode, path_parameters=fixed or None)
            except Exception:  # some operations have nothing to make invalid
                continue

            @given(case=strategy)
            @settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), database=None, derandomize=True)
            def run(case):  # type: ignore[no-untyped-def]
                case.call_and_validate(headers=headers, checks=CHECKS, timeout=15)

            try:
                run()
            except Unsatisfiable:  # nothing invalid to make of it (no parameters, no body)
                pass
            except BaseException as error:  # hypothesis shrank it (an exception group)
                if isinstance(error, (KeyboardInterrupt, SystemExit)):
                    raise
                failures.append(f"{operation.label} ({mode.value}, {'existing' if fixed else 'random'} ids): {str(error)[:1500]}")
    return failures


@pytest.fixture(scope="class")
def target():  # type: ignore[no-untyped-def]
    """A server for one share of the operations, with things that exist in it, and its document
    as schemathesis loaded it."""
    with ServerProcess(api_key=API_KEY, space_id=SPACE) as server:
        existing = _existing(server)
        loaded = schemathesis.openapi.from_url(server.base_url + OPENAPI_PATH)
        served = sorted((result.ok().method.lower(), result.ok().path) for result in loaded.get_all_operations())
        assert served == sorted(OPERATIONS), "the served document lists other operations than the collected ones"
        yield server, existing, loaded


class _GeneratedRequests:
    """A share of the operations (a subclass per share, below, sets `operations`), against one
    server that the share's tests use in turn."""

    operations: list[tuple[str, str]]

    @pytest.mark.e2e
    def test_generated_requests_never_get_a_5xx_and_answers_match_the_document(self, target, operation):  # type: ignore[no-untyped-def]
        """EXAMPLES valid and EXAMPLES invalid requests each way: no 5xx, answers conform."""
        server, existing, loaded = target
        method, path = operation
        failures = _generate(loaded, existing, method, path)
        assert server.proc is not None and server.proc.poll() is None, "the server died"
        assert not failures, "\n\n".join(failures)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if metafunc.cls is not None and issubclass(metafunc.cls, _GeneratedRequests) and "operation" in metafunc.fixturenames:
        chunk = metafunc.cls.operations
        metafunc.parametrize("operation", chunk, ids=[f"{method.upper()} {path}" for method, path in chunk])


def test_the_operations_are_all_shared_out():
    """Every operation of the document is in exactly one share, and there are many of them."""
    shares = [operation for number in range(CHUNKS) for operation in globals()[f"TestGeneratedRequests{number}"].operations]
    assert len(OPERATIONS) >= 30 and sorted(shares) == sorted(OPERATIONS) and len(set(shares)) == len(shares)


for _number in range(CHUNKS):
    globals()[f"TestGeneratedRequests{_number}"] = type(
        f"TestGeneratedRequests{_number}", (_GeneratedRequests,), {"operations": OPERATIONS[_number::CHUNKS], "__module__": __name__},
    )
