"""The read of a space, and what every page shares: keys, cursors and pages, previews."""

from __future__ import annotations

import base64
import heapq
from typing import Any, Callable, Iterable, TypeVar

import orjson

from ....actors import events as event_log
from ....actors.errors import NOT_FOUND, VALIDATION_FAILED, KernelError, quote
from ....actors.events import Change
from ....actors.keys import digest
from ....actors.outcome import ActorKey
from ....actors.shapes import View
from ....actors.space import SpaceState
from ...services import RouteKernel
from ... import wire

T = TypeVar("T")
# A row's place in a list's order, and what a page's cursor carries: (time, id), (key, run), ...
Cursor = tuple[int | str, ...]

PAGE_DEFAULT = 50
PAGE_MAX = 500
# Events listed on a task's or a run's page.
HISTORY_MAX = 100
# How much of a caller's value (a payload, a result) a row previews; the JSON view shows it whole.
PREVIEW_CHARS_MAX = 80
JSON_BYTES_MAX = 256 * 1024


class _Reading:
    """What the shared reads of `actors/` need of a kernel, inside one `kernel.read`: the space
    given to the view (`space_view`), the clock, and the calls parked now (all, or on one actor)."""

    __slots__ = ("_space", "clock", "_kernel")

    def __init__(self, kernel: RouteKernel, space: SpaceState) -> None:
        self._space = space
        self.clock = kernel.clock
        self._kernel = kernel

    def space_view(self, space_id: str) -> SpaceState:
        assert space_id == self._space.id, "a read looks at the one space it was given"
        return self._space

    def parked(self) -> list[tuple[ActorKey, int]]:
        return self._kernel.parked()

    def parked_commands(self, key: ActorKey) -> list[Any]:
        return self._kernel.parked_commands(key)

    def parked_holders(self, key: ActorKey, count_max: int) -> list[str]:
        return self._kernel.parked_holders(key, count_max)


async def _read(kernel: RouteKernel, space_id: str, view: Callable[[SpaceState | None, int], View]) -> View:
    """`view(space, now_ms)` with the cursor of the newest event it saw; an empty space is None."""

    def look(space: SpaceState | None) -> dict[str, Any]:
        answer = view(space, kernel.clock.now_ms())
        answer["cursor"] = 0 if space is None else space.events.seq
        return answer

    return await kernel.read(space_id, look)


def _required(space: SpaceState | None, what: str) -> SpaceState:
    if space is None:
        raise KernelError(NOT_FOUND, f"{what} not found (nothing was ever recorded in this space)")
    return space


def key_spaces(kernel: RouteKernel, secret: str) -> frozenset[str]:
    """The spaces an API key opens now (none when it is unknown or revoked)."""
    return kernel.keys.spaces_for(secret)


def key_access(kernel: RouteKernel, secret: str) -> tuple[frozenset[str], str | None]:
    """The spaces an API key opens now and its role; (nothing, None) when it is unknown or revoked."""
    key = kernel.keys.active(secret)
    return (frozenset(), None) if key is None else (key.spaces, key.role)


def key_named(kernel: RouteKernel, secret: str) -> tuple[str | None, str | None, bool]:
    """An API key's id and name, and whether it was revoked; (None, None, False) when unknown."""
    key = kernel.keys.by_digest(digest(secret))
    return (None, None, False) if key is None else (key.id, key.name, key.revoked_ms is not None)


def known_spaces(kernel: RouteKernel) -> list[str]:
    """Every space the server knows: one that holds anything, or that a key opens (the admin's list)."""
    return sorted({space.id for space in kernel.spaces()} | kernel.keys.spaces())


async def newest_event(kernel: RouteKernel, space_id: str) -> int:
    """The number of the newest event of the space (0 when there is none)."""
    return await kernel.read(space_id, lambda space: 0 if space is None else space.events.seq)


# -- cursors and pages -------------------------------------------------------------------------


