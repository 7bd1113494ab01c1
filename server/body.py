"""Reading a JSON request body: one parse into an object, and a clear 400 for anything else.

The fields of the object are read and checked by the declarations of the command they belong to
(`actors/fields.py`), in one place; this module only turns bytes into the object.
"""

from __future__ import annotations

from typing import Any

import orjson

from ..actors.errors import VALIDATION_FAILED
from .errors import ApiError

__all__ = ["Body", "parse_body"]


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
    return Body(data)


class Body:
    """A parsed request body: the JSON object, its fields not yet read."""

    __slots__ = ("data",)

    def __init__(self, data: dict[str, Any]) -> None:
        self.data = data
