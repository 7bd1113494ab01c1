"""The wire shape of barriers (`server/wire/barriers.py`): the bytes clients read, and the OpenAPI
component made from the same declaration.

`barrier_before` is the answer as the kernel built it before its views were typed
(`BarrierTable.view`, kept here as it was written then): every generated view must encode to
exactly its bytes.
"""

from __future__ import annotations

from typing import Any

import jsonschema
import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from runstate.actors.barriers import BarrierView
from runstate.actors.limits import Limits
from runstate.actors.timestamps import format_ms
from runstate.server import wire
from runstate.server.openapi import openapi
from runstate.server.wire.barriers import BARRIER


def barrier_before(view: BarrierView) -> dict[str, Any]:
    """`BarrierTable.view` as it was (a released barrier's end is its `releasedAt`)."""
    return {
        "id": view.id,
        "scopeId": view.scope_id,
        "name": view.name,
        "state": view.state,
        "epoch": view.epoch,
        "target": view.target,
        "arrived": view.arrived,
        "createdAt": format_ms(view.created_ms),
        "releasedAt": format_ms(view.released_ms) if view.released_ms is not None else None,
    }


_text = st.text(max_size=40)
_instant = st.integers(min_value=0, max_value=253_402_300_799_999)
barriers = st.builds(
    BarrierView, _text, _text, st.none() | _text, st.sampled_from(["OPEN", "RELEASED", "CANCELLED"]), st.integers(1, 2**31),
    st.integers(1, 2**31), st.integers(0, 2**31), _instant, st.none() | _instant,
)


@settings(max_examples=150, deadline=None)
@given(barriers)
def test_every_barrier_encodes_to_the_bytes_the_clients_read_before(view: BarrierView) -> None:
    before = barrier_before(view)
    assert wire.dumps(view) == orjson.dumps(before)
    assert wire.dumps({"scopeId": "r", "barriers": [view]}) == orjson.dumps({"scopeId": "r", "barriers": [before]})
    assert orjson.dumps(wire.encode(view)) == orjson.dumps(before)


@settings(max_examples=100, deadline=None)
@given(barriers)
def test_each_encoded_barrier_validates_against_the_component(view: BarrierView) -> None:
    component = openapi(Limits())["components"]["schemas"]["Barrier"]
    body = orjson.loads(wire.dumps(view))
    jsonschema.validate(body, component)
    assert list(body) == list(component["properties"]) == component["required"]


def test_the_barrier_component_lists_exactly_the_encoders_fields_with_their_json_types() -> None:
    component = openapi(Limits())["components"]["schemas"]["Barrier"]
    assert [field.name for field in BARRIER.fields] == component["required"]
    assert component["properties"] == {
        "id": {"type": "string"}, "scopeId": {"type": "string"}, "name": {"type": ["string", "null"]},
        "state": {"type": "string", "enum": ["OPEN", "RELEASED", "CANCELLED"]}, "epoch": {"type": "integer"},
        "target": {"type": "integer"}, "arrived": {"type": "integer"}, "createdAt": wire.TIMESTAMP,
        "releasedAt": wire.nullable(wire.TIMESTAMP),
    }
