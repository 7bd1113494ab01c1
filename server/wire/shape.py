"""The machinery of the wire: how a typed view's declaration becomes its encoder and its schema.

A typed view (`actors/shapes.py`) has snake-case fields and keeps its times as integer
milliseconds, each time's meaning in its type (`EpochMs`, an instant; `DurationMs`, a length).
On the wire, one rule names and writes a field: camel case (`scope_id` -> `scopeId`), and an
instant `x_ms` is the timestamp `xAt` in the one format the official clients parse
(`YYYY-MM-DDTHH:MM:SS.mmmZ`, `actors/timestamps.py`). Where the wire the clients already read says
otherwise, a shape declares the exception for that field alone: another name (`rename`), whole
seconds under another name (`seconds`: a lease's length is `leaseSeconds`), the same value under a
second name too (`also`), another shape for a nested view (`nested`), or a field written only
when it is present (`present`: an optional field left out of the object, rather than written as
null, where the view has None; such fields come after those always written).

A field's type says how it is written: a string, an integer, a number or a boolean as it is; an
amount in minor units (`MinorUnits`) as a decimal string; a
`Literal` of strings as it is, its schema listing them; a user's JSON value (`Json`) as it is; a
JSON object the kernel made (`JsonObject`, a refusal's details) as it is, any typed view in it by
its shape when `dumps` writes it; a
tuple or list of any of these as an array; one of several typed views, each by its own shape; a `dict[str, X]` of any of these
as an object (a map of maps, or of views, written entry by entry); another typed view by its own shape (the one declared
first for its type, or the field's `nested` one); and any of them or None.

From one declaration, made once at import:
- the encoder, a function compiled for the view's type that builds the JSON object in one
  expression (no loop over fields, no lookups by name at run time); a field written only when
  present is added after that expression, one test of None each, so a shape without such fields
  pays nothing for them;
- the OpenAPI schema (`schema`, `component`), which `openapi.py` serves instead of a shape written
  by hand, so the document lists exactly the fields the encoder writes, with their JSON types.

The first shape declared for a view type is its shape wherever the server writes one (`encoder`);
a shape made `without` some fields (a listing that withholds tokens) is applied by the route that
wants it.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any, Callable, Iterable, Mapping

from ...actors.shapes import DURATION, INSTANT, JSON, JSON_OBJECT, MINOR
from ...actors.timestamps import format_ms

__all__ = ["Shape", "component", "encoder", "TIMESTAMP", "nullable", "camel"]

TIMESTAMP: dict[str, Any] = {"type": "string", "description": "UTC, `YYYY-MM-DDTHH:MM:SS.mmmZ`"}
_SCALARS: dict[Any, dict[str, Any]] = {
    str: {"type": "string"}, int: {"type": "integer"}, float: {"type": "number"}, bool: {"type": "boolean"},
}
# What a user's JSON value is declared as: anything JSON (no constraint).
_ANY_JSON: dict[str, Any] = {"description": "any JSON value"}
# An amount in minor units (`MinorUnits`): a decimal string, as requests carry amounts.
MINOR_UNITS: dict[str, Any] = {"type": "string", "pattern": "^(0|[1-9][0-9]*)$", "description": "minor units"}

Encoder = Callable[[Any], dict[str, Any]]

# The shape declared first for each view type: how the server writes a view of that type.
_PRIMARY: dict[type, "Shape"] = {}


def encoder(view_type: type) -> Encoder | None:
    """The encoder of a view type's first shape, or None for a type no shape declares."""
    shape = _PRIMARY.get(view_type)
    return None if shape is None else shape.encode


def nullable(schema: dict[str, Any]) -> dict[str, Any]:
    """`schema`, or JSON null."""
    kind = schema.get("type")
    if kind is None:
        if schema is _ANY_JSON or schema == _ANY_JSON:
            return dict(schema)
        return {"anyOf": [schema, {"type": "null"}]}
    widened = {**schema, "type": [kind, "null"] if isinstance(kind, str) else [*kind, "null"]}
    if "enum" in schema:  # (an enumeration lists every value it allows: null too)
        widened["enum"] = [*schema["enum"], None]
    return widened


def camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(word[:1].upper() + word[1:] for word in rest)


@dataclasses.dataclass(frozen=True, slots=True)
class WireField:
    """One field as the wire has it: its name there, the view's attribute it comes from, the
    expression that writes it (`{0}` stands for the attribute's value), its JSON schema, and the
    encoders of nested views the expression calls, by the names it calls them."""

    name: str
    attribute: str
    expression: str
    schema: dict[str, Any]
    calls: tuple[tuple[str, Encoder], ...] = ()
    # Written only when the attribute is not None (`Shape(present=...)`): then `expression` and
    # `schema` are the value's, never null.
    present: bool = False


@dataclasses.dataclass(frozen=True, slots=True)
class _Form:
    """How a value of one type is written: an expression of `{0}`, its schema, its time meaning
    (INSTANT or DURATION for an integer of milliseconds, else None), whether it may be None."""

    expression: str
    schema: dict[str, Any]
    meaning: Any = None
    optional: bool = False
    calls: tuple[tuple[str, Encoder], ...] = ()


