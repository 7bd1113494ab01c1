"""The wire shapes of the inspection and admin answers the routes built as dicts (a space's runs,
a run's claims and tasks, a space's caps, the admin's keys and spaces, a new key with its secret,
the key of a request): the bytes clients read, and the OpenAPI components made from the same
declaration.

Each `*_before` is the answer as the route built it before it was a typed view (a camelCase dict
around the kernel's views, written by `wire.dumps` as then): every generated view must encode to
exactly its bytes.
"""

from __future__ import annotations

from typing import Any

import jsonschema
import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from runstate.actors.caps import SPACE_CAPS, CapView
from runstate.actors.claims import RunClaimsView
from runstate.actors.keys import ApiKeysView, ApiKeyView
from runstate.actors.limits import Limits
from runstate.actors.runs import SpaceCapsView
from runstate.actors.scopes import ScopesView
from runstate.actors.tasks import RunTasksView, TaskView
from runstate.server import wire
from runstate.server.openapi import openapi
from runstate.server.views import AdminKeyView, CreatedKeyView, RequestKeyView, SpaceRowView, SpacesView
from runstate.server.wire import HELD_CLAIM

from .test_wire import claims
from .test_wire_keys import keys
from .test_wire_scopes import pending, scopes
from .test_wire_tasks import tasks

_text = st.text(max_size=30)
_count = st.integers(0, 2**53)


def _components() -> dict[str, Any]:
    return openapi(Limits())["components"]["schemas"]


def scopes_before(view: ScopesView) -> bytes:
    return wire.dumps({"scopes": list(view.scopes), "truncated": view.truncated, "nextCursor": view.next_cursor})


def run_claims_before(view: RunClaimsView) -> bytes:
    listed = [HELD_CLAIM.encode(claim) for claim in view.claims]
    return wire.dumps({"scopeId": view.scope_id, "claims": listed, "truncated": view.truncated, "nextCursor": view.next_cursor})


def run_tasks_before(view: RunTasksView) -> bytes:
    return wire.dumps({"scopeId": view.scope_id, "tasks": list(view.tasks), "truncated": view.truncated, "nextCursor": view.next_cursor})


def caps_before(view: SpaceCapsView) -> bytes:
    """`caps.view` and the route's `pendingRemoval` as they were."""
    held = {"spaceId": view.space_id, "caps": [{"setting": cap.setting, "held": cap.held, "limit": cap.limit} for cap in view.caps]}
    return wire.dumps({**held, "pendingRemoval": view.pending_removal})


def created_key_before(view: ApiKeyView, secret: str) -> bytes:
    return wire.dumps({**wire.encode(view), "key": secret})


def request_key_before(view: ApiKeyView) -> bytes:
    return wire.dumps({**wire.encode(view), "admin": False})


ADMIN_KEY_BEFORE = orjson.dumps({"id": None, "name": None, "spaces": [], "createdAt": None, "revokedAt": None, "admin": True})


def spaces_before(view: SpacesView) -> bytes:
    rows = [
        {"id": row.id, "keys": row.keys, "runs": row.runs, "claimsLive": row.claims_live, "operations": row.operations}
        for row in view.spaces
    ]
    return wire.dumps({"spaces": rows})


_listed = st.booleans()
_cursor = st.none() | st.text(alphabet="ABCabc0123-_", min_size=1, max_size=20)
scope_listings = st.builds(ScopesView, st.lists(scopes(), max_size=4).map(tuple), _listed, _cursor)
claim_listings = st.builds(RunClaimsView, _text, st.lists(claims(), max_size=4).map(tuple), _listed, _cursor)
task_listings = st.builds(
    RunTasksView, _text, st.lists(tasks().filter(lambda view: type(view) is TaskView), max_size=4).map(tuple), _listed, _cursor,
)
space_caps = st.builds(
    SpaceCapsView, _text,
    st.tuples(*(st.builds(CapView, st.just(name), _count, _count) for name in SPACE_CAPS)), pending(),
)
key_listings = st.builds(ApiKeysView, st.lists(keys, max_size=4).map(tuple))
space_listings = st.builds(SpacesView, st.lists(st.builds(SpaceRowView, _text, _count, _count, _count, _count), max_size=4).map(tuple))

