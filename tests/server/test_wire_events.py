"""The wire shapes of the event log (`server/wire/events.py`): the bytes clients read, and the
OpenAPI components made from the same declaration.

`event_before` and `page_before` are the answers as the kernel built them before its views were
typed (`Event.view` and `events.page`, kept here as they were written then): every generated view
must encode to exactly their bytes.
"""

from __future__ import annotations

from typing import Any

import jsonschema
import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from runstate.actors.events import AggregateView, EventPageView, EventView
from runstate.actors.limits import Limits
from runstate.actors.timestamps import format_ms
from runstate.server import wire
from runstate.server.openapi import openapi
from runstate.server.wire.events import EVENT, EVENT_PAGE


def event_before(seq: int, view: EventView) -> dict[str, Any]:
    """`Event.view` as it was (from the event's own values)."""
    return {
        "eventId": f"ev_{seq}",
        "type": view.type,
        "createdAt": format_ms(view.created_ms),
        "scopeId": view.scope_id,
        "aggregate": {"type": view.aggregate.type, "id": view.aggregate.id},
        "payload": view.payload,
    }


def page_before(page: EventPageView, seqs: list[int]) -> dict[str, Any]:
    return {"events": [event_before(seq, event) for seq, event in zip(seqs, page.events)], "nextCursor": page.next_cursor}


_text = st.text(max_size=30)
_value = st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | _text
_payload = st.dictionaries(_text, _value | st.lists(_value, max_size=3), max_size=5)


@st.composite
def events(draw: st.DrawFn) -> tuple[int, EventView]:
    seq = draw(st.integers(1, 2**53))
    view = EventView(
        f"ev_{seq}", draw(_text), draw(st.integers(0, 253_402_300_799_999)), draw(st.none() | _text),
        AggregateView(draw(_text), draw(_text)), draw(_payload),
    )
    return seq, view


@settings(max_examples=150, deadline=None)
@given(st.lists(events(), max_size=5), st.integers(0, 2**53))
def test_every_event_and_page_encodes_to_the_bytes_the_clients_read_before(found: list[tuple[int, EventView]], cursor: int) -> None:
    seqs = [seq for seq, _ in found]
    page = EventPageView(tuple(event for _, event in found), str(cursor))
    assert wire.dumps(page) == orjson.dumps(page_before(page, seqs))
    assert orjson.dumps(wire.encode(page)) == orjson.dumps(page_before(page, seqs))
    for seq, event in found:
        assert wire.dumps(event) == orjson.dumps(event_before(seq, event))


@settings(max_examples=100, deadline=None)
@given(st.lists(events(), max_size=5))
def test_each_encoded_page_validates_against_the_components(found: list[tuple[int, EventView]]) -> None:
    components = openapi(Limits())["components"]["schemas"]
    page = orjson.loads(wire.dumps(EventPageView(tuple(event for _, event in found), "7")))
    resolver = {"components": {"schemas": components}, **components["EventPage"]}
    jsonschema.validate(page, resolver)
    for event in page["events"]:
        jsonschema.validate(event, components["Event"])
        assert list(event) == list(components["Event"]["properties"]) == components["Event"]["required"]


def test_the_event_components_list_exactly_the_encoders_fields_with_their_json_types() -> None:
    components = openapi(Limits())["components"]["schemas"]
    event = components["Event"]
    assert [field.name for field in EVENT.fields] == event["required"]
    assert event["properties"] == {
        "eventId": {"type": "string"}, "type": {"type": "string"}, "createdAt": wire.TIMESTAMP,
        "scopeId": {"type": ["string", "null"]},
        "aggregate": {"type": "object", "properties": {"type": {"type": "string"}, "id": {"type": "string"}}, "required": ["type", "id"]},
        "payload": {"type": "object", "description": "the event's values, named by its type"},
    }
    page = components["EventPage"]
    assert [field.name for field in EVENT_PAGE.fields] == page["required"] == ["events", "nextCursor"]
    assert page["properties"]["events"] == {"type": "array", "items": {"$ref": "#/components/schemas/Event"}}
