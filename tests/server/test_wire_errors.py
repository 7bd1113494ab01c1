"""The wire shapes of the error envelope, `/healthz`'s answer and a space's usage (`server/wire/`
`errors.py`, `health.py`, `usage.py`): the bytes clients read, and the OpenAPI components made from
the same declaration (the last three `openapi.py` wrote by hand).

`envelope_before`, `health_before` and `usage_before` are the answers as the server built them
before they were typed views (dicts, kept here as they were written then): every generated value
must encode to exactly their bytes.
"""

from __future__ import annotations

from typing import Any

import jsonschema
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runstate.actors.claims import ClaimHeldView
from runstate.actors.errors import CLAIM_HELD, KernelError
from runstate.actors.limits import Limits
from runstate.actors.usage import UsageView
from runstate.server import wire
from runstate.server.errors import envelope, status_of
from runstate.server.openapi import openapi
from runstate.server.views import ErrorEnvelopeView, ErrorView, HealthView


def envelope_before(error: KernelError, request_id: str) -> bytes:
    """`errors.envelope`'s body as it was: details only where there are some."""
    body: dict[str, Any] = {"code": error.code, "message": error.message, "requestId": request_id}
    if error.details:
        body["details"] = error.details
    return wire.dumps({"error": body})


def usage_before(view: UsageView) -> dict[str, Any]:
    """`Usage.view` as it was."""
    return {"spaceId": view.space_id, "operations": view.operations, "total": view.total, "free": view.free, "events": view.events}


_text = st.text(max_size=40)
_instant = st.integers(min_value=0, max_value=253_402_300_799_999)
_json = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | _text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_text, inner, max_size=3),
    max_leaves=8,
)
# A refusal's details: none, an empty object (left out as none), an object, or a typed view.
_details = st.one_of(
    st.none(), st.just({}), st.dictionaries(_text, _json, min_size=1, max_size=4),
    st.builds(ClaimHeldView, st.none() | _text, st.integers(1, 2**63 - 1), _instant),
)
errors = st.builds(
    KernelError, st.sampled_from([CLAIM_HELD, "NOT_FOUND", "VALIDATION_FAILED", "UNAVAILABLE", "SOMETHING_NEW"]), _text,
    details=_details, retry_after_s=st.none() | st.floats(0, 10**6),
)
_counts = st.dictionaries(_text, st.integers(0, 2**63 - 1), max_size=4).map(lambda counts: dict(sorted(counts.items())))
usages = st.builds(UsageView, _text, _counts, st.integers(0, 2**63 - 1), _counts, _counts)


def _components() -> dict[str, Any]:
    return openapi(Limits())["components"]["schemas"]


@settings(max_examples=150, deadline=None)
@given(errors, _text)
def test_every_refusal_is_the_envelope_it_was(error: KernelError, request_id: str) -> None:
    """The envelope, its status and its headers: the same as when it was built as a dict; details
    left out where there are none (or an empty object), written as they are otherwise."""
    status, body, headers = envelope(error, request_id)
    assert body == envelope_before(error, request_id)
    assert (status, "retry-after" in headers) == (status_of(error.code), error.retry_after_s is not None)
    # An operation's refusal in a batch's results: the envelope's `error`, written by the same shape.
    inner = orjson.loads(envelope_before(error, request_id))["error"]
    refused = ErrorView(error.code, error.message, request_id, error.details or None)
    assert wire.dumps({"results": [{"status": status, "error": refused}]}) == orjson.dumps({"results": [{"status": status, "error": inner}]})
    written = orjson.loads(body)
    jsonschema.validate(written, _components()["Error"])
    assert ("details" in written["error"]) is bool(error.details)


@settings(max_examples=150, deadline=None)
@given(usages)
def test_every_usage_view_encodes_to_the_bytes_read_before(view: UsageView) -> None:
    before = usage_before(view)
    assert wire.dumps(view) == orjson.dumps(before)
    assert orjson.dumps(wire.encode(view)) == orjson.dumps(before)
    jsonschema.validate(orjson.loads(wire.dumps(view)), _components()["Usage"])


def test_the_health_answers_are_the_bytes_they_were() -> None:
    for status in ("ok", "live"):
        assert wire.dumps(HealthView(status)) == orjson.dumps({"status": status})  # type: ignore[arg-type]
        jsonschema.validate({"status": status}, _components()["Health"])
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"status": "ready"}, _components()["Health"])


def test_the_components_list_exactly_the_encoders_fields_with_their_json_types() -> None:
    """As `openapi.py` wrote them by hand: `details` a free object, not required; the usage's
    counters objects of integers; the health's status one of two words."""
    components = _components()
    text = {"type": "string"}
    assert components["Error"] == {
        "type": "object",
        "properties": {"error": {
            "type": "object",
            "properties": {"code": text, "message": text, "requestId": text, "details": {"type": "object"}},
            "required": ["code", "message", "requestId"],
        }},
        "required": ["error"],
    }
    counts = {"type": "object", "additionalProperties": {"type": "integer"}}
    assert components["Usage"] == {
        "type": "object",
        "properties": {"spaceId": text, "operations": counts, "total": {"type": "integer"}, "free": counts, "events": counts},
        "required": ["spaceId", "operations", "total", "free", "events"],
    }
    assert components["Health"] == {
        "type": "object", "properties": {"status": {"type": "string", "enum": ["ok", "live"]}}, "required": ["status"],
    }
    assert wire.encode(ErrorEnvelopeView(ErrorView("NOT_FOUND", "m", "req_1"))) == {
        "error": {"code": "NOT_FOUND", "message": "m", "requestId": "req_1"},
    }
