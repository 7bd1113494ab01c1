"""Durations, quota windows and money for the run-bound API, read the way the 0.3.0 client reads them.

- A **duration** is a number of seconds (`30`, `0.5`) or a string of one number and a unit:
  `"500ms"`, `"30s"`, `"10m"`, `"2h"`, `"1d"`.
- A quota window (**per**) is `"second"`, `"minute"`, `"hour"`, `"day"`, or a duration of whole
  seconds from 1 s to a day.
- An **amount** is money in major units (`0.40`, `"0.40"`, `12`), turned into a string of minor
  units with integer arithmetic only. A string must fit the budget's scale exactly; a number is
  rounded half up to it from its shortest decimal form, so `0.1 + 0.2` still means 0.30.

Anything else is a `ConfigError` that says what was expected.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal
from typing import TypeGuard, Union

from .errors import ConfigError

__all__ = [
    "Duration", "Per", "Amount", "parse_duration", "parse_per", "to_minor", "from_minor", "lease_seconds",
    "LEASE_S_MIN", "LEASE_S_MAX",
]

Duration = Union[int, float, str]
"""A length of time as 0.3.0 writes it: seconds (`30`, `0.5`) or text (`"30s"`, `"10m"`, `"2h"`)."""
Per = Union[int, float, str]
"""A quota's window: seconds, text (`"90s"`), or `"second"`, `"minute"`, `"hour"`, `"day"`."""
Amount = Union[int, float, str]
"""Money as 0.3.0 writes it: a number (`0.40`) or decimal text (`"0.40"`), in the budget's currency."""

# What a lease option is held to: the server's own limits.
LEASE_S_MIN, LEASE_S_MAX = 5, 600
# JavaScript's largest exact integer: a bigger number is a double there, and is read as one here.
EXACT_INT_MAX = 2**53

_UNITS_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_WINDOWS_S = {"second": 1, "minute": 60, "hour": 3600, "day": 86400}
_DURATION = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)\s*")
_DECIMAL = re.compile(r"(\d+)(?:\.(\d+))?")


def _is_number(value: object) -> TypeGuard[int | float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def parse_duration(value: Duration, what: str = "duration") -> float:
    """Seconds, a finite number of 0 or more."""
    if _is_number(value):
        try:
            seconds = float(value)
        except OverflowError:
            seconds = math.inf
        if not math.isfinite(seconds) or seconds < 0:
            raise ConfigError(f"{what} must be 0 or more seconds")
        return seconds
    if not isinstance(value, str):
        raise ConfigError(f"{what} must be a number of seconds or a string like '30s'")
    match = _DURATION.fullmatch(value)
    if match is None:
        raise ConfigError(f"{what} {value!r} is not a duration; use seconds or a string like '30s', '10m', '2h'")
    return float(match.group(1)) * _UNITS_S[match.group(2)]


def parse_per(value: Per) -> int:
    """A quota window in whole seconds, from 1 to 86400."""
    seconds = float(_WINDOWS_S[value]) if isinstance(value, str) and value in _WINDOWS_S else parse_duration(value, "per")
    whole = math.floor(seconds + 0.5)
    if not 1 <= whole <= 86400 or abs(whole - seconds) > 1e-9:
        raise ConfigError("per must be a whole number of seconds between 1 second and 1 day")
    return whole


def lease_seconds(value: Duration | None) -> int:
    """A lease option (default 30 s) in whole seconds, held to what the server accepts."""
    seconds = math.floor(parse_duration(30 if value is None else value, "lease") + 0.5)
    return min(LEASE_S_MAX, max(LEASE_S_MIN, seconds))


def _shortest_decimal(number: int | float) -> str:
    """The shortest digits that read back as `number`, written without an exponent."""
    if isinstance(number, int):
        return str(number)
    return format(Decimal(repr(number)), "f")


def to_minor(amount: Amount, scale: int, what: str = "amount") -> str:
    """`amount` (major units) as minor units: a string of decimal digits."""
    rounding = False
    if _is_number(amount):
        number: int | float = amount
        if isinstance(number, int) and abs(number) > EXACT_INT_MAX:
            try:
                number = float(number)
            except OverflowError:
                number = math.inf
        if isinstance(number, float) and not math.isfinite(number) or number < 0:
            raise ConfigError(f"{what} must be a number of 0 or more")
        text, rounding = _shortest_decimal(number), True
    elif isinstance(amount, str):
        text = amount.strip()
    else:
        raise ConfigError(f"{what} must be a number or a decimal string")
    match = _DECIMAL.fullmatch(text)
    if match is None:
        raise ConfigError(f"{what} {amount!r} is not a decimal amount")
    whole, fraction = match.group(1), (match.group(2) or "").rstrip("0")
    carry = 0
    if len(fraction) > scale:
        if not rounding:
            raise ConfigError(f"{what} {amount} has more than {scale} decimal places")
        carry = int(fraction[scale] >= "5")
        fraction = fraction[:scale]
    return str(int(whole) * 10**scale + int(fraction.ljust(scale, "0") or "0") + carry)


def from_minor(minor: str, scale: int) -> str:
    """Minor units back to major units, as a decimal string."""
    value = int(minor)
    digits = str(abs(value)).rjust(scale + 1, "0")
    text = digits if scale == 0 else f"{digits[:-scale]}.{digits[-scale:]}"
    return f"-{text}" if value < 0 else text
