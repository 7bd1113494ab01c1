"""The wire shapes of once keys (`server/wire/once.py`): the bytes clients read, and the OpenAPI
component made from the same declaration.

The `*_before` functions are the answers as the kernel built them before its views were typed
(`OnceTable.view`, and the acquire's and the renewal's replies, kept here as they were written
then): every generated view must encode to exactly their bytes.
"""

from __future__ import annotations

from typing import Any

import jsonschema
import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from runstate.actors.limits import Limits
from runstate.actors.once import OnceAcquiredView, OnceHeldView, OnceRenewedView, OnceView
from runstate.actors.timestamps import format_ms
from runstate.server import wire
from runstate.server.openapi import openapi


def before(view: Any) -> dict[str, Any]:
    """Each answer as it was."""
    if isinstance(view, OnceAcquiredView):
        return {
            "state": "ACQUIRED", "token": view.token, "attempts": view.attempts,
            "leaseExpiresAt": format_ms(view.expires_ms), "leaseSeconds": view.lease_ms // 1000,
        }
    if isinstance(view, OnceRenewedView):
        return {"state": "HELD", "leaseExpiresAt": format_ms(view.expires_ms), "leaseSeconds": view.lease_ms // 1000}
    body: dict[str, Any] = {"state": view.state, "attempts": view.attempts, "result": view.result, "lastError": view.last_error}
    if isinstance(view, OnceHeldView):
        body.update(holder=view.holder, leaseExpiresAt=format_ms(view.expires_ms))
    return body


_text = st.text(max_size=40)
_instant = st.integers(min_value=0, max_value=253_402_300_799_999)
_json = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8,
)
_attempts = st.integers(0, 1000)
# A lease is asked in whole seconds.
_lease_ms = st.integers(1, 10**7).map(lambda seconds: seconds * 1000)
answers = (
    st.builds(OnceView, st.sampled_from(["OPEN", "DONE", "FAILED"]), _attempts, _json, st.none() | _text)
    | st.builds(OnceHeldView, st.just("HELD"), _attempts, _json, st.none() | _text, st.none() | _text, _instant)
    | st.builds(OnceAcquiredView, st.just("ACQUIRED"), _text, _attempts, _instant, _lease_ms)
    | st.builds(OnceRenewedView, st.just("HELD"), _instant, _lease_ms)
)


@settings(max_examples=200, deadline=None)
@given(answers)
def test_every_once_answer_encodes_to_the_bytes_the_clients_read_before(view: Any) -> None:
    assert wire.dumps(view) == orjson.dumps(before(view))
    assert orjson.dumps(wire.encode(view)) == orjson.dumps(before(view))
    assert wire.dumps({"results": [{"status": 200, "body": view}]}) == orjson.dumps({"results": [{"status": 200, "body": before(view)}]})


@settings(max_examples=100, deadline=None)
@given(answers)
def test_each_encoded_once_answer_validates_against_the_component(view: Any) -> None:
    component = openapi(Limits())["components"]["schemas"]["Once"]
    body = orjson.loads(wire.dumps(view))
    jsonschema.validate(body, component)
    assert set(body) <= set(component["properties"])


def test_the_once_component_lists_exactly_the_encoders_fields_with_their_json_types() -> None:
    component = openapi(Limits())["components"]["schemas"]["Once"]
    assert component["required"] == ["state"]
    assert component["properties"] == {
        "state": {"type": "string", "enum": ["ACQUIRED", "OPEN", "HELD", "DONE", "FAILED"]},
        "attempts": {"type": "integer"},
        "result": {"description": "any JSON value"},
        "lastError": {"type": ["string", "null"]},
        "holder": {"type": ["string", "null"]},
        "leaseExpiresAt": wire.TIMESTAMP,
        "token": {"type": "string"},
        "leaseSeconds": {"type": "integer"},
    }
