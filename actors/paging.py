"""Listings read a page at a time: a run's claims, tasks, barriers, timers and groups, a space's runs.

A page's cursor names the last row it showed by that row's place in the listing's order, and the
next page holds the rows strictly past that place, as etcd's range with a start key does: a row
added or removed between two pages moves no other row, so none is skipped or shown twice (a row
added behind the cursor is on no page of this reading; a row removed is on none from then on).
The place is a key that never changes while the row lives: (`created_ms`, id) for what lists
newest first, the claim key for claims (a claim's holder and acquisition change with each lease,
its key does not).

A cursor is opaque to its reader: the place written as JSON, then base64url without padding. It
is read back only as the same shape (an integer and a string, or a string), else it is
VALIDATION_FAILED: a cursor this server did not give out.

Pure: no IO, no clock reads.
"""

from __future__ import annotations

import base64
import binascii
import heapq
from typing import Callable, Iterable, TypeVar

import orjson

from .errors import VALIDATION_FAILED, KernelError, quote

__all__ = ["CURSOR_LEN_MAX", "newest_first", "by_key", "created_cursor", "key_cursor", "parse_created", "parse_key"]

Row = TypeVar("Row")

# The longest cursor read: a claim key of 512 characters of 4 UTF-8 bytes each, written as JSON
# (escapes at most six bytes for one character) and in base64, fits.
CURSOR_LEN_MAX = 4200


def newest_first(
    rows: Iterable[Row], place: Callable[[Row], tuple[int, str]], after: tuple[int, str] | None, limit: int,
) -> tuple[list[Row], tuple[int, str] | None]:
    """The next page of `rows` newest first by `place` (larger first), past `after`; and the
    place of its last row when more follow (None on the last page)."""
    assert limit >= 1, f"a page shows at least one row: {limit}"
    candidates = rows if after is None else (row for row in rows if place(row) < after)
    shown = heapq.nlargest(limit + 1, candidates, key=place)
    more = len(shown) > limit
    assert all(after is None or place(row) < after for row in shown)
    return shown[:limit], place(shown[limit - 1]) if more else None


def by_key(
    rows: Iterable[Row], place: Callable[[Row], str], after: str | None, limit: int,
) -> tuple[list[Row], str | None]:
    """The next page of `rows` in the order of their keys (smallest first), past `after`; and the
    key of its last row when more follow (None on the last page)."""
    assert limit >= 1, f"a page shows at least one row: {limit}"
    candidates = rows if after is None else (row for row in rows if place(row) > after)
    shown = heapq.nsmallest(limit + 1, candidates, key=place)
    more = len(shown) > limit
    return shown[:limit], place(shown[limit - 1]) if more else None


def _encode(value: object) -> str:
    return base64.urlsafe_b64encode(orjson.dumps(value)).rstrip(b"=").decode("ascii")


def _decode(text: str) -> object:
    """The value a cursor holds, or VALIDATION_FAILED for text this server would not have written."""
    refusal = KernelError(VALIDATION_FAILED, f"cursor {quote(text)} is not a cursor of this listing")
    if not text or len(text) > CURSOR_LEN_MAX or not text.isascii() or not all(c.isalnum() or c in "-_" for c in text):
        raise refusal
    try:
        return orjson.loads(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
    except (binascii.Error, ValueError):  # (orjson.JSONDecodeError is a ValueError)
        raise refusal from None


def created_cursor(place: tuple[int, str]) -> str:
    return _encode(list(place))


def key_cursor(place: str) -> str:
    return _encode(place)


def parse_created(text: str) -> tuple[int, str]:
    """The (`created_ms`, id) a cursor of a newest-first listing names."""
    value = _decode(text)
    if (
        not isinstance(value, list) or len(value) != 2 or type(value[0]) is not int or value[0] < 0
        or not isinstance(value[1], str)
    ):
        raise KernelError(VALIDATION_FAILED, f"cursor {quote(text)} is not a cursor of this listing")
    return value[0], value[1]


def parse_key(text: str) -> str:
    """The key a cursor of a listing in the order of its keys names."""
    value = _decode(text)
    if not isinstance(value, str):
        raise KernelError(VALIDATION_FAILED, f"cursor {quote(text)} is not a cursor of this listing")
    return value
