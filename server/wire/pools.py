"""The wire shapes of pools (`actors/pools.py`'s views)."""

from __future__ import annotations

from typing import Any

from ...actors.pools import GrantView, PoolUnavailableView, PoolView, PoolWaiterView, ReleasedGrantView, TurnGrantView
from ...actors.capacity_reads import PoolsView
from .shape import Shape, component

__all__ = ["POOL", "GRANT", "TURN_GRANT", "RELEASED_GRANT", "POOL_WAITER", "POOL_UNAVAILABLE", "COMPONENTS"]

# A pool: its capacity is written twice, as `unitsTotal` and as the `units` 0.3.0's by-name
# answer reads.
POOL = Shape(PoolView)
# A grant as acquire and renew answer it. The clients read a pool's id as `permitId`, and the
# lease as a claim's is written (`holderSession`, `leaseSeconds`, `leaseExpiresAt`). An acquire on
# a waiter's turn adds `waiterId`; a release answers the grant with `released` and `releasedAt`.
GRANT = Shape(
    GrantView,
    rename={"pool_id": "permitId", "session": "holderSession", "expires_ms": "leaseExpiresAt"},
    seconds={"lease_ms": "leaseSeconds"},
)
TURN_GRANT = GRANT.extended(TurnGrantView)
RELEASED_GRANT = GRANT.extended(ReleasedGrantView)
# A waiter in a pool's line: its id is written as `waiterId` and again as `id`.
POOL_WAITER = Shape(PoolWaiterView, rename={"pool_id": "permitId"}, also={"id": "waiter_id"})
# CAPACITY_UNAVAILABLE's details for a pool.
POOL_UNAVAILABLE = Shape(PoolUnavailableView)

# Every pool of a space (`GET /permits`).
POOLS = Shape(PoolsView)

# The OpenAPI components these shapes make, by name.
COMPONENTS: dict[str, dict[str, Any]] = {
    "Pool": component(POOL),
    "Pools": component(POOLS),
    "Grant": component(GRANT, TURN_GRANT, RELEASED_GRANT),
    "PoolWaiter": component(POOL_WAITER),
}
