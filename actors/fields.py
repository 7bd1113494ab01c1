"""The fields of a command: where each comes from, its JSON type, and the limits it must keep.

A command (`commands.py`) is a frozen dataclass whose fields are declared with `body(...)`,
`path(...)` or `drawn(...)`. From those declarations come, in one place:

- parsing: `parse(CommandClass, body, path_params, limits, ids)` reads each field from the JSON body
  or the path, checks its type and limits, draws what must be random, and builds the command;
- validation: every length, range and lease bound is checked here, with one wording for each kind
  of refusal (VALIDATION_FAILED naming the field), and nowhere else;
- description: `schema(spec, limits)` gives the JSON Schema of a field, from which the OpenAPI
  document and the API reference are generated.

Wire conventions (the v1 contract): an optional field that is null is the same as an absent one; a
required field that is missing or null, or of the wrong JSON type, is refused naming the field;
integers are JSON integers (`30.0`, `"30"` and `true` are refused, not coerced); a field the command
does not read is refused naming it (with the nearest one it reads, when one is near): a typo such as
`nmae` would otherwise be dropped in silence and the request done without it. A command may list
in `IGNORED` fields that clients send and it rightly does without; those are let through. A query
parameter the route does not take is refused in the same words (`unknown`), by the shell
(`server/http.py`), since a route's query parameters are not all a command's.
"""

from __future__ import annotations

import dataclasses
import difflib
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator

import orjson

from .errors import VALIDATION_FAILED, KernelError, quote
from .limits import Limits
from .timestamps import parse_timestamp
from .shapes import Body, View

__all__ = [
    "Spec", "body", "path", "drawn", "caller", "parse", "specs", "schema", "check_text", "check_space_id",
    "payload_size", "depth_exceeds", "TEXT", "INTEGER", "BOOLEAN", "TIMESTAMP", "JSON", "TEXTS", "OBJECTS", "query", "MINOR",
    "compile_parser", "integer_range", "body_wires", "refuse_unknown", "unknown",
]

# Kinds of field, by their JSON type and what the command keeps.
TEXT = "text"  # a string
INTEGER = "integer"  # a JSON integer
BOOLEAN = "boolean"
TIMESTAMP = "timestamp"  # an RFC 3339 string with a zone, kept as wall milliseconds
JSON = "json"  # caller data of any JSON type, within the payload limits
TEXTS = "texts"  # a non-empty list of strings
OBJECTS = "objects"  # a non-empty list of objects, at most `maximum` of them (a batch's operations)
MINOR = "minor"  # an amount in minor units: a canonical digit string on the wire, a Python int kept

# An amount has at most this many digits (well past any real budget, and past int64 too).
MINOR_DIGITS_MAX = 30

# Where a field comes from.
BODY, PATH, QUERY, DRAWN, CALLER = "body", "path", "query", "drawn", "caller"

Bound = int | str | None  # a number, or the name of a `Limits` attribute


@dataclass(frozen=True, slots=True)
class Spec:
    """One field of a command, as the wire carries it."""

    wire: str  # the name in the JSON body or the path; for a drawn value, what is drawn
    kind: str
    source: str = BODY
    required: bool = True
    # Text length; `length_min` 0 lets an empty string through.
    length_max: Bound = None
    length_min: int = 1
    # Integer range, and the value of an absent optional field.
    minimum: Bound = None
    maximum: Bound = None
    default: Bound = None
    items_max: int | None = None  # for TEXTS
    description: str = ""

    def bound(self, value: Bound, limits: Limits) -> Any:
        return getattr(limits, value) if isinstance(value, str) else value


def body(
    wire: str,
    kind: str = TEXT,
    *,
    required: bool = True,
    length_max: Bound = None,
    length_min: int = 1,
    minimum: Bound = None,
    maximum: Bound = None,
    default: Bound = None,
    items_max: int | None = None,
    description: str = "",
) -> Any:
    """A field read from the JSON body under `wire`."""
    spec = Spec(wire, kind, BODY, required, length_max, length_min, minimum, maximum, default, items_max, description)
    if required:
        return dataclasses.field(metadata={"spec": spec})
    return dataclasses.field(default=None, metadata={"spec": spec})


def path(wire: str) -> Any:
    """A field taken from the path parameter `wire` (already percent-decoded)."""
    return dataclasses.field(metadata={"spec": Spec(wire, TEXT, PATH)})


