"""The wire shapes of scopes and runs (`server/wire/scopes.py`): the bytes clients read, and the
OpenAPI component made from the same declaration.

`scope_before` and `pending_before` are the answers as the kernel built them before its views were
typed (`ScopeTree.view` and `runs.pending_removal`, kept here as they were written then): every
generated view must encode to exactly their bytes, field order too.
"""

from __future__ import annotations

from typing import Any

import jsonschema
import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from runstate.actors.limits import Limits
from runstate.actors.runs import PendingRemovalView
from runstate.actors.scopes import ScopeView
from runstate.actors.timestamps import format_ms
from runstate.server import wire
from runstate.server.openapi import openapi
from runstate.server.wire.scopes import PENDING_REMOVAL, SCOPE


def scope_before(view: ScopeView) -> dict[str, Any]:
    """`ScopeTree.view` as it was (the scope's own fields read from the view)."""
    return {
        "id": view.id,
        "name": view.name,
        "parentId": view.parent_id,
        "deadline": None if view.deadline_ms is None else format_ms(view.deadline_ms),
        "childLimit": view.child_limit,
        "children": view.children,
        "storedState": view.stored_state,
        "effective": view.effective,
        "createdAt": format_ms(view.created_ms),
        "endedAt": None if view.ended_ms is None else format_ms(view.ended_ms),
    }


def pending_before(view: PendingRemovalView) -> dict[str, Any]:
    """`runs.pending_removal`'s answer as it was (`next_ms` 0 when nothing is due)."""
    next_ms = view.next_removal_ms or 0
    return {
        "endedRunRetentionSeconds": view.ended_run_retention_ms // 1000,
        "runs": view.runs,
        "scopes": view.scopes,
        "tasks": view.tasks,
        "messages": view.messages,
        "nextRemovalAt": format_ms(next_ms) if next_ms else None,
        "overdueRuns": view.overdue_runs,
    }


_text = st.text(max_size=40)
_maybe_text = st.none() | _text
_instant = st.integers(min_value=0, max_value=253_402_300_799_999)
_count = st.integers(min_value=0, max_value=2**31)
_state = st.sampled_from(["ACTIVE", "CANCELLED", "COMPLETED", "EXPIRED"])


@st.composite
def scopes(draw: st.DrawFn) -> ScopeView:
    return ScopeView(
        draw(_text), draw(_maybe_text), draw(_maybe_text), draw(st.none() | _instant), draw(st.none() | _count), draw(_count),
        draw(_state), draw(_state), draw(_instant), draw(st.none() | _instant),
    )


@st.composite
def pending(draw: st.DrawFn) -> PendingRemovalView:
    # The retention is set in whole seconds (`ended_run_retention_s`).
    retention_ms = draw(st.integers(min_value=0, max_value=10**9)) * 1000
    return PendingRemovalView(
        retention_ms, draw(_count), draw(_count), draw(_count), draw(_count), draw(st.none() | st.integers(1, 253_402_300_799_999)),
        draw(_count),
    )


@settings(max_examples=150, deadline=None)
@given(scopes())
def test_every_scope_encodes_to_the_bytes_the_clients_read_before(view: ScopeView) -> None:
    """Alone, in a listing and as the idempotency table keeps it: the same bytes as before."""
    before = scope_before(view)
    assert wire.dumps(view) == orjson.dumps(before)
    assert wire.dumps({"scopes": [view], "truncated": False, "nextCursor": None}) == orjson.dumps(
        {"scopes": [before], "truncated": False, "nextCursor": None}
    )
    assert orjson.dumps(wire.encode(view)) == orjson.dumps(before)


@settings(max_examples=100, deadline=None)
@given(pending())
def test_what_is_pending_removal_encodes_to_the_bytes_it_had(view: PendingRemovalView) -> None:
    before = pending_before(view)
    assert wire.dumps({"spaceId": "s", "pendingRemoval": view}) == orjson.dumps({"spaceId": "s", "pendingRemoval": before})


@settings(max_examples=100, deadline=None)
@given(scopes(), pending())
def test_each_encoded_view_validates_against_its_documented_schema(scope: ScopeView, removal: PendingRemovalView) -> None:
    component = openapi(Limits())["components"]["schemas"]["Scope"]
    body = orjson.loads(wire.dumps(scope))
    jsonschema.validate(body, component)
    assert list(body) == list(component["properties"]) == component["required"]
    written = orjson.loads(wire.dumps(removal))
    caps = openapi(Limits())["components"]["schemas"]["SpaceCaps"]
    jsonschema.validate(written, caps["properties"]["pendingRemoval"])
    assert list(written) == list(caps["properties"]["pendingRemoval"]["properties"])


def test_the_scope_component_lists_exactly_the_encoders_fields_with_their_json_types() -> None:
    states = {"type": "string", "enum": ["ACTIVE", "CANCELLED", "COMPLETED", "EXPIRED"]}
    schema = openapi(Limits())["components"]["schemas"]["Scope"]
    assert [field.name for field in SCOPE.fields] == schema["required"]
    assert schema["properties"] == {
        "id": {"type": "string"},
        "name": {"type": ["string", "null"]},
        "parentId": {"type": ["string", "null"]},
        "deadline": wire.nullable(wire.TIMESTAMP),
        "childLimit": {"type": ["integer", "null"]},
        "children": {"type": "integer"},
        "storedState": states,
        "effective": states,
        "createdAt": wire.TIMESTAMP,
        "endedAt": wire.nullable(wire.TIMESTAMP),
    }
    removal = openapi(Limits())["components"]["schemas"]["SpaceCaps"]["properties"]["pendingRemoval"]
    assert [field.name for field in PENDING_REMOVAL.fields] == removal["required"]
    assert removal["properties"]["nextRemovalAt"] == wire.nullable(wire.TIMESTAMP)
    assert removal["properties"]["endedRunRetentionSeconds"] == {"type": "integer"}