def encode_cursor(key: Cursor) -> str:
    return base64.urlsafe_b64encode(orjson.dumps(list(key))).decode().rstrip("=")


def decode_cursor(text: str, shape: tuple[type, ...]) -> Cursor:
    """A cursor made by `encode_cursor` for a key of these types; VALIDATION_FAILED for anything else."""
    try:
        key = orjson.loads(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
    except (ValueError, orjson.JSONDecodeError):
        key = None
    if not isinstance(key, list) or len(key) != len(shape) or not all(type(v) is t for v, t in zip(key, shape)):
        raise KernelError(VALIDATION_FAILED, f"cursor {quote(text)} is not one this list made; start again from the first page")
    return tuple(key)


def _paged(items: Iterable[T], key: Callable[[T], Cursor], shape: tuple[type, ...], cursor: str | None, limit: int,
           newest_first: bool = True) -> tuple[list[T], str | None, int]:
    """The `limit` rows after `cursor` in the order of `key` (descending when `newest_first`), the
    cursor of the next page (None on the last) and how many rows match in all."""
    rows = list(items)
    total = len(rows)
    if cursor is not None:
        after = decode_cursor(cursor, shape)
        rows = [row for row in rows if (key(row) < after if newest_first else key(row) > after)]
    chosen = (heapq.nlargest if newest_first else heapq.nsmallest)(limit + 1, rows, key=key)
    more = len(chosen) > limit
    chosen = chosen[:limit]
    return chosen, encode_cursor(key(chosen[-1])) if more else None, total


def preview(value: Any) -> str:
    """A caller's value on one line, cut to PREVIEW_CHARS_MAX characters."""
    if value is None:
        return ""
    text = orjson.dumps(value).decode()
    return text if len(text) <= PREVIEW_CHARS_MAX else text[: PREVIEW_CHARS_MAX - 1] + "…"


def pretty(value: Any) -> str:
    """A caller's value as indented JSON, cut at JSON_BYTES_MAX with the full size said."""
    text = orjson.dumps(value, option=orjson.OPT_INDENT_2).decode()
    if len(text) <= JSON_BYTES_MAX:
        return text
    return text[:JSON_BYTES_MAX] + f"\n… ({len(text)} characters in all; cut here)"


def _short_token(token: str | None) -> str | None:
    """A fencing token shortened for people: enough to tell two apart, never enough to use one."""
    return None if token is None else token[:10] + "…"


def _history(space: SpaceState, match: Callable[[Change], bool]) -> list[View]:
    """The newest HISTORY_MAX events whose change matches, newest first."""
    found = []
    for seq, change, at_ms in space.events.scan(newest_first=True):
        if match(change):
            found.append(wire.encode(space.events.made(seq, change, at_ms).view()))
            if len(found) >= HISTORY_MAX:
                break
    return found


def _acquirers(kernel: RouteKernel, space_id: str) -> dict[tuple[str, str], int]:
    """Acquires parked now (waitMs), per claim (run, key): who waits for a held claim."""
    return {(key[2], key[3]): calls for key, calls in kernel.parked() if key[0] == "claim" and key[1] == space_id}


async def events_after(kernel: RouteKernel, space_id: str, after: int, limit: int) -> tuple[list[dict[str, Any]], int]:
    """Events after the cursor `after`, oldest first, at most `limit`, and the cursor after them
    (CURSOR_EXPIRED for one no longer kept): what a stream resuming at `after` sends first."""

    def view(space: SpaceState | None) -> tuple[list[dict[str, Any]], int]:
        if space is None:
            if after:
                raise KernelError(event_log.CURSOR_EXPIRED, f"cursor {after} is ahead of this space's events (none)")
            return [], 0
        page = event_log.page(space, after, limit, None, None, None)
        return [wire.encode(event) for event in page.events], int(page.next_cursor)  # (as the API writes them)

    return await kernel.read(space_id, view)
