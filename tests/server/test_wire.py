"""The wire shapes of the kernel's typed views (`server/wire/`): the bytes clients read, and the
OpenAPI components made from the same declaration.

The official clients 0.2.0 and 0.3.0 parse a claim's answer as the server wrote it before the
kernel answered with typed views: `wire_before` below is that shape, kept here as it was written
then (a dict built by hand, with `update` for a release), and every generated claim must encode to
exactly its bytes.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Literal, NamedTuple

import jsonschema
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runstate.actors.claims import ClaimHeldView, ClaimView, ForceReleasedClaimView, ReleasedClaimView
from runstate.actors.errors import CLAIM_HELD, KernelError
from runstate.actors.limits import Limits
from runstate.actors.shapes import DurationMs, EpochMs, Json
from runstate.actors.timestamps import format_ms
from runstate.server import wire
from runstate.server.errors import envelope
from runstate.server.openapi import openapi


def wire_before(view: Any) -> dict[str, Any]:
    """A claim's answer as the kernel built it before its views were typed (`ClaimTable.view`,
    then the release's and the forced release's `reply.update`)."""
    body = {
        "key": view.key,
        "scopeId": view.scope_id,
        "token": view.token,
        "generation": view.generation,
        "holder": view.holder,
        "holderSession": view.session,
        "leaseSeconds": view.lease_ms // 1000,
        "leaseExpiresAt": format_ms(view.expires_ms),
        "acquiredAt": format_ms(view.acquired_ms),
    }
    if isinstance(view, (ReleasedClaimView, ForceReleasedClaimView)):
        body.update(token=None, released=True, releasedAt=format_ms(view.released_ms))
    if isinstance(view, ForceReleasedClaimView):
        body.update(forced=True, reason=view.reason, by=view.by)
    return body


# Any text a request may carry (holders, sessions, keys: unicode, quotes, controls, escapes).
_text = st.text(max_size=40)
_maybe_text = st.none() | _text
# Wall milliseconds from 1970 to 9999 (the timestamp format has four digits of year).
_instant = st.integers(min_value=0, max_value=253_402_300_799_999)
# A lease's length: whole seconds as asked, or any length a restart's grace may leave.
_lease_ms = st.integers(min_value=1, max_value=10**12)


@st.composite
def claims(draw: st.DrawFn) -> ClaimView:
    fields = dict(
        key=draw(_text), scope_id=draw(_text), token=draw(_maybe_text), generation=draw(st.integers(1, 2**63 - 1)),
        holder=draw(_maybe_text), session=draw(_maybe_text), lease_ms=draw(_lease_ms), expires_ms=draw(_instant),
        acquired_ms=draw(_instant),
    )
    kind = draw(st.sampled_from([ClaimView, ReleasedClaimView, ForceReleasedClaimView]))
    if kind is ClaimView:
        return ClaimView(**fields)
    fields.update(token=None, released=True, released_ms=draw(_instant))
    if kind is ReleasedClaimView:
        return ReleasedClaimView(**fields)
    return ForceReleasedClaimView(**fields, forced=True, reason=draw(_maybe_text), by=draw(_maybe_text))


@settings(max_examples=200, deadline=None)
@given(claims())
def test_every_claim_encodes_to_the_bytes_the_clients_read_before(view: ClaimView) -> None:
    """Alone, in a list and inside an object (a batch's results), and as the idempotency table
    keeps it (`encode`, then written by orjson alone): the same bytes as before, field order too."""
    before = wire_before(view)
    assert wire.dumps(view) == orjson.dumps(before)
    assert wire.dumps({"results": [{"status": 200, "body": view}]}) == orjson.dumps({"results": [{"status": 200, "body": before}]})
    assert orjson.dumps(wire.encode(view)) == orjson.dumps(before)
    if type(view) is ClaimView:  # a run's listing: held claims, tokens withheld
        listed = dict(before)
        del listed["token"]
        assert orjson.dumps(wire.HELD_CLAIM.encode(view)) == orjson.dumps(listed)


@settings(max_examples=100, deadline=None)
@given(_maybe_text, st.integers(1, 2**63 - 1), _instant, st.floats(0, 10**6))
def test_a_claim_held_refusal_carries_the_details_it_carried_before(holder, generation, expires_ms, retry_after_s) -> None:
    """CLAIM_HELD's envelope, status and Retry-After included, is the same bytes as when the kernel
    wrote its details as a JSON object."""
    message = f"claim 'k' is held by {holder}"
    typed = KernelError(CLAIM_HELD, message, details=ClaimHeldView(holder, generation, expires_ms), retry_after_s=retry_after_s)
    before = KernelError(
        CLAIM_HELD, message, details={"holder": holder, "generation": generation, "leaseExpiresAt": format_ms(expires_ms)},
        retry_after_s=retry_after_s,
    )
    assert envelope(typed, "req_1") == envelope(before, "req_1")


def test_a_view_without_a_wire_shape_is_refused_not_written_as_its_fields() -> None:
    """orjson would write any dataclass as its snake-case fields: a view nobody declared must fail
    loudly instead of reaching a client in a shape no client reads."""

    @dataclasses.dataclass(frozen=True, slots=True)
    class Undeclared:
        scope_id: str

    with pytest.raises(TypeError) as caught:  # (orjson's JSONEncodeError, a TypeError, from ours)
        wire.dumps({"x": Undeclared("s")})
    assert "Undeclared has no wire shape" in str(caught.value.__cause__)
    assert wire.encode({"already": "json"}) == {"already": "json"}


def _components() -> dict[str, Any]:
    return openapi(Limits())["components"]["schemas"]


@settings(max_examples=100, deadline=None)
@given(claims())
def test_each_encoded_claim_validates_against_the_documented_component(view: ClaimView) -> None:
    """What the encoder writes is what the document says: every field documented with its JSON
    type, and every required one there (open to more, as every component is)."""
    components = _components()
    body = orjson.loads(wire.dumps(view))
    schema = components["Claim"]
    jsonschema.validate(body, schema)
    assert set(body) <= set(schema["properties"]) and set(schema["required"]) <= set(body)
    if type(view) is ClaimView:
        listed = orjson.loads(orjson.dumps(wire.HELD_CLAIM.encode(view)))
        jsonschema.validate(listed, components["HeldClaim"])
        assert set(listed) == set(components["HeldClaim"]["properties"]) == set(components["HeldClaim"]["required"])


def test_the_claim_component_lists_exactly_the_encoders_fields_with_their_json_types() -> None:
    """The component is the union of what the three claim answers write (acquire and renew,
    release, forced release), required where all three write it; each type is the view field's."""
    schema = _components()["Claim"]
    shapes = (wire.CLAIM, wire.RELEASED_CLAIM, wire.FORCE_RELEASED_CLAIM)
    written = [[field.name for field in shape.fields] for shape in shapes]
    assert list(schema["properties"]) == list(dict.fromkeys(name for names in written for name in names))
    assert schema["required"] == written[0]
    assert schema["properties"] == {
        "key": {"type": "string"},
        "scopeId": {"type": "string"},
        "token": {"type": ["string", "null"]},
        "generation": {"type": "integer"},
        "holder": {"type": ["string", "null"]},
        "holderSession": {"type": ["string", "null"]},
        "leaseSeconds": {"type": "integer"},
        "leaseExpiresAt": wire.TIMESTAMP,
        "acquiredAt": wire.TIMESTAMP,
        "released": {"type": "boolean"},
        "releasedAt": wire.TIMESTAMP,
        "forced": {"type": "boolean"},
        "reason": {"type": ["string", "null"]},
        "by": {"type": ["string", "null"]},
    }
    # A run's listing writes each claim by the listed shape, which withholds the token.
    listing = openapi(Limits())["paths"]["/v1/spaces/{space}/scopes/{scope_id}/claims"]["get"]
    assert listing["responses"]["200"]["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/RunClaims"}
    assert _components()["RunClaims"]["properties"]["claims"]["items"] == _components()["HeldClaim"]
    assert list(_components()["HeldClaim"]["properties"]) == [name for name in written[0] if name != "token"]


def test_the_naming_rule_and_its_exceptions() -> None:
    """camelCase by default; an instant `x_ms` is the timestamp `xAt`; a declared exception wins."""

    @dataclasses.dataclass(frozen=True, slots=True)
    class Sample:
        scope_id: str
        created_ms: EpochMs
        ended_ms: EpochMs | None
        wait_ms: DurationMs

    shape = wire.Shape(Sample, rename={"scope_id": "runId"})
    assert [field.name for field in shape.fields] == ["runId", "createdAt", "endedAt", "waitMs"]
    assert shape.encode(Sample("r", 0, None, 1500)) == {
        "runId": "r", "createdAt": "1970-01-01T00:00:00.000Z", "endedAt": None, "waitMs": 1500,
    }
    assert shape.schema()["properties"]["endedAt"] == wire.nullable(wire.TIMESTAMP)
    with pytest.raises(AssertionError, match="whole seconds"):
        wire.Shape(Sample, seconds={"created_ms": "createdSeconds"})


@dataclasses.dataclass(frozen=True, slots=True)
class Waiting:
    on: str
    since_ms: EpochMs
    holders: tuple[str, ...] | None = None
    until_ms: EpochMs | None = None


_WAITING = wire.Shape(Waiting, present=("holders", "until_ms"))


def test_a_field_written_only_when_present() -> None:
    """A field declared `present` is left out where the view has None (not written as null), and
    written after the others, converted as always, where it has a value; the schema lists it with
    its value's type, not null, and does not require it. A shape without such fields compiles to
    the one dict display it always did (no local but the view: nothing tested per field)."""
    shape = _WAITING
    assert [(field.name, field.present) for field in shape.fields] == [
        ("on", False), ("sinceAt", False), ("holders", True), ("untilAt", True),
    ]
    assert orjson.dumps(shape.encode(Waiting("queue", 0))) == b'{"on":"queue","sinceAt":"1970-01-01T00:00:00.000Z"}'
    assert orjson.dumps(shape.encode(Waiting("queue", 0, ("a", "b"), 1000))) == (
        b'{"on":"queue","sinceAt":"1970-01-01T00:00:00.000Z","holders":["a","b"],"untilAt":"1970-01-01T00:00:01.000Z"}'
    )
    assert shape.encode(Waiting("queue", 0, until_ms=1)) == {
        "on": "queue", "sinceAt": "1970-01-01T00:00:00.000Z", "untilAt": "1970-01-01T00:00:00.001Z",
    }
    assert shape.encode(Waiting("queue", 0, ())) == {"on": "queue", "sinceAt": "1970-01-01T00:00:00.000Z", "holders": []}
    schema = shape.schema()
    assert schema["required"] == ["on", "sinceAt"]
    assert schema["properties"]["holders"] == {"type": "array", "items": {"type": "string"}}
    assert schema["properties"]["untilAt"] == wire.TIMESTAMP
    for written in (shape.encode(Waiting("q", 5)), shape.encode(Waiting("q", 5, ("h",), 6))):
        jsonschema.validate(written, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**shape.encode(Waiting("q", 5)), "holders": None}, schema)
    # Required where every shape of a component writes it always; never where one writes it only when present.
    always = wire.Shape(Waiting, primary=False)
    assert always.encode(Waiting("q", 0)) == {"on": "q", "sinceAt": "1970-01-01T00:00:00.000Z", "holders": None, "untilAt": None}
    assert always.encode.__code__.co_varnames == ("view",)
    assert shape.encode.__code__.co_varnames != ("view",)
    with pytest.raises(AssertionError, match="written two ways"):
        wire.component(shape, always)
    # Only a field that may be None, and only after those always written (the wire keeps the view's order).
    with pytest.raises(AssertionError, match="may be None"):
        wire.Shape(Waiting, present=("on",), primary=False)
    with pytest.raises(AssertionError, match="comes after those always written"):
        wire.Shape(Waiting, present=("holders",), primary=False)