def _form(hint: Any, nested: Shape | None, depth: int = 0) -> _Form:
    """The form of a view field's type (see the module docstring for the types there are)."""
    optional = False
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        kinds = [kind for kind in typing.get_args(hint) if kind is not type(None)]
        if len(kinds) > 1:
            return _one_of(hint, kinds, len(kinds) < len(typing.get_args(hint)))
        assert len(kinds) == 1, f"a view field is one type or None, not {hint}"
        optional, hint = True, kinds[0]
    meaning = None
    if typing.get_origin(hint) is typing.Annotated:
        meaning = next((mark for mark in hint.__metadata__ if mark in (INSTANT, DURATION, JSON, JSON_OBJECT, MINOR)), None)
        hint = typing.get_args(hint)[0]
    if meaning is JSON:
        return _Form("{0}", _ANY_JSON, None, optional)
    if meaning is JSON_OBJECT:
        return _Form("{0}", {"type": "object"}, None, optional)
    if meaning is MINOR:
        assert hint is int, f"an amount in minor units is an integer: {hint}"
        return _Form("str({0})", MINOR_UNITS, None, optional)
    origin = typing.get_origin(hint)
    if origin is typing.Literal:
        values = typing.get_args(hint)
        assert all(isinstance(value, str) for value in values), f"a literal view field is of strings: {hint}"
        return _Form("{0}", {"type": "string", "enum": list(values)}, None, optional)
    if origin is dict:
        key, value = typing.get_args(hint)
        assert key is str, f"an object field's keys are strings: {hint}"
        item = _form(value, nested, depth + 1)
        assert not item.optional, f"an object field's values are not None: {hint}"
        if item.expression == "{0}":
            expression = "dict({0})"
        else:  # (each value written by its own expression, its braces kept from the outer `format`)
            key, name = f"_key{depth}", f"_value{depth}"
            inner = item.expression.format(name).replace("{", "{{").replace("}", "}}")
            expression = f"{{{{{key}: {inner} for {key}, {name} in {{0}}.items()}}}}"
        return _Form(expression, {"type": "object", "additionalProperties": item.schema}, None, optional, item.calls)
    if origin in (tuple, list):
        args = typing.get_args(hint)
        assert origin is list or (len(args) == 2 and args[1] is Ellipsis), f"an array field is tuple[X, ...]: {hint}"
        item = _form(args[0], nested, depth + 1)
        assert not item.optional, f"an array's items are not None: {hint}"
        name = f"_item{depth}"
        expression = "list({0})" if item.expression == "{0}" else f"[{item.expression.format(name)} for {name} in {{0}}]"
        return _Form(expression, {"type": "array", "items": item.schema}, None, optional, item.calls)
    if hint in _SCALARS:
        assert meaning is None or hint is int, f"only integers of milliseconds have a time meaning: {hint}"
        return _Form("{0}", _SCALARS[hint], meaning, optional)
    shape = nested if nested is not None and nested.view is hint else _PRIMARY.get(hint)
    assert shape is not None, f"a view field's type has no JSON form here (declare its shape first): {hint}"
    call = f"_encode_{hint.__name__}"
    return _Form(f"{call}({{0}})", shape.schema(), None, optional, ((call, shape.encode),))


def _encode_any(view: Any) -> dict[str, Any]:
    encode = encoder(type(view))
    assert encode is not None, f"{type(view).__name__} has no wire shape"
    return encode(view)


def _one_of(hint: Any, kinds: list[Any], optional: bool) -> _Form:
    """A value that is one of several typed views (each written by its own first shape, chosen by
    its type when it is written), or None."""
    shapes = [_PRIMARY.get(kind) for kind in kinds]
    assert all(shapes), f"each view of {hint} has its shape declared first"
    schema = {"anyOf": [shape.schema() for shape in shapes if shape is not None]}
    return _Form("_encode_any({0})", schema, None, optional, (("_encode_any", _encode_any),))


def _field(attribute: str, hint: Any, shape: Shape) -> WireField:
    form = _form(hint, shape.nested.get(attribute))
    schema, expression = form.schema, form.expression
    if attribute in shape.seconds:
        assert form.meaning is DURATION, f"{attribute}: only a length of time is sent in whole seconds"
        name, expression = shape.seconds[attribute], "{0} // 1000"
    elif form.meaning is INSTANT:
        assert attribute.endswith("_ms"), f"{attribute}: an instant's name ends in _ms"
        name, expression, schema = camel(attribute[: -len("_ms")]) + "At", "_format_ms({0})", TIMESTAMP
    else:
        name = camel(attribute)
    name = shape.rename.get(attribute, name)
    present = attribute in shape.present
    if present:
        assert form.optional, f"{attribute}: only a field that may be None is written only when present"
    elif form.optional:
        schema = nullable(schema)
        if expression != "{0}":
            expression = f"(None if {{0}} is None else {expression})"
    return WireField(name, attribute, expression, dict(schema), form.calls, present)


