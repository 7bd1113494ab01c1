"""Work keys: what names one piece of work for `once` and for queue jobs, in every process.

A key is `<name>:<first 32 hex digits of sha256(canonical JSON of the arguments)>`, or
`<name>:<what key= returned>`. The canonical JSON is what JavaScript's `JSON.stringify` writes for
the same value with every object's keys sorted (by UTF-16 code units, as JavaScript compares
strings) and no spaces. That makes a key the same in this SDK, in the official 0.3.0 client and in
a TypeScript process: a worker running one and a worker running another share one result.

Only plain JSON values name work: `None`, booleans, numbers, strings, lists and tuples (as
arrays), and dicts with string keys; dataclasses and pydantic models count as the dicts they dump
to. Anything else (a set, a datetime, an object) could hash differently in another process, so it
is a `ConfigError` naming where it is, and the caller passes `key=` instead.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
from decimal import Decimal
from typing import Any, Callable, Sequence

from .errors import ConfigError

__all__ = ["canonical_json", "js_number", "hash_arguments", "work_key", "check_name", "NAME_LEN_MAX"]

NAME_LEN_MAX = 256
# A key= result is at most this long (the server's key limit leaves room for the name).
CUSTOM_KEY_LEN_MAX = 255
# Hex digits of the digest kept in a key.
DIGEST_HEX = 32
# JavaScript's largest exact integer: beyond it a number is a double there.
EXACT_INT_MAX = 2**53

_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def check_name(name: object, what: str) -> str:
    if not isinstance(name, str) or not 1 <= len(name) <= NAME_LEN_MAX:
        raise ConfigError(f"{what} names are 1 to {NAME_LEN_MAX} characters")
    return name


def js_number(value: float) -> str:
    """A finite number as JavaScript's `String(number)` writes it (ECMAScript Number::toString):
    the shortest digits that read back as the number, in plain notation from 1e-6 to 1e21."""
    if value == 0:
        return "0"
    sign = "-" if value < 0 else ""
    # The shortest round-trip digits (what repr finds), and where the decimal point goes.
    _, digit_tuple, exponent = Decimal(repr(abs(value))).as_tuple()
    assert isinstance(exponent, int)
    digits = "".join(map(str, digit_tuple))
    stripped = digits.rstrip("0")
    exponent += len(digits) - len(stripped)
    digits = stripped
    count = len(digits)
    point = count + exponent  # the decimal point sits after this many digits
    if count <= point <= 21:
        return sign + digits + "0" * (point - count)
    if 0 < point <= 21:
        return sign + digits[:point] + "." + digits[point:]
    if -6 < point <= 0:
        return sign + "0." + "0" * -point + digits
    power = point - 1
    mantissa = digits if count == 1 else digits[0] + "." + digits[1:]
    return f"{sign}{mantissa}e{'+' if power >= 0 else '-'}{abs(power)}"


def _string(text: str) -> str:
    # As a JavaScript string sees it: halves of a surrogate pair join; a lone half is escaped.
    text = text.encode("utf-16-be", "surrogatepass").decode("utf-16-be", "surrogatepass")
    out = ['"']
    for char in text:
        escaped = _ESCAPES.get(char)
        code = ord(char)
        if escaped is not None:
            out.append(escaped)
        elif code < 0x20 or 0xD800 <= code <= 0xDFFF:
            out.append(f"\\u{code:04x}")
        else:
            out.append(char)
    out.append('"')
    return "".join(out)


def _number(value: int | float, where: str) -> str:
    if isinstance(value, int):
        if abs(value) <= EXACT_INT_MAX:
            return str(value)
        try:
            value = float(value)
        except OverflowError:
            raise ConfigError(f"{where} is too large to be part of a key") from None
    if not math.isfinite(value):
        raise ConfigError(f"{where} is {value}, which cannot be part of a key")
    return js_number(value)


def _utf16_order(key: str) -> bytes:
    return key.encode("utf-16-be", "surrogatepass")


def _object(value: dict[Any, Any], where: str, out: list[str]) -> None:
    for name in value:
        if not isinstance(name, str):
            raise ConfigError(f"{where} has a {type(name).__name__} key; only string keys can be part of a key")
    out.append("{")
    for index, name in enumerate(sorted(value, key=_utf16_order)):
        if index:
            out.append(",")
        out.append(_string(name))
        out.append(":")
        _write(value[name], f"{where}.{name}", out)
    out.append("}")


def _write(value: Any, where: str, out: list[str]) -> None:
    if value is None:
        out.append("null")
    elif value is True or value is False:
        out.append("true" if value else "false")
    elif isinstance(value, str):
        out.append(_string(value))
    elif isinstance(value, (int, float)):
        out.append(_number(value, where))
    elif isinstance(value, (list, tuple)):
        out.append("[")
        for index, item in enumerate(value):
            if index:
                out.append(",")
            _write(item, f"{where}[{index}]", out)
        out.append("]")
    elif isinstance(value, dict):
        _object(value, where, out)
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        _object({field.name: getattr(value, field.name) for field in dataclasses.fields(value)}, where, out)
    elif hasattr(type(value), "model_fields") and callable(getattr(value, "model_dump", None)):
        dumped = value.model_dump()
        if not isinstance(dumped, dict):
            raise ConfigError(f"{where} is a {type(value).__name__} that does not dump to a dict; pass key= to name this work")
        _object(dumped, where, out)
    else:
        raise ConfigError(f"{where} is a {type(value).__name__}; pass key= to name this work")


def canonical_json(value: Any) -> str:
    """`JSON.stringify(value)` with sorted keys; a `ConfigError` for anything that is not plain JSON."""
    out: list[str] = []
    _write(value, "$", out)
    return "".join(out)


def hash_arguments(arguments: Sequence[Any]) -> str:
    return hashlib.sha256(canonical_json(list(arguments)).encode("utf-8")).hexdigest()[:DIGEST_HEX]


def work_key(
    name: str,
    args: Sequence[Any],
    custom: Callable[..., Any] | None = None,
    kwargs: dict[str, Any] | None = None,
) -> str:
    """The work key of a call: `key=`'s answer when there is one, else the arguments' hash (the
    keyword arguments, if any, hashed as one object after the positional ones)."""
    kwargs = kwargs or {}
    if custom is not None:
        chosen = custom(*args, **kwargs)
        if not isinstance(chosen, str) or not 1 <= len(chosen) <= CUSTOM_KEY_LEN_MAX:
            raise ConfigError(f"key() must return a string of 1 to {CUSTOM_KEY_LEN_MAX} characters")
        return f"{name}:{chosen}"
    hashed = list(args)
    if kwargs:
        hashed.append(dict(kwargs))
    return f"{name}:{hash_arguments(hashed)}"
