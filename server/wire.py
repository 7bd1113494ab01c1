"""The wire: how each of the kernel's typed views is named and written in JSON, declared once.

A typed view (`actors/shapes.py`) has snake-case fields and keeps its times as integer
milliseconds, each time's meaning in its type (`EpochMs`, an instant; `DurationMs`, a length).
On the wire, one rule names and writes a field: camel case (`scope_id` -> `scopeId`), and an
instant `x_ms` is the timestamp `xAt` in the one format the official clients parse
(`YYYY-MM-DDTHH:MM:SS.mmmZ`, `actors/timestamps.py`). Where the wire the clients already read says
otherwise, a shape declares the exception for that field alone: another name (`rename`), or whole
seconds under another name (`seconds`: a lease's length is `leaseSeconds`).

From that one declaration, made once at import:
- the encoder, a function compiled for the view's type that builds the JSON object in one
  expression (no loop over fields, no lookups by name at run time);
- the OpenAPI component schema (`component`), which `openapi.py` serves instead of a shape written
  by hand, so the document lists exactly the fields the encoder writes, with their JSON types.

`dumps` is how the server writes every JSON answer: orjson hands each view it meets (at the top,
or inside a list or a batch's results) to the view's encoder. `encode` is the same for one value;
the kernel keeps an answer for an Idempotency-Key's retries in this form (`Kernel(keep_reply=...)`),
so a retry, even after a restart or on another node of a cluster, answers the same bytes.
Not to be confused with `actors/fields.py`, which declares what requests carry.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any, Callable, Iterable, Mapping

import orjson

from ..actors.claims import ClaimHeldView, ClaimView, ForceReleasedClaimView, ReleasedClaimView
from ..actors.shapes import DURATION, INSTANT
from ..actors.timestamps import format_ms

__all__ = [
    "Shape", "dumps", "encode", "component", "TIMESTAMP", "nullable", "COMPONENTS",
    "CLAIM", "RELEASED_CLAIM", "FORCE_RELEASED_CLAIM", "HELD_CLAIM", "CLAIM_HELD",
]

TIMESTAMP: dict[str, Any] = {"type": "string", "description": "UTC, `YYYY-MM-DDTHH:MM:SS.mmmZ`"}
_SCALARS: dict[Any, dict[str, Any]] = {str: {"type": "string"}, int: {"type": "integer"}, bool: {"type": "boolean"}}

Encoder = Callable[[Any], dict[str, Any]]


def nullable(schema: dict[str, Any]) -> dict[str, Any]:
    """`schema`, or JSON null."""
    kind = schema.get("type")
    if kind is None:
        return {"anyOf": [schema, {"type": "null"}]}
    return {**schema, "type": [kind, "null"] if isinstance(kind, str) else [*kind, "null"]}


def camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(word[:1].upper() + word[1:] for word in rest)


@dataclasses.dataclass(frozen=True, slots=True)
class WireField:
    """One field as the wire has it: its name there, the view's attribute it comes from, the
    expression that writes it (`{0}` stands for the attribute's value), and its JSON schema."""

    name: str
    attribute: str
    expression: str
    schema: dict[str, Any]


def _meaning(hint: Any) -> tuple[Any, bool, Any]:
    """(base type, nullable, time meaning or None) of a view field's type."""
    optional = False
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        kinds = [kind for kind in typing.get_args(hint) if kind is not type(None)]
        assert len(kinds) == 1, f"a view field is one type or None, not {hint}"
        optional, hint = True, kinds[0]
    meaning = None
    if typing.get_origin(hint) is typing.Annotated:
        meaning = next((mark for mark in hint.__metadata__ if mark is INSTANT or mark is DURATION), None)
        hint = typing.get_args(hint)[0]
    assert hint in _SCALARS, f"a view field's type has no JSON form here: {hint}"
    return hint, optional, meaning


def _field(attribute: str, hint: Any, rename: Mapping[str, str], seconds: Mapping[str, str]) -> WireField:
    base, optional, meaning = _meaning(hint)
    schema = _SCALARS[base]
    expression = "{0}"
    if attribute in seconds:
        assert meaning is DURATION, f"{attribute}: only a length of time is sent in whole seconds"
        name, expression = seconds[attribute], "{0} // 1000"
    elif meaning is INSTANT:
        assert attribute.endswith("_ms"), f"{attribute}: an instant's name ends in _ms"
        name, expression, schema = camel(attribute[: -len("_ms")]) + "At", "_format_ms({0})", TIMESTAMP
    else:
        name = camel(attribute)
    name = rename.get(attribute, name)
    if optional:
        schema = nullable(schema)
        if expression != "{0}":
            expression = f"(None if {{0}} is None else {expression})"
    return WireField(name, attribute, expression, dict(schema))


class Shape:
    """The wire shape of one typed view: its fields in the view's order, named and converted by the
    rule and this shape's exceptions; `omit` leaves fields out (a listing that withholds tokens)."""

    def __init__(
        self,
        view: type,
        *,
        rename: Mapping[str, str] | None = None,
        seconds: Mapping[str, str] | None = None,
        omit: Iterable[str] = (),
    ) -> None:
        self.view = view
        self.rename = dict(rename or {})
        self.seconds = dict(seconds or {})
        self.omit = tuple(omit)
        hints = typing.get_type_hints(view, include_extras=True)
        attributes = _attributes(view)
        for name in (*self.rename, *self.seconds, *self.omit):
            assert name in attributes, f"{view.__name__} has no field {name}"
        self.fields = tuple(
            _field(name, hints[name], self.rename, self.seconds) for name in attributes if name not in self.omit
        )
        names = [field.name for field in self.fields]
        assert len(set(names)) == len(names), f"{view.__name__}: two fields with one wire name"
        self.encode = _compile(view, self.fields)

    def extended(self, view: type) -> Shape:
        """The shape of a view that extends this one's (its fields first, in the same order and of
        the same types, then its own), with the same exceptions."""
        extended = Shape(view, rename=self.rename, seconds=self.seconds, omit=self.omit)
        mine = [(field.name, field.attribute, field.expression) for field in self.fields]
        theirs = [(field.name, field.attribute, field.expression) for field in extended.fields]
        assert theirs[: len(mine)] == mine, f"{view.__name__} does not extend {self.view.__name__}"
        return extended

    def without(self, *names: str) -> Shape:
        """The same view, these fields left out."""
        return Shape(self.view, rename=self.rename, seconds=self.seconds, omit=(*self.omit, *names))

    def schema(self) -> dict[str, Any]:
        """The JSON object this shape writes: every field, each always there."""
        return _object([(field, True) for field in self.fields])


def _attributes(view: type) -> list[str]:
    """A typed view's fields in order: a named tuple's, or a dataclass's."""
    if issubclass(view, tuple) and hasattr(view, "_fields"):
        return list(view._fields)
    assert dataclasses.is_dataclass(view), f"{view.__name__} is not a typed view"
    return [field.name for field in dataclasses.fields(view)]


def _object(fields: list[tuple[WireField, bool]]) -> dict[str, Any]:
    """An OpenAPI object of `(field, required)`, open to more properties (adding one breaks no client)."""
    schema: dict[str, Any] = {"type": "object", "properties": {field.name: field.schema for field, _ in fields}}
    required = [field.name for field, needed in fields if needed]
    if required:
        schema["required"] = required
    return schema


def _compile(view: type, fields: tuple[WireField, ...]) -> Encoder:
    """A function that writes a `view` as its JSON object: one dict display, each value read from
    its attribute and converted inline. The wire names come from the declaration, never from a
    request, and are checked as identifiers of the view's attributes before they are compiled."""
    items = []
    for field in fields:
        assert field.attribute.isidentifier() and field.name.isidentifier(), "only names are compiled"
        items.append(f"{field.name!r}: " + field.expression.format(f"view.{field.attribute}"))
    source = f"def encode_{view.__name__}(view):\n    return {{{', '.join(items)}}}\n"
    namespace: dict[str, Any] = {"_format_ms": format_ms}
    exec(compile(source, f"<wire {view.__name__}>", "exec"), namespace)  # noqa: S102 (source made above)
    encoder: Encoder = namespace[f"encode_{view.__name__}"]
    return encoder


# -- the shapes ------------------------------------------------------------------------------------

# A claim as acquire, renew and release answer it. The official clients read `holderSession`,
# `leaseSeconds` and `leaseExpiresAt`, so the holder's session, the lease's length and its end keep
# those names. A release answers the claim with `released` and `releasedAt`; an operator's release
# adds `forced`, `reason` and `by`.
CLAIM = Shape(ClaimView, rename={"session": "holderSession", "expires_ms": "leaseExpiresAt"}, seconds={"lease_ms": "leaseSeconds"})
RELEASED_CLAIM = CLAIM.extended(ReleasedClaimView)
FORCE_RELEASED_CLAIM = CLAIM.extended(ForceReleasedClaimView)
# A claim as a run's listing shows it: tokens are never listed.
HELD_CLAIM = CLAIM.without("token")
# CLAIM_HELD's details: the holder, its generation and its lease's end, as a claim names them.
CLAIM_HELD = Shape(ClaimHeldView, rename={"expires_ms": "leaseExpiresAt"})

# The encoder of each view type: what `dumps` and `encode` write a view as.
_ENCODERS: dict[type, Encoder] = {
    shape.view: shape.encode for shape in (CLAIM, RELEASED_CLAIM, FORCE_RELEASED_CLAIM, CLAIM_HELD)
}


def component(*shapes: Shape) -> dict[str, Any]:
    """The OpenAPI component of a view and the views that extend it: every field any of them
    writes, in order; required, the fields all of them write."""
    seen: dict[str, WireField] = {}
    for shape in shapes:
        for field in shape.fields:
            assert seen.setdefault(field.name, field) == field, f"{field.name} is written two ways"
    always = set.intersection(*({field.name for field in shape.fields} for shape in shapes))
    return _object([(field, field.name in always) for field in seen.values()])


# The components `openapi.py` serves from these shapes, by name.
COMPONENTS: dict[str, dict[str, Any]] = {
    "Claim": component(CLAIM, RELEASED_CLAIM, FORCE_RELEASED_CLAIM),
    "HeldClaim": component(HELD_CLAIM),
}


def _default(value: Any) -> dict[str, Any]:
    encoder = _ENCODERS.get(type(value))
    if encoder is None:
        raise TypeError(f"{type(value).__name__} has no wire shape (server/wire.py)")
    return encoder(value)


def dumps(body: Any) -> bytes:
    """`body` as the JSON of an answer: plain values as orjson writes them, each typed view as its
    shape declares. orjson hands a named tuple to `default` by itself (it writes no tuple
    subclass as an array); dataclasses are passed through to it too, so that one without a
    declared shape is refused rather than written as its snake-case fields."""
    return orjson.dumps(body, default=_default, option=orjson.OPT_PASSTHROUGH_DATACLASS)


def encode(value: Any) -> Any:
    """A typed view as its JSON object; any other answer (JSON already) as it is."""
    encoder = _ENCODERS.get(type(value))
    return value if encoder is None else encoder(value)