def query(wire: str, kind: str = TEXT, *, required: bool = False, minimum: Bound = None, maximum: Bound = None, description: str = "") -> Any:
    """A field read from the query string (a GET's parameters); an INTEGER is written in digits."""
    spec = Spec(wire, kind, QUERY, required, None, 1, minimum, maximum, None, None, description)
    if required:
        return dataclasses.field(metadata={"spec": spec})
    return dataclasses.field(default=None, metadata={"spec": spec})


def drawn(what: str) -> Any:
    """A value drawn from the kernel's seeded source when the command is parsed: an id with the
    prefix `what` (e.g. "sc_"), "token" (a claim token), "delivery-token", or "jitter"."""
    return dataclasses.field(metadata={"spec": Spec(what, TEXT, DRAWN)})


def caller() -> Any:
    """Who sends the command, as the shell names them (`"admin"` for the admin key, else the API
    key's id): recorded by an operator's action so its record and event say who did it. Taken
    from the path parameters under "caller", which the shell adds; None when a command is made
    in code (a test, the server's own work)."""
    return dataclasses.field(default=None, metadata={"spec": Spec("caller", TEXT, CALLER, required=False)})


def takes_caller(command_class: type) -> bool:
    """Whether a command records who sent it."""
    return any(spec.source == CALLER for _, spec in specs(command_class))


def specs(command_class: type) -> tuple[tuple[str, Spec], ...]:
    """The declared fields of a command class, in order: (attribute, spec)."""
    cached = command_class.__dict__.get("_specs")
    if cached is None:
        cached = tuple(
            (field.name, field.metadata["spec"]) for field in dataclasses.fields(command_class) if "spec" in field.metadata
        )
        command_class._specs = cached  # type: ignore[attr-defined]  # a cache kept on the command class, which does not declare it
    return cached


# -- checks ------------------------------------------------------------------------------------


def check_text(field: str, value: str, length_max: int, length_min: int = 1) -> str:
    """A string of `length_min` (1: not empty) to `length_max` characters."""
    if length_min and not value:
        raise KernelError(VALIDATION_FAILED, f"{field} must not be empty")
    if len(value) > length_max:
        raise KernelError(VALIDATION_FAILED, f"{field} is longer than {length_max} characters")
    return value


SPACE_ID_LEN_MAX = 64


def check_space_id(space: str) -> str:
    """A space id: 1-64 characters of A-Z a-z 0-9 - _ (the same rule for keys, settings and paths)."""
    if (
        not space
        or len(space) > SPACE_ID_LEN_MAX
        or not space.isascii()
        or not all(c.isalnum() or c in "-_" for c in space)
    ):
        raise KernelError(
            VALIDATION_FAILED, f"space id {quote(space)} must be 1-{SPACE_ID_LEN_MAX} characters of A-Z a-z 0-9 - _"
        )
    return space


def payload_size(value: Any) -> int:
    return len(orjson.dumps(value))


def depth_exceeds(value: Any, depth_max: int) -> bool:
    """True when containers nest deeper than `depth_max` (a scalar is depth 0, `{}` depth 1).

    Recursive, but never deeper than `depth_max` + 1 calls: it stops as soon as the bound is
    passed. A container of scalars, the usual input or result, costs one call.
    """
    cls = value.__class__
    if cls is dict:
        children: Any = value.values()
    elif cls is list:
        children = value
    else:
        return False
    if depth_max < 1:
        return True
    for child in children:
        kind = child.__class__
        if (kind is dict or kind is list) and depth_exceeds(child, depth_max - 1):
            return True
    return False


def _refuse(message: str) -> KernelError:
    return KernelError(VALIDATION_FAILED, message)


