"""Wall-clock timestamps on the wire: formatting and parsing, pure functions.

Persisted and transmitted times are UTC wall milliseconds since the Unix epoch. The wire format
the official client parses is exactly `YYYY-MM-DDTHH:MM:SS.mmmZ`; what clients send us (deadlines)
is any RFC 3339 timestamp with a zone.
"""

from __future__ import annotations

import time
from datetime import datetime, timezone

__all__ = ["format_ms", "parse_timestamp"]


# Formatted stamps and formatted seconds, each cleared whole when full (a dict read or write is
# atomic, so a reader in another thread sees an entry or none, never half of one). A reply
# usually stamps `now` and `now + lease`, and a busy server stamps the same few milliseconds in
# many replies: most stamps are one lookup, and a new millisecond of a second already seen costs
# no strftime.
_STAMPS: dict[int, str] = {}
STAMPS_CACHED_MAX = 1024
_SECONDS: dict[int, str] = {}
SECONDS_CACHED_MAX = 4096


def format_ms(wall_ms: int) -> str:
    """Wall milliseconds as the wire format `YYYY-MM-DDTHH:MM:SS.mmmZ` (exactly 3 digits, uppercase Z)."""
    stamp = _STAMPS.get(wall_ms)
    if stamp is not None:
        return stamp
    if len(_STAMPS) >= STAMPS_CACHED_MAX:
        _STAMPS.clear()
    seconds, millis = divmod(wall_ms, 1000)
    prefix = _SECONDS.get(seconds)
    if prefix is None:
        if len(_SECONDS) >= SECONDS_CACHED_MAX:
            _SECONDS.clear()
        # (Not strftime's %Y: it writes year 99 as "99", and the wire's year has four digits.)
        at = time.gmtime(seconds)
        prefix = _SECONDS[seconds] = (
            f"{at.tm_year:04d}-{at.tm_mon:02d}-{at.tm_mday:02d}T{at.tm_hour:02d}:{at.tm_min:02d}:{at.tm_sec:02d}"
        )
    stamp = _STAMPS[wall_ms] = f"{prefix}.{millis:03d}Z"
    return stamp


def parse_timestamp(text: str) -> int:
    """An RFC 3339 / ISO 8601 timestamp with a `Z` or an offset as wall milliseconds.

    Any number of fraction digits is accepted. A timestamp without a zone is refused: guessing
    the zone of a deadline is how work expires an hour early. Raises `ValueError`.
    """
    if not isinstance(text, str) or not 10 <= len(text) <= 64:
        raise ValueError("not an ISO 8601 timestamp")
    value = text.strip()
    if value[-1:] in ("Z", "z"):
        value = value[:-1] + "+00:00"
    if "T" not in value and "t" not in value and " " not in value:
        raise ValueError("an ISO 8601 timestamp needs a date and a time")
    value = value.replace("t", "T")
    head, dot, tail = value.partition(".")
    if dot:
        # fromisoformat (3.11) takes any fraction length, but normalise to 6 digits so the
        # arithmetic below is exact and 9-digit nanoseconds are accepted too.
        digits = 0
        while digits < len(tail) and tail[digits].isdigit():
            digits += 1
        if digits == 0:
            raise ValueError("empty fraction")
        value = f"{head}.{tail[:digits][:6].ljust(6, '0')}{tail[digits:]}"
    parsed = datetime.fromisoformat(value)
    if parsed.tzinfo is None:
        raise ValueError("timestamp has no zone: add Z or an offset such as +00:00")
    try:  # in UTC it must still be a year from 1 to 9999, as the wire writes it (YYYY)
        parsed.astimezone(timezone.utc)
    except OverflowError:
        raise ValueError("timestamp is out of range: in UTC it falls before year 1 or after year 9999") from None
    delta = parsed - datetime(1970, 1, 1, tzinfo=timezone.utc)
    return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000