# (a strategy, its answer as it was, its component)
ANSWERS: list[tuple[Any, Any, str]] = [
    (scope_listings, scopes_before, "Scopes"),
    (claim_listings, run_claims_before, "RunClaims"),
    (task_listings, run_tasks_before, "RunTasks"),
    (space_caps, caps_before, "SpaceCaps"),
    (key_listings, lambda view: wire.dumps({"keys": list(view.keys)}), "ApiKeys"),
    (space_listings, spaces_before, "Spaces"),
]


@st.composite
def answers(draw: st.DrawFn) -> tuple[Any, bytes, str]:
    strategy, before, name = draw(st.sampled_from(ANSWERS))
    view = draw(strategy)
    return view, before(view), name


@settings(max_examples=200, deadline=None)
@given(answers())
def test_every_answer_encodes_to_the_bytes_read_before(answer: tuple[Any, bytes, str]) -> None:
    """Alone, in a batch's results, and as a history read carries it: the same bytes as before."""
    view, before, _ = answer
    assert wire.dumps(view) == before
    expected = orjson.loads(before)
    assert wire.dumps({"results": [{"status": 200, "body": view}]}) == orjson.dumps({"results": [{"status": 200, "body": expected}]})
    assert orjson.dumps(wire.encode(view)) == before


@settings(max_examples=150, deadline=None)
@given(answers())
def test_each_encoded_answer_validates_against_its_component(answer: tuple[Any, bytes, str]) -> None:
    view, before, name = answer
    component = _components()[name]
    body = orjson.loads(wire.dumps(view))
    jsonschema.validate(body, component)
    assert list(body) == list(component["properties"]) == component["required"]


@settings(max_examples=150, deadline=None)
@given(keys, _text)
def test_a_new_key_and_the_key_of_a_request_are_the_bytes_they_were(view: ApiKeyView, secret: str) -> None:
    created = CreatedKeyView(*view, key=secret)
    assert wire.dumps(created) == created_key_before(view, secret)
    jsonschema.validate(orjson.loads(wire.dumps(created)), _components()["ApiKey"])
    requested = RequestKeyView(*view, admin=False)
    assert wire.dumps(requested) == request_key_before(view)
    jsonschema.validate(orjson.loads(wire.dumps(requested)), _components()["RequestKey"])


def test_the_admin_key_of_a_request_is_the_bytes_it_was() -> None:
    admin = AdminKeyView(None, None, (), None, None, admin=True)
    assert wire.dumps(admin) == ADMIN_KEY_BEFORE
    jsonschema.validate(orjson.loads(ADMIN_KEY_BEFORE), _components()["RequestKey"])


def test_the_components_hold_the_entries_shapes_and_the_routes_refer_to_them() -> None:
    document = openapi(Limits())
    components = document["components"]["schemas"]
    assert components["Scopes"]["properties"]["scopes"]["items"] == components["Scope"]
    assert components["RunClaims"]["properties"]["claims"]["items"] == components["HeldClaim"]
    assert "token" not in components["HeldClaim"]["properties"]
    assert components["RunTasks"]["properties"]["tasks"]["items"] == components["Task"]
    assert components["SpaceCaps"]["properties"]["caps"]["items"] == {
        "type": "object",
        "properties": {"setting": {"type": "string"}, "held": {"type": "integer"}, "limit": {"type": "integer"}},
        "required": ["setting", "held", "limit"],
    }
    assert "retention" in components["SpaceCaps"]["properties"]["pendingRemoval"]["description"]
    # Registering a key answers its secret too, not required of the other answers of a key.
    assert "key" in components["ApiKey"]["properties"] and "key" not in components["ApiKey"]["required"]
    assert components["Spaces"]["properties"]["spaces"]["items"]["required"] == ["id", "keys", "runs", "claimsLive", "operations"]
    for path, method, name in (
        ("/v1/spaces/{space}/scopes", "get", "Scopes"),
        ("/v1/spaces/{space}/scopes/{scope_id}/claims", "get", "RunClaims"),
        ("/v1/spaces/{space}/scopes/{scope_id}/tasks", "get", "RunTasks"),
        ("/v1/spaces/{space}/caps", "get", "SpaceCaps"),
        ("/v1/admin/keys", "get", "ApiKeys"),
        ("/v1/admin/spaces", "get", "Spaces"),
        ("/v1/key", "get", "RequestKey"),
    ):
        answer = document["paths"][path][method]["responses"]["200"]
        assert answer["content"]["application/json"]["schema"] == {"$ref": f"#/components/schemas/{name}"}