class Member(NamedTuple):
    task_id: str
    done_ms: EpochMs | None


class Group(NamedTuple):
    id: str
    state: Literal["OPEN", "CLOSED"]
    outcome: Json
    tags: tuple[str, ...]
    members: tuple[Member, ...]
    first: Member | None
    ratio: float


class Inner(NamedTuple):
    a: int


class Outer(NamedTuple):
    inner: Inner


_MEMBER = wire.Shape(Member)
_GROUP = wire.Shape(Group, also={"groupId": "id"})


def test_json_literals_arrays_nested_views_and_a_second_name() -> None:
    """The other kinds of field a view has: a user's JSON value and a literal written as they are,
    an array of scalars or of views, a nested view by its own shape (None stays null), and one
    value under two names; the schema says each, and `encode` writes views inside dicts and lists."""

    member, group = _MEMBER, _GROUP
    assert [field.name for field in group.fields] == ["id", "groupId", "state", "outcome", "tags", "members", "first", "ratio"]
    value = Group("g1", "OPEN", {"a": [1, None]}, ("x", "y"), (Member("t1", 0), Member("t2", None)), None, 0.5)
    written = {
        "id": "g1", "groupId": "g1", "state": "OPEN", "outcome": {"a": [1, None]}, "tags": ["x", "y"],
        "members": [{"taskId": "t1", "doneAt": "1970-01-01T00:00:00.000Z"}, {"taskId": "t2", "doneAt": None}],
        "first": None, "ratio": 0.5,
    }
    assert group.encode(value) == written
    assert orjson.loads(wire.dumps({"groups": [value]})) == {"groups": [written]}
    assert wire.encode({"groups": [value], "n": 1}) == {"groups": [written], "n": 1}
    schema = group.schema()
    jsonschema.validate(written, schema)
    assert schema["properties"]["state"] == {"type": "string", "enum": ["OPEN", "CLOSED"]}
    assert schema["properties"]["tags"] == {"type": "array", "items": {"type": "string"}}
    assert schema["properties"]["members"] == {"type": "array", "items": member.schema()}
    assert schema["properties"]["first"] == wire.nullable(member.schema())
    jsonschema.validate({**written, "first": written["members"][0]}, schema)
    assert schema["properties"]["ratio"] == {"type": "number"}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**written, "state": "GONE"}, schema)
    # A type is written by the first shape declared for it; a second must say it is not that.
    with pytest.raises(AssertionError, match="has a shape already"):
        wire.Shape(Member)
    assert wire.Shape(Member, primary=False).encode(Member("t", None)) == {"taskId": "t", "doneAt": None}


def test_a_nested_view_needs_a_declared_shape() -> None:
    with pytest.raises(AssertionError, match="declare its shape first"):
        wire.Shape(Outer)
