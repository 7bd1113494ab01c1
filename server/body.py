"""Reading a JSON request body: one parse into an object, and a clear 400 for anything else.

The fields of the object are read and checked by the declarations of the command they belong to
(`actors/fields.py`), in one place; this module only turns bytes into the object.

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
from .errors import ApiError

__all__ = ["Body", "parse_body", "INTEGER_MIN", "INTEGER_MAX"]

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


class Body:
    """A parsed request body: the JSON object, its fields not yet read."""

    __slots__ = ("data",)

    def __init__(self, data: dict[str, Any]) -> None:
        self.data = data