def _read(spec: Spec, value: Any, limits: Limits) -> Any:
    """One present (non-null) body value of `spec`'s kind, checked against its limits."""
    name = spec.wire
    kind = spec.kind
    if kind == TEXT:
        if not isinstance(value, str):
            raise _refuse(f"field {name!r} must be a string")
        if spec.length_max is not None:
            check_text(name, value, spec.bound(spec.length_max, limits), spec.length_min)
        return value
    if kind == INTEGER:
        low, high = spec.bound(spec.minimum, limits), spec.bound(spec.maximum, limits)
        if not isinstance(value, int) or isinstance(value, bool):
            raise _refuse(f"field {name!r} must be {integer_range(low, high)}, got {quote(value)}")
        if high is None and low is not None and value < low:
            raise _refuse(f"{name} must not be less than {low}, got {value}")
        if high is not None and not (low if low is not None else value) <= value <= high:
            raise _refuse(f"{name} must be between {low} and {high}, got {value}")
        return value
    if kind == BOOLEAN:
        if not isinstance(value, bool):
            raise _refuse(f"field {name!r} must be true or false")
        return value
    if kind == TIMESTAMP:
        if not isinstance(value, str):
            raise _refuse(f"field {name!r} must be a string")
        try:
            return parse_timestamp(value)
        except ValueError as error:
            raise _refuse(
                f"field {name!r} must be an ISO 8601 timestamp with a zone, e.g. 2026-01-31T12:00:00Z ({error})"
            ) from None
    if kind == JSON:
        if depth_exceeds(value, limits.json_depth_max):
            raise _refuse(f"field {name!r} nests deeper than {limits.json_depth_max} levels")
        if payload_size(value) > limits.payload_bytes_max:
            raise _refuse(f"field {name!r} exceeds {limits.payload_bytes_max} bytes")
        return value
    if kind == TEXTS:
        if not isinstance(value, list) or not value or not all(isinstance(item, str) for item in value):
            raise _refuse(f"field {name!r} must be a non-empty list of strings")
        if spec.items_max is not None and len(value) > spec.items_max:
            raise _refuse(f"field {name!r} holds at most {spec.items_max} items")
        return value
    if kind == MINOR:
        return read_minor(name, value)
    raise AssertionError(f"no field kind {kind!r}")


def integer_range(low: Any, high: Any) -> str:
    """How a refusal names the integers a field takes: "an integer from 5 to 600"."""
    if low is not None and high is not None:
        return f"an integer from {low} to {high}"
    if low is not None:
        return f"an integer of at least {low}"
    return "an integer"


def read_minor(name: str, value: Any) -> int:
    """A canonical digit string of minor units (no sign, no leading zeros, "0" for zero) as an int.

    Never a JSON number: a float cannot hold every amount exactly, and the official client sends
    and compares these as strings.
    """
    if not isinstance(value, str):
        raise _refuse(f"field {name!r} must be a string of decimal digits (minor units), e.g. \"250\"")
    if not value or len(value) > MINOR_DIGITS_MAX or not value.isascii() or not value.isdigit():
        raise _refuse(f"field {name!r} must be 1-{MINOR_DIGITS_MAX} decimal digits (minor units), got {quote(value)}")
    if len(value) > 1 and value[0] == "0":
        raise _refuse(f"field {name!r} must have no leading zeros, got {quote(value)}")
    return int(value)


def read_field(spec: Spec, data: Body, limits: Limits) -> Any:
    """The value of a body field: checked, or its default when absent or null."""
    value = data.get(spec.wire)
    if value is None:
        if spec.required and spec.kind != JSON:
            raise _refuse(f"field {spec.wire!r} is required")
        return spec.bound(spec.default, limits)
    return _read(spec, value, limits)


Draw = Callable[[str], Any]


def _query_value(spec: Spec, text: str | None) -> Any:
    """A query parameter as the JSON value it stands for (digits for an INTEGER)."""
    if text is None or spec.kind != INTEGER:
        return text
    if not (text.isascii() and text.lstrip("-").isdigit()):
        raise _refuse(f"query parameter {spec.wire!r} must be an integer, got {quote(text)}")
    return int(text)


def body_wires(command_class: type) -> frozenset[str]:
    """The body fields a command reads, and those it lets through unread (`IGNORED`)."""
    cached = command_class.__dict__.get("_body_wires")
    if cached is None:
        cached = frozenset(spec.wire for _, spec in specs(command_class) if spec.source == BODY)
        cached |= frozenset(getattr(command_class, "IGNORED", ()))
        command_class._body_wires = cached  # type: ignore[attr-defined]  # a cache kept on the command class, which does not declare it
    return cached


def refuse_unknown(command_class: type, data: Body) -> None:
    """VALIDATION_FAILED naming the first field of `data` the command does not read."""
    known = body_wires(command_class)
    for name in data:
        if name not in known:
            raise unknown("field", name, [spec.wire for _, spec in specs(command_class) if spec.source == BODY])


def unknown(what: str, name: Any, takes: Iterable[str]) -> KernelError:
    """The refusal of a `what` ("field", "query parameter") named `name` that the request does
    not take: it names it, the nearest name it takes when one is near (a typo), and all it takes."""
    read = sorted(takes)
    near = difflib.get_close_matches(str(name), read, n=1, cutoff=0.6)
    hint = f" (did you mean {near[0]!r}?)" if near else ""
    said = f"this request takes {', '.join(read)}" if read else f"this request takes no {what}s"
    return _refuse(f"unknown {what} {quote(name)}{hint}: {said}")


