"""The wire shapes of a run's barriers, timers and task groups (`/scopes/{scope_id}/barriers`,
`/timers`, `/groups`): the bytes clients read, and the OpenAPI components made from the same
declaration.

`listing_before` is the answer as the kernel built it before the listing was a typed view (a
camelCase dict around the kind's views, kept here as it was written then), each entry as its own
`*_before` writes it: every generated listing must encode to exactly its bytes.
"""

from __future__ import annotations

from typing import Any, Callable

import jsonschema
import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from runstate.actors.coordination_reads import RunBarriersView, RunGroupsView, RunTimersView
from runstate.actors.limits import Limits
from runstate.server import wire
from runstate.server.openapi import openapi

from .test_wire_barriers import barrier_before, barriers
from .test_wire_groups import group_before, groups
from .test_wire_timers import timer_before, timers

# (the listing's view, its entries' strategy, the kind's name on the wire, an entry as it was, its component)
KINDS: list[tuple[type, Any, str, Callable[[Any], dict[str, Any]], str]] = [
    (RunBarriersView, barriers, "barriers", barrier_before, "RunBarriers"),
    (RunTimersView, timers, "timers", timer_before, "RunTimers"),
    (RunGroupsView, groups(), "groups", group_before, "RunGroups"),
]


def listing_before(view: Any, what: str, before: Callable[[Any], dict[str, Any]]) -> dict[str, Any]:
    """`coordination_reads.in_scope` as it was."""
    return {
        "scopeId": view.scope_id, what: [before(entry) for entry in getattr(view, what)], "truncated": view.truncated,
        "nextCursor": view.next_cursor,
    }


@st.composite
def listings(draw: st.DrawFn) -> tuple[Any, str, Callable[[Any], dict[str, Any]], str]:
    view, entries, what, before, name = draw(st.sampled_from(KINDS))
    listed = draw(st.lists(entries, max_size=4).map(tuple))
    cursor = draw(st.none() | st.text(alphabet="ABCabc0123-_", min_size=1, max_size=20))
    return view(draw(st.text(max_size=40)), listed, draw(st.booleans()), cursor), what, before, name


@settings(max_examples=150, deadline=None)
@given(listings())
def test_every_run_listing_encodes_to_the_bytes_read_before(listing: tuple[Any, str, Any, str]) -> None:
    """Alone, in a batch's results, and as the idempotency table keeps it: the same bytes as before."""
    view, what, before, _ = listing
    expected = listing_before(view, what, before)
    assert wire.dumps(view) == orjson.dumps(expected)
    assert wire.dumps({"results": [{"status": 200, "body": view}]}) == orjson.dumps({"results": [{"status": 200, "body": expected}]})
    assert orjson.dumps(wire.encode(view)) == orjson.dumps(expected)


@settings(max_examples=100, deadline=None)
@given(listings())
def test_each_encoded_listing_validates_against_its_component(listing: tuple[Any, str, Any, str]) -> None:
    view, what, _, name = listing
    component = openapi(Limits())["components"]["schemas"][name]
    body = orjson.loads(wire.dumps(view))
    jsonschema.validate(body, component)
    assert list(body) == list(component["properties"]) == component["required"] == ["scopeId", what, "truncated", "nextCursor"]


def test_the_listing_components_hold_their_kinds_components_and_the_routes_refer_to_them() -> None:
    """Each listing's entries are its kind's component, as the encoder writes one; each route's
    answer is the listing's component."""
    document = openapi(Limits())
    components = document["components"]["schemas"]
    for _, _, what, _, name in KINDS:
        kind = {"barriers": "Barrier", "timers": "Timer", "groups": "TaskGroup"}[what]
        assert components[name]["properties"] == {
            "scopeId": {"type": "string"}, what: {"type": "array", "items": components[kind]}, "truncated": {"type": "boolean"},
            "nextCursor": {"type": ["string", "null"]},
        }
        answer = document["paths"]["/v1/spaces/{space}/scopes/{scope_id}/" + what]["get"]["responses"]["200"]
        assert answer["content"]["application/json"]["schema"] == {"$ref": f"#/components/schemas/{name}"}