class Shape:
    """The wire shape of one typed view: its fields in the view's order, named and converted by the
    rule and this shape's exceptions; `omit` leaves fields out (a listing that withholds tokens);
    `also` writes an attribute a second time under another name, right after its own field (a
    task's `id` is its `taskId` too); `nested` names the shape of a field holding another view
    where it is not that view's first shape; `present` names optional fields written only when
    they are not None (left out, not null, otherwise), which come after every field always written.

    The first shape made for a view type is how the server writes that type everywhere (`primary`
    false for one a route applies by itself)."""

    def __init__(
        self,
        view: type,
        *,
        rename: Mapping[str, str] | None = None,
        seconds: Mapping[str, str] | None = None,
        also: Mapping[str, str] | None = None,
        nested: Mapping[str, Shape] | None = None,
        omit: Iterable[str] = (),
        present: Iterable[str] = (),
        primary: bool = True,
    ) -> None:
        self.view = view
        self.rename = dict(rename or {})
        self.seconds = dict(seconds or {})
        self.also = dict(also or {})
        self.nested = dict(nested or {})
        self.omit = tuple(omit)
        self.present = tuple(present)
        hints = typing.get_type_hints(view, include_extras=True)
        attributes = _attributes(view)
        for name in (*self.rename, *self.seconds, *self.omit, *self.also.values(), *self.nested, *self.present):
            assert name in attributes, f"{view.__name__} has no field {name}"
        assert not set(self.present) & set(self.also.values()), f"{view.__name__}: a field written only when present has one name"
        fields: list[WireField] = []
        for name in attributes:
            if name in self.omit:
                continue
            field = _field(name, hints[name], self)
            fields.append(field)
            fields.extend(dataclasses.replace(field, name=copy) for copy, source in self.also.items() if source == name)
        self.fields = tuple(fields)
        names = [field.name for field in self.fields]
        assert len(set(names)) == len(names), f"{view.__name__}: two fields with one wire name"
        # Written after the object's display, they must come last to keep the view's order.
        flags = [field.present for field in self.fields]
        assert flags == sorted(flags), f"{view.__name__}: a field written only when present comes after those always written"
        self.encode = _compile(view, self.fields)
        if primary:
            assert view not in _PRIMARY, f"{view.__name__} has a shape already (make this one primary=False)"
            _PRIMARY[view] = self

    def extended(self, view: type) -> Shape:
        """The shape of a view that extends this one's (its fields first, in the same order and of
        the same types, then its own), with the same exceptions."""
        extended = Shape(
            view, rename=self.rename, seconds=self.seconds, also=self.also, nested=self.nested, omit=self.omit, present=self.present,
        )
        mine = [(field.name, field.attribute, field.expression) for field in self.fields]
        theirs = [(field.name, field.attribute, field.expression) for field in extended.fields]
        assert theirs[: len(mine)] == mine, f"{view.__name__} does not extend {self.view.__name__}"
        return extended

    def without(self, *names: str) -> Shape:
        """The same view, these fields left out: a shape a route applies by itself."""
        return Shape(
            self.view, rename=self.rename, seconds=self.seconds, also=self.also, nested=self.nested,
            omit=(*self.omit, *names), present=self.present, primary=False,
        )

    def schema(self) -> dict[str, Any]:
        """The JSON object this shape writes: every field, each required but those written only
        when present."""
        return _object([(field, not field.present) for field in self.fields])


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
    its attribute and converted inline; then each field written only when present, if it is not
    None (a shape without such fields returns the display itself). The wire names come from the
    declaration, never from a request, and are checked as identifiers of the view's attributes
    before they are compiled."""
    items = []
    late: list[str] = []
    namespace: dict[str, Any] = {"_format_ms": format_ms}
    for field in fields:
        assert field.attribute.isidentifier() and field.name.isidentifier(), "only names are compiled"
        namespace.update(field.calls)
        if not field.present:
            items.append(f"{field.name!r}: " + field.expression.format(f"view.{field.attribute}"))
            continue
        value = f"_present{len(late)}"
        late.append(
            f"    {value} = view.{field.attribute}\n"
            f"    if {value} is not None:\n"
            f"        written[{field.name!r}] = {field.expression.format(value)}\n"
        )
    display = f"{{{', '.join(items)}}}"
    if late:
        body = f"    written = {display}\n{''.join(late)}    return written\n"
    else:
        body = f"    return {display}\n"
    source = f"def encode_{view.__name__}(view):\n{body}"
    exec(compile(source, f"<wire {view.__name__}>", "exec"), namespace)  # noqa: S102 (source made above)
    encode: Encoder = namespace[f"encode_{view.__name__}"]
    return encode


def component(*shapes: Shape) -> dict[str, Any]:
    """The OpenAPI component of a view and the views that extend it: every field any of them
    writes, in order; required, the fields all of them always write."""
    seen: dict[str, WireField] = {}
    for shape in shapes:
        for field in shape.fields:
            known = seen.setdefault(field.name, field)
            assert (known.expression, known.schema, known.present) == (field.expression, field.schema, field.present), (
                f"{field.name} is written two ways"
            )
    always = set.intersection(*({field.name for field in shape.fields if not field.present} for shape in shapes))
    return _object([(field, field.name in always) for field in seen.values()])
