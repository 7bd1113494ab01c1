"""Reading a JSON request body: one parse into an object, and a clear 400 for anything else.

The fields of the object are read and checked by the declarations of the command they belong to
(`actors/fields.py`), in one place; this module only turns bytes into the object.

No value changes on its way in. orjson keeps integers from -2**63 to 2**64-1 exactly and turns any
other integer into a float, silently; such an integer, anywhere in the body (a field or deep in a
payload), is a 400 naming where it is, since we cannot keep it and will not round it. Floats are
floats: `1.5` and `1e3` arrive as sent, and so do strings of digits of any length.

Finding those integers is one scan of the raw bytes that cannot raise, whatever the body holds
(nested as deep as orjson allows, a run of 5000 digits): the strings are found by one regular
expression, the runs of 19 digits or more (2**63 has 19) by another, and a run counts only outside
the strings and when it is a whole integer (not a fraction's or an exponent's digits); its digits
are compared by length and as text, never converted whole. The place it is named by is found by walking the structure up
to it, without recursion. An integer out of range in a top-level field of a command that reads it
as an integer is refused in that field's own words (its range), the way a value in range but
outside the field's limits would be.
"""

from __future__ import annotations

import bisect
import re
from typing import Any

import orjson

from ..actors.errors import VALIDATION_FAILED, quote
from ..actors.fields import BODY, INTEGER, integer_range, specs
from .errors import ApiError

__all__ = ["Body", "parse_body", "INTEGER_MIN", "INTEGER_MAX"]

# The integers a body may hold: what orjson reads and writes exactly (signed and unsigned 64 bits).
INTEGER_MIN = -(2**63)
INTEGER_MAX = 2**64 - 1
_MAX_TEXT, _MIN_TEXT = str(INTEGER_MAX).encode(), str(-INTEGER_MIN).encode()
# A run of this many digits may be an integer out of range (2**63 has 19); without one, none is.
_LONG_DIGITS = re.compile(rb"\d{19}")
# Over valid JSON (orjson has parsed it first), these find exactly its strings and its numbers.
_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)
_LONG_RUN = re.compile(rb"-?\d{19,}")
_STRUCTURE = re.compile(rb'"(?:[^"\\]|\\.)*"|[{}\[\],:]', re.DOTALL)
# Naming the place of a wide integer walks the body up to it: only this far (else its byte offset).
_PLACE_SCAN_BYTES_MAX = 256 * 1024
# Digits shown of a wide integer in a message.
_DIGITS_SHOWN = 40


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
    wide = _first_wide_integer(raw) if _LONG_DIGITS.search(raw) else None
    return Body(data, wide, raw if wide is not None else b"")


def _out_of_range(token: bytes) -> bool:
    """Whether an integer token (`-?digits`) is outside INTEGER_MIN..INTEGER_MAX, compared as text."""
    negative = token.startswith(b"-")
    digits = token[1:] if negative else token
    digits = digits.lstrip(b"0") or b"0"
    bound = _MIN_TEXT if negative else _MAX_TEXT
    return len(digits) > len(bound) or (len(digits) == len(bound) and digits > bound)


def _first_wide_integer(raw: bytes) -> tuple[int, bytes] | None:
    """(offset, token) of the first integer orjson turned into a float, or None. Never raises."""
    starts: list[int] = []
    ends: list[int] = []
    for match in _STRING.finditer(raw):
        starts.append(match.start())
        ends.append(match.end())
    for match in _LONG_RUN.finditer(raw):
        at, end = match.start(), match.end()
        index = bisect.bisect_right(starts, at) - 1
        if index >= 0 and at < ends[index]:
            continue  # digits inside a string
        sign_at = at if raw[at] == 45 else at - 1  # 45: "-"
        before = raw[sign_at - 1:sign_at] if raw[at] == 45 else raw[at - 1:at]
        if before and before in b".eE+-" or raw[end:end + 1] in (b".", b"e", b"E"):
            continue  # a fraction, an exponent, or digits before them: a float, as sent
        token = match.group(0)
        if _out_of_range(token):
            return at, token
    return None


def _place(raw: bytes, offset: int) -> str | None:
    """The path (`payload[1].n`) of the value at `offset`, walking the structure before it; None
    when that is too far in to walk for a refusal."""
    if offset > _PLACE_SCAN_BYTES_MAX:
        return None
    # One frame per open container: [is_object, key or index, expecting a key].
    stack: list[list[Any]] = []
    for match in _STRUCTURE.finditer(raw, 0, offset):
        token = match.group(0)
        if token == b"{":
            stack.append([True, None, True])
        elif token == b"[":
            stack.append([False, 0, False])
        elif token in (b"}", b"]"):
            if stack:
                stack.pop()
        elif token == b",":
            if stack:
                frame = stack[-1]
                if frame[0]:
                    frame[2] = True
                else:
                    frame[1] += 1
        elif token == b":":
            if stack:
                stack[-1][2] = False
        elif stack and stack[-1][0] and stack[-1][2]:  # a key
            try:
                stack[-1][1] = orjson.loads(token)
            except orjson.JSONDecodeError:
                return None
    if not stack:
        return None
    path = ""
    for is_object, where, _ in stack:
        if is_object:
            path += f".{where}" if path else str(where)
        else:
            path += f"[{where}]"
    return path


def _shown(token: bytes) -> str:
    text = token.decode("ascii")
    if len(text) <= _DIGITS_SHOWN:
        return text
    return f"{text[:_DIGITS_SHOWN]}... ({len(text.lstrip('-'))} digits)"


class Body:
    """A parsed request body: the JSON object, its fields not yet read.

    `wide` is the first integer the body holds out of the 64-bit range (offset, digits), if any:
    reading `data` then refuses the body naming where it is; `for_command` refuses it in the words
    of the command's field when it is one of its top-level integers.
    """

    __slots__ = ("_data", "_wide", "_raw")

    def __init__(self, data: dict[str, Any], wide: tuple[int, bytes] | None = None, raw: bytes = b"") -> None:
        self._data = data
        self._wide = wide
        self._raw = raw

    @property
    def data(self) -> dict[str, Any]:
        if self._wide is not None:
            self._refuse()
        return self._data

    def for_command(self, command_class: type, limits: Any) -> dict[str, Any]:
        """The object, for `command_class`'s parser; an integer out of range in one of its integer
        fields is refused with that field's range."""
        if self._wide is not None:
            offset, token = self._wide
            place = _place(self._raw, offset)
            for _, spec in specs(command_class):
                if spec.source == BODY and spec.kind == INTEGER and spec.wire == place:
                    low, high = spec.bound(spec.minimum, limits), spec.bound(spec.maximum, limits)
                    # A field with no most of its own still has the body's: say it, as the value is past it.
                    high = INTEGER_MAX if high is None else high
                    raise ApiError(VALIDATION_FAILED, f"field {spec.wire!r} must be {integer_range(low, high)}, got {_shown(token)}")
            self._refuse(place)
        return self._data

    def _refuse(self, place: str | None = None) -> None:
        assert self._wide is not None
        offset, token = self._wide
        if place is None:
            place = _place(self._raw, offset)
        where = f"field {quote(place)}" if place else f"the request body (at byte {offset})"
        raise ApiError(
            VALIDATION_FAILED,
            f"{where} holds an integer ({_shown(token)}) outside {INTEGER_MIN}..{INTEGER_MAX}, which cannot be kept "
            "exactly; send it as a string",
        )
