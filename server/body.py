"""Reading a JSON request body: one parse, typed fields, and a clear 400 for anything else.

The official client leaves optional fields out rather than sending null, and the v1 wire contract asks us
to treat a missing key and `null` alike, so an optional field that is null is simply absent. A
required field that is missing or null, or any field of the wrong JSON type, is VALIDATION_FAILED
naming the field. Integers are JSON integers: `30.0`, `"30"` and `true` are refused, not coerced.
Unknown fields are ignored, so newer clients that send more still work.

No value changes on its way in. orjson keeps integers from -2**63 to 2**64-1 exactly and turns any
other integer into a float, silently; such an integer, anywhere in the body (a field or deep in a
payload), is a 400 naming where it is, since we cannot keep it and will not round it. Floats
are floats: `1.5` and `1e3` arrive as sent.
"""

from __future__ import annotations

import json
import re
from typing import Any

import orjson

from ..actors.errors import VALIDATION_FAILED, quote
from ..actors.limits import Limits
from ..actors.timestamps import parse_timestamp
from .errors import ApiError

__all__ = ["Body", "parse_body", "payload_size", "depth_exceeds", "INTEGER_MIN", "INTEGER_MAX"]

# The integers a body may hold: what orjson reads and writes exactly (signed and unsigned 64 bits).
INTEGER_MIN = -(2**63)
INTEGER_MAX = 2**64 - 1
# A run of this many digits may be an integer out of range (2**63 has 19); without one, none is.
_LONG_DIGITS = re.compile(rb"\d{19}")

def parse_body(raw: bytes) -> "Body":
    """The body as an object; an empty body is an empty object (bodyless POSTs are allowed)."""
    if not raw:
        return Body({})
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as error:
        raise ApiError(VALIDATION_FAILED, f"request body is not valid JSON: {error}") from None
    if not isinstance(data, dict):
        raise ApiError(VALIDATION_FAILED, "request body must be a JSON object")
    if _LONG_DIGITS.search(raw):
        _refuse_wide_integers(raw)
    return Body(data)


def _refuse_wide_integers(raw: bytes) -> None:
    """VALIDATION_FAILED naming the first integer orjson would have turned into a float.

    Only bodies with a long run of digits come here; the standard library's parser keeps every
    integer exactly, so it tells which ones are out of range and where.
    """
    try:
        exact = json.loads(raw)
    except RecursionError:  # nested past Python's stack, though within orjson's limit
        exact = None
    except ValueError:
        return
    if exact is None:
        if any(not INTEGER_MIN <= int(m) <= INTEGER_MAX for m in re.findall(rb"-?\d{19,}", raw)):
            raise ApiError(VALIDATION_FAILED, _wide_message("the request body", None))
        return
    stack: list[tuple[Any, str]] = [(value, name) for name, value in exact.items()]
    while stack:
        item, where = stack.pop()
        if isinstance(item, dict):
            stack.extend((child, f"{where}.{key}") for key, child in item.items())
        elif isinstance(item, list):
            stack.extend((child, f"{where}[{index}]") for index, child in enumerate(item))
        elif isinstance(item, int) and not isinstance(item, bool) and not INTEGER_MIN <= item <= INTEGER_MAX:
            raise ApiError(VALIDATION_FAILED, _wide_message(f"field {where!r}", item))


def _wide_message(where: str, value: int | None) -> str:
    shown = "" if value is None else f" ({quote(value)})"
    return (
        f"{where} holds an integer{shown} outside {INTEGER_MIN}..{INTEGER_MAX}, which cannot be kept "
        "exactly; send it as a string"
    )


def payload_size(value: Any) -> int:
    return len(orjson.dumps(value))


def depth_exceeds(value: Any, depth_max: int) -> bool:
    """True when containers nest deeper than `depth_max` (checked without recursion)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > depth_max:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False


class Body:
    __slots__ = ("data",)

    def __init__(self, data: dict[str, Any]) -> None:
        self.data = data

    def _required(self, name: str) -> Any:
        value = self.data.get(name)
        if value is None:
            raise ApiError(VALIDATION_FAILED, f"field {name!r} is required")
        return value

    def text(self, name: str) -> str:
        value = self._required(name)
        if not isinstance(value, str):
            raise ApiError(VALIDATION_FAILED, f"field {name!r} must be a string")
        return value

    def opt_text(self, name: str) -> str | None:
        return None if self.data.get(name) is None else self.text(name)

    def integer(self, name: str) -> int:
        value = self._required(name)
        if not isinstance(value, int) or isinstance(value, bool):
            raise ApiError(VALIDATION_FAILED, f"field {name!r} must be an integer")
        return value

    def opt_integer(self, name: str, default: int | None = None) -> int | None:
        return default if self.data.get(name) is None else self.integer(name)

    def boolean(self, name: str) -> bool:
        value = self._required(name)
        if not isinstance(value, bool):
            raise ApiError(VALIDATION_FAILED, f"field {name!r} must be true or false")
        return value

    def opt_boolean(self, name: str, default: bool | None = None) -> bool | None:
        return default if self.data.get(name) is None else self.boolean(name)

    def opt_timestamp(self, name: str) -> int | None:
        """An RFC 3339 timestamp with a zone, as wall milliseconds; None when absent."""
        value = self.opt_text(name)
        if value is None:
            return None
        try:
            return parse_timestamp(value)
        except ValueError as error:
            raise ApiError(
                VALIDATION_FAILED,
                f"field {name!r} must be an ISO 8601 timestamp with a zone, e.g. 2026-01-31T12:00:00Z ({error})",
            ) from None

    def value(self, name: str, limits: Limits) -> Any:
        """Caller data of any JSON type (null when absent), within the payload size and depth limits."""
        value = self.data.get(name)
        if value is None:
            return None
        if depth_exceeds(value, limits.json_depth_max):
            raise ApiError(VALIDATION_FAILED, f"field {name!r} nests deeper than {limits.json_depth_max} levels")
        if payload_size(value) > limits.payload_bytes_max:
            raise ApiError(VALIDATION_FAILED, f"field {name!r} exceeds {limits.payload_bytes_max} bytes")
        return value

    def obj(self, name: str, limits: Limits) -> dict | None:
        value = self.value(name, limits)
        if value is not None and not isinstance(value, dict):
            raise ApiError(VALIDATION_FAILED, f"field {name!r} must be a JSON object")
        return value