def parse(
    command_class: type,
    data: Body,
    params: dict[str, str],
    limits: Limits,
    draw: Draw,
    query: Callable[[str], str | None] | None = None,
) -> Any:
    """Build a command from a JSON body, path parameters and (for a GET) query parameters: every
    field read and checked, every drawn value drawn; then the command's own cross-field `check`."""
    if not data.keys() <= body_wires(command_class):
        refuse_unknown(command_class, data)
    values: dict[str, Any] = {}
    for attribute, spec in specs(command_class):
        source = spec.source
        if source == BODY:
            values[attribute] = read_field(spec, data, limits)
        elif source == PATH:
            values[attribute] = params[spec.wire]
        elif source == QUERY:
            values[attribute] = _query_field(spec, query, limits)
        elif source == CALLER:
            values[attribute] = params.get("caller")
        else:
            values[attribute] = draw(spec.wire)
    command = command_class(**values)
    command.check(limits)
    return command


def _query_field(spec: Spec, query: Callable[[str], str | None] | None, limits: Limits) -> Any:
    text = None if query is None else query(spec.wire)
    return read_field(spec, {spec.wire: _query_value(spec, text)}, limits)


Parser = Callable[[Body, "dict[str, str]", Draw, "Callable[[str], str | None] | None"], Any]


def compile_parser(command_class: type, limits: Limits) -> Parser:
    """`parse` for one command class and one set of limits, as one generated function.

    Every request runs a parse, so the common case costs no call per field: each field's usual
    value (a string of an allowed length, an integer in range, a boolean) is checked inline with
    its bounds resolved from `limits` ahead; anything else goes to the same `_read` and
    `read_field` that `parse` uses, which accept it or refuse it with their wording. Fields are
    read, and values drawn, in the order `parse` does, so both give the same command or the same
    error for every input (a property test holds them equal).
    """
    namespace: dict[str, Any] = {
        "_cls": command_class, "_limits": limits, "_read": _read, "_rf": read_field, "_qf": _query_field,
        "_known": body_wires(command_class), "_unknown": refuse_unknown,
    }
    lines = ["def parse(data, params, draw, query):", "    if not data.keys() <= _known: _unknown(_cls, data)"]
    names = []
    for index, (attribute, spec) in enumerate(specs(command_class)):
        s, v = f"_s{index}", f"v{index}"
        namespace[s] = spec
        names.append(f"{attribute}={v}")
        source, kind = spec.source, spec.kind
        if source == PATH:
            lines.append(f"    {v} = params[{spec.wire!r}]")
            continue
        if source == DRAWN:
            lines.append(f"    {v} = draw({spec.wire!r})")
            continue
        if source == QUERY:
            lines.append(f"    {v} = _qf({s}, query, _limits)")
            continue
        if source == CALLER:
            lines.append(f"    {v} = params.get('caller')")
            continue
        lines.append(f"    {v} = data.get({spec.wire!r})")
        if spec.required and kind != JSON:
            lines.append(f"    if {v} is None: {v} = _rf({s}, data, _limits)")
        else:
            namespace[f"_d{index}"] = spec.bound(spec.default, limits)
            lines.append(f"    if {v} is None: {v} = _d{index}")
        plain = _plain_check(spec, v, limits)
        if plain is None:
            lines.append(f"    else: {v} = _read({s}, {v}, _limits)")
        else:
            lines.append(f"    elif {plain}: {v} = _read({s}, {v}, _limits)")
    fields = dataclasses.fields(command_class)
    slots = command_class.__dict__.get("__slots__", ())
    if len(fields) == len(names) and all(field.name in slots for field in fields) and not hasattr(command_class, "__post_init__"):
        # Every field comes from the request: set each slot straight, as the dataclass's own
        # `__init__` would (a frozen class's `__init__` pays an `object.__setattr__` per field).
        namespace["_new"] = object.__new__
        lines.append("    command = _new(_cls)")
        for index, (attribute, _) in enumerate(specs(command_class)):
            namespace[f"_set{index}"] = command_class.__dict__[attribute].__set__
            lines.append(f"    _set{index}(command, v{index})")
    else:
        lines.append(f"    command = _cls({', '.join(names)})")
    if _checks_across_fields(command_class):
        lines.append("    command.check(_limits)")
    lines.append("    return command")
    exec(compile("\n".join(lines), f"<parser of {command_class.__name__}>", "exec"), namespace)
    parser: Parser = namespace["parse"]
    return parser


