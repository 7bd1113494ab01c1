"""An allowance's typed views (`quotas.py`'s table and commands answer with them): a leaf module
beside it. Named tuples, as a claim's are. The shell names and formats them on the wire
(`server/wire/quotas.py`); the kernel knows nothing of that.
"""

from __future__ import annotations

from typing import Literal, NamedTuple

from .shapes import DurationMs, EpochMs

__all__ = [
    "AllowanceWaiterState", "AllowanceView", "ConsumptionView", "AllowanceWaiterView", "CooldownView",
    "AllowanceExhaustedView", "AllowanceMismatchView", "RefundedAllowanceView",
]

AllowanceWaiterState = Literal["WAITING", "GRANTED", "EXPIRED", "CANCELLED"]


class AllowanceView(NamedTuple):
    """An allowance as it stands now: its limit per window of `window_ms`, the current window
    (`window_start_ms` to `window_end_ms`), the units used and left in it, how many wait, and
    the cooldown while one lasts (None otherwise)."""

    id: str
    name: str
    units_limit: int
    window_ms: DurationMs
    window_start_ms: EpochMs
    window_end_ms: EpochMs
    used: int
    remaining: int
    waiting: int
    cooldown_until_ms: EpochMs | None
    cooldown_reason: str | None
    created_ms: EpochMs


class RefundedAllowanceView(NamedTuple):
    """A refund's answer: the allowance as it stands after it (as `AllowanceView`), then the units
    `refunded` to its current window (0 when the consumption's window has ended, or it was
    refunded already)."""

    id: str
    name: str
    units_limit: int
    window_ms: DurationMs
    window_start_ms: EpochMs
    window_end_ms: EpochMs
    used: int
    remaining: int
    waiting: int
    cooldown_until_ms: EpochMs | None
    cooldown_reason: str | None
    created_ms: EpochMs
    refunded: int


class ConsumptionView(NamedTuple):
    """A consume's answer: the units taken in the window beginning at `window_start_ms`, and the
    units left in it."""

    consumption_id: str
    allowance_id: str
    units: int
    window_start_ms: EpochMs
    remaining: int


class AllowanceWaiterView(NamedTuple):
    """A waiter for an allowance's units: once GRANTED, the consumption made on its behalf and the
    window it counts in; `expires_ms` its TTL."""

    waiter_id: str
    allowance_id: str
    scope_id: str
    holder: str
    units: int
    state: AllowanceWaiterState
    consumption_id: str | None
    window_start_ms: EpochMs | None
    expires_ms: EpochMs
    created_ms: EpochMs


class CooldownView(NamedTuple):
    """A cooldown's answer: no consume succeeds and no waiter is granted until `cooldown_until_ms`."""

    allowance_id: str
    cooldown_until_ms: EpochMs
    reason: str | None


class AllowanceExhaustedView(NamedTuple):
    """ALLOWANCE_EXHAUSTED's details: the units left in the window, when it began, how many wait."""

    remaining: int
    window_start_ms: EpochMs
    waiting: int


class AllowanceMismatchView(NamedTuple):
    """CONFLICT's details when an allowance of that name allows other units or another window."""

    id: str
    units_limit: int
    window_ms: DurationMs
