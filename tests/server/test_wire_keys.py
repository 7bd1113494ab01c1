"""The wire shape of API keys (`server/wire/keys.py`): the bytes the admin routes answer, and the
OpenAPI component made from the same declaration.

`key_before` is the view as the kernel built it before it was typed (`keys.key_view`, kept here as
it was written then): every generated view must encode to exactly its bytes.
"""

from __future__ import annotations

from typing import Any

import jsonschema
import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from runstate.actors.keys import ApiKeyView
from runstate.actors.limits import Limits
from runstate.actors.timestamps import format_ms
from runstate.server import wire
from runstate.server.openapi import openapi
from runstate.server.wire.keys import API_KEY


def key_before(view: ApiKeyView) -> dict[str, Any]:
    """`key_view` as it was (the spaces sorted, as the view keeps them)."""
    return {
        "id": view.id,
        "name": view.name,
        "spaces": sorted(view.spaces),
        "role": view.role,
        "createdAt": format_ms(view.created_ms),
        "revokedAt": None if view.revoked_ms is None else format_ms(view.revoked_ms),
    }


_text = st.text(max_size=30)
_instant = st.integers(0, 253_402_300_799_999)
keys = st.builds(
    ApiKeyView, _text, st.none() | _text, st.lists(_text, max_size=5, unique=True).map(lambda spaces: tuple(sorted(spaces))),
    st.sampled_from(["editor", "viewer"]), _instant, st.none() | _instant,
)


@settings(max_examples=150, deadline=None)
@given(keys, _text)
def test_every_key_encodes_to_the_bytes_the_admin_routes_answered_before(view: ApiKeyView, secret: str) -> None:
    before = key_before(view)
    assert wire.dumps(view) == orjson.dumps(before)
    assert wire.dumps({"keys": [view]}) == orjson.dumps({"keys": [before]})
    # Registering answers the secret after the view's fields.
    assert orjson.dumps({**wire.encode(view), "key": secret}) == orjson.dumps({**before, "key": secret})


@settings(max_examples=100, deadline=None)
@given(keys)
def test_each_encoded_key_validates_against_the_component(view: ApiKeyView) -> None:
    component = openapi(Limits())["components"]["schemas"]["ApiKey"]
    body = orjson.loads(wire.dumps(view))
    jsonschema.validate(body, component)
    jsonschema.validate({**body, "key": "rs_x"}, component)
    assert list(body) == component["required"]


def test_the_key_component_lists_exactly_the_encoders_fields_with_their_json_types() -> None:
    component = openapi(Limits())["components"]["schemas"]["ApiKey"]
    assert [field.name for field in API_KEY.fields] == component["required"]
    assert component["properties"] == {
        "id": {"type": "string"}, "name": {"type": ["string", "null"]}, "spaces": {"type": "array", "items": {"type": "string"}},
        "role": {"type": "string", "enum": ["editor", "viewer"], "description": "editor: reads and changes; viewer: reads only"},
        "createdAt": wire.TIMESTAMP, "revokedAt": wire.nullable(wire.TIMESTAMP),
        "key": {"type": "string", "description": "the new key's secret: shown in this answer only"},
    }