def _checks_across_fields(command_class: type) -> bool:
    """Whether a class in the command's lineage besides the base defines `check` (the base's,
    the last one in the lineage, checks nothing)."""
    return sum("check" in klass.__dict__ for klass in command_class.__mro__) > 1


def _plain_check(spec: Spec, v: str, limits: Limits) -> str | None:
    """A Python condition true when the present value `v` is NOT plainly acceptable (then `_read`
    decides), or None when every value goes to `_read`."""
    kind = spec.kind
    if kind == TEXT:
        if spec.length_max is None:
            return f"{v}.__class__ is not str"
        length_max = int(spec.bound(spec.length_max, limits))
        empty = f" or not {v}" if spec.length_min else ""
        return f"{v}.__class__ is not str or len({v}) > {length_max}{empty}"
    if kind == INTEGER:
        low, high = spec.bound(spec.minimum, limits), spec.bound(spec.maximum, limits)
        test = f"{v}.__class__ is not int"
        if low is not None:
            test += f" or {v} < {int(low)}"
        if high is not None:
            test += f" or {v} > {int(high)}"
        return test
    if kind == BOOLEAN:
        return f"{v}.__class__ is not bool"
    return None


def validate(command: Any, limits: Limits, *, skip: tuple[str, ...] = ()) -> Any:
    """Check a command built in code (not parsed from the wire) as `parse` would, but for fields
    of the kinds in `skip`."""
    for attribute, spec in specs(type(command)):
        if spec.source == BODY and spec.kind not in skip:
            value = getattr(command, attribute)
            if value is None:
                if spec.required and spec.kind != JSON:
                    raise _refuse(f"field {spec.wire!r} is required")
            elif spec.kind not in (TIMESTAMP, MINOR):  # a built command holds milliseconds / an int already
                _read(spec, value, limits)
    command.check(limits)
    return command


# -- description ---------------------------------------------------------------------------------

_TIMESTAMP_IN = {
    "type": "string", "minLength": 10, "maxLength": 64, "description": "RFC 3339 with a zone, e.g. 2030-01-31T12:00:00Z",
}


def schema(spec: Spec, limits: Limits) -> View:
    """The JSON Schema of a body field, with this server's limits."""
    kind = spec.kind
    result: dict[str, Any]
    if kind == TEXT:
        result = {"type": "string"}
        if spec.length_max is not None:
            if spec.length_min:
                result["minLength"] = spec.length_min
            result["maxLength"] = spec.bound(spec.length_max, limits)
    elif kind == INTEGER:
        result = {"type": "integer"}
        if spec.minimum is not None:
            result["minimum"] = spec.bound(spec.minimum, limits)
        if spec.maximum is not None:
            result["maximum"] = spec.bound(spec.maximum, limits)
    elif kind == BOOLEAN:
        result = {"type": "boolean"}
    elif kind == TIMESTAMP:
        result = dict(_TIMESTAMP_IN)
    elif kind == JSON:
        result = {"description": f"any JSON value, at most {limits.payload_bytes_max} bytes, {limits.json_depth_max} levels"}
    elif kind == MINOR:
        result = {"type": "string", "pattern": "^(0|[1-9][0-9]*)$", "maxLength": MINOR_DIGITS_MAX, "description": "minor units"}
    elif kind == TEXTS:
        result = {"type": "array", "items": {"type": "string"}, "minItems": 1}
        if spec.items_max is not None:
            result["maxItems"] = spec.items_max
    elif kind == OBJECTS:
        result = {"type": "array", "items": {"type": "object"}, "minItems": 1}
        if spec.maximum is not None:
            result["maxItems"] = spec.bound(spec.maximum, limits)
    else:
        raise AssertionError(f"no field kind {kind!r}")
    if spec.description:
        # A description may name limits, e.g. "capped at {wait_ms_max}".
        result["description"] = spec.description.format(**{f.name: getattr(limits, f.name) for f in dataclasses.fields(limits)})
    if not spec.required and "type" in result:
        result["type"] = [result["type"], "null"]
    return result


def body_fields(command_class: type) -> Iterator[Spec]:
    """The fields a command reads from the JSON body."""
    for _, spec in specs(command_class):
        if spec.source == BODY:
            yield spec


def query_fields(command_class: type) -> Iterator[Spec]:
    """The fields a command reads from the query string."""
    for _, spec in specs(command_class):
        if spec.source == QUERY:
            yield spec
