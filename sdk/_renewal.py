"""Keeping a lease alive: the renewal loop shared by claims and consumed deliveries.

The loop sleeps for an interval, renews, and repeats; one renewal runs at a time, and the first one
comes after the first interval, not at once. The interval is max(1 s, lease/3) times a random
factor in [0.9, 1.1], so a 30 s lease renews every 9-11 s and many workers do not renew in step.

It fails closed: the first error of any kind (a stale token, a 429, a transport failure, a
malformed answer) ends the loop for good and reports the lease lost. It never re-acquires: by then
another holder may own the key, and only the kernel knows. If in doubt, treat the lease as lost.
"""

from __future__ import annotations

from typing import Any, Awaitable, Callable

import anyio

from . import _runtime

__all__ = ["renew_until_lost", "interval_s", "INTERVAL_MIN_S"]

# The shortest time between two renewals, whatever the lease length.
INTERVAL_MIN_S = 1.0
JITTER_MIN = 0.9
JITTER_MAX = 1.1


def interval_s(lease_seconds: float) -> float:
    """Seconds until the next renewal of a lease of `lease_seconds`."""
    return max(INTERVAL_MIN_S, lease_seconds / 3) * _runtime.uniform(JITTER_MIN, JITTER_MAX)


async def renew_until_lost(
    renew: Callable[[int], Awaitable[Any]],
    lease_seconds: int,
    on_lost: Callable[[BaseException], None],
) -> None:
    """Renew every interval until cancelled; on the first error call `on_lost(error)` and return.

    Cancellation (the lease was released, the handler ended) is not an error: it propagates.
    """
    while True:
        await anyio.sleep(interval_s(lease_seconds))
        try:
            await renew(lease_seconds)
        except Exception as err:  # fail closed on anything
            on_lost(err)
            return
