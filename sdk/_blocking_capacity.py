"""The blocking twins of the capacity handles (see `runstate.capacity` and `runstate.blocking`).

`run.pool(name)` gives a `BlockingPool` (`acquire()` a `BlockingPoolLease`, a context manager,
or `run(fn)` with a plain function in a worker thread), `run.quota(name)` a `BlockingQuota`,
`run.budget(name)` a `BlockingBudget` (`reserve()` a `BlockingBudgetReservation`); the client's
`pools`, `quotas`, `work_limits` and `budgets` create or check them. Each method runs its async
twin on the client's loop, where the pool lease is renewed with the client's other leases.
"""

from __future__ import annotations

import builtins
from typing import Any, Callable, Literal, NotRequired, TypedDict, TypeVar

from ._blocking_work import BlockingLease
from ._docs import twin_of
from ._loop import Loop
from .capacity import (
    POOL_TIMEOUT_MS, QUOTA_TIMEOUT_MS, BudgetRef, BudgetReservation, BudgetsAPI, PoolLease, PoolRef, PoolsAPI, QuotaRef,
    QuotasAPI, WorkLimitsAPI,
)
from .claims import ClaimLease

__all__ = [
    "BlockingPool", "BlockingPoolLease", "BlockingPoolAttempt", "BlockingQuota", "BlockingBudget",
    "BlockingBudgetReservation", "BlockingPools", "BlockingQuotas", "BlockingWorkLimits", "BlockingBudgets",
]

T = TypeVar("T")


@twin_of(PoolLease)
class BlockingPoolLease(BlockingLease):
    """Units of a pool held under a lease (see `PoolLease`): `grant_id` and `units` read as there,
    and everything else as a `BlockingLease` (`key` is the grant's id; `generation` is None, a
    grant has none). `with pool.acquire() as lease:` gives the units back when the block ends."""

    def __init__(self, lease: PoolLease, loop: Loop) -> None:
        super().__init__(lease, loop)
        self._grant = lease

    @property
    def grant_id(self) -> str:
        return self._grant.grant_id

    @property
    def units(self) -> int:
        return self._grant.units

    def __enter__(self) -> BlockingPoolLease:
        return self


class BlockingPoolAttempt(TypedDict):
    """`pool.try_acquire()`: `{"kind": "acquired", "lease": lease}` or
    `{"kind": "capacity-unavailable"}` (`kind` says which; `lease`, a `BlockingPoolLease`, is
    there when it is `acquired`)."""

    kind: Literal["acquired", "capacity-unavailable"]
    lease: NotRequired[BlockingPoolLease]


class _Named:
    """What a pool, a quota and a budget handle read alike: `scope_id`, `name`, `resolve_id()`."""

    def __init__(self, ref: PoolRef | QuotaRef | BudgetRef, loop: Loop) -> None:
        self._ref = ref
        self._loop = loop

    def __repr__(self) -> str:
        return f"<blocking {type(self._ref).__name__}(scope_id={self._ref.scope_id!r}, name={self._ref.name!r})>"

    @property
    def scope_id(self) -> str:
        """The run this handle takes from."""
        return self._ref.scope_id

    @property
    def name(self) -> str | None:
        """Its name (None when made by id)."""
        return self._ref.name

    def resolve_id(self) -> str:
        """Its id: the first call lists the space's rows (`NotFoundError` for an unknown name)."""
        return self._loop.run(self._ref.resolve_id())


@twin_of(PoolRef)
class BlockingPool(_Named):
    """A concurrency pool for a run (see `PoolRef`): `acquire()`, `try_acquire()`, `run(fn)`;
    its `scope_id` and `name`."""

    def __init__(self, ref: PoolRef, loop: Loop) -> None:
        super().__init__(ref, loop)
        self._pool = ref

    def status(self) -> dict[str, Any] | None:
        return self._loop.run(self._pool.status())

    def acquire(
        self, *, units: int = 1, lease_seconds: int = 30, wait: bool = True, timeout_ms: int = POOL_TIMEOUT_MS
    ) -> BlockingPoolLease:
        lease = self._loop.run(self._pool.acquire(units=units, lease_seconds=lease_seconds, wait=wait, timeout_ms=timeout_ms))
        return BlockingPoolLease(lease, self._loop)

    def try_acquire(self, *, units: int = 1, lease_seconds: int = 30) -> BlockingPoolAttempt:
        attempt = self._loop.run(self._pool.try_acquire(units=units, lease_seconds=lease_seconds))
        if attempt["kind"] == "acquired":
            return BlockingPoolAttempt(kind="acquired", lease=BlockingPoolLease(attempt["lease"], self._loop))
        return BlockingPoolAttempt(kind="capacity-unavailable")

    def run(
        self,
        fn: Callable[[BlockingPoolLease], T],
        *,
        units: int = 1,
        lease_seconds: int = 30,
        wait: bool = True,
        timeout_ms: int = POOL_TIMEOUT_MS,
    ) -> T:
        """Acquire (as `acquire()`), return `fn(lease)` (run in a worker thread) while the lease is
        renewed, give the units back on the way out. A lease lost meanwhile is no longer waited
        for and raises `LeaseLostError`, as does a release refused as stale (see `PoolRef.run`)."""
        loop = self._loop

        def in_thread(lease: ClaimLease) -> T:
            assert isinstance(lease, PoolLease)
            return fn(BlockingPoolLease(lease, loop))

        result: T = loop.run(
            self._pool.run(in_thread, units=units, lease_seconds=lease_seconds, wait=wait, timeout_ms=timeout_ms)
        )
        return result


@twin_of(QuotaRef)
class BlockingQuota(_Named):
    """A quota for a run (see `QuotaRef`): `take()`, `try_take()`, `cooldown()`; its `scope_id`
    and `name`."""

    def __init__(self, ref: QuotaRef, loop: Loop) -> None:
        super().__init__(ref, loop)
        self._quota = ref

    def status(self) -> dict[str, Any] | None:
        return self._loop.run(self._quota.status())

    def try_take(self, *, units: int = 1) -> dict[str, Any]:
        return self._loop.run(self._quota.try_take(units=units))

    def take(self, *, units: int = 1, wait: bool = True, timeout_ms: int = QUOTA_TIMEOUT_MS) -> dict[str, Any]:
        return self._loop.run(self._quota.take(units=units, wait=wait, timeout_ms=timeout_ms))

    def cooldown(self, seconds: int, reason: str | None = None) -> dict[str, Any]:
        return self._loop.run(self._quota.cooldown(seconds, reason))


@twin_of(BudgetReservation)
class BlockingBudgetReservation:
    """Money held from a budget until settled or voided (see `BudgetReservation`): `id`,
    `reserved_minor`, `reserved` and `state` read as there, kept up to date by `settle()` and
    `void()`."""

    def __init__(self, reservation: BudgetReservation, loop: Loop) -> None:
        self._reservation = reservation
        self._loop = loop

    def __repr__(self) -> str:
        return f"<blocking {self._reservation!r}>"

    @property
    def id(self) -> str:
        return self._reservation.id

    @property
    def reserved_minor(self) -> str:
        return self._reservation.reserved_minor

    @property
    def reserved(self) -> str:
        return self._reservation.reserved

    @property
    def state(self) -> str:
        return self._reservation.state

    def settle(self, *, amount: str, usage_key: str) -> dict[str, Any]:
        return self._loop.run(self._reservation.settle(amount=amount, usage_key=usage_key))

    def void(self, *, usage_key: str) -> dict[str, Any]:
        return self._loop.run(self._reservation.void(usage_key=usage_key))


@twin_of(BudgetRef)
class BlockingBudget(_Named):
    """A budget for a run (see `BudgetRef`): `reserve()` money, then settle or void it; its
    `scope_id` and `name`."""

    def __init__(self, ref: BudgetRef, loop: Loop) -> None:
        super().__init__(ref, loop)
        self._budget = ref

    def status(self) -> dict[str, Any]:
        return self._loop.run(self._budget.status())

    def reserve(self, *, amount: str, settle_by: str | None = None) -> BlockingBudgetReservation:
        reservation = self._loop.run(self._budget.reserve(amount=amount, settle_by=settle_by))
        return BlockingBudgetReservation(reservation, self._loop)


# -- the client's: create or check --------------------------------------------------------------------


@twin_of(PoolsAPI)
class BlockingPools:
    """`rs.pools` of the blocking client (see `PoolsAPI`)."""

    def __init__(self, api: PoolsAPI, loop: Loop) -> None:
        self._api = api
        self._loop = loop

    def ensure(self, name: str, *, capacity: int) -> dict[str, Any]:
        return self._loop.run(self._api.ensure(name, capacity=capacity))

    def list(self) -> builtins.list[dict[str, Any]]:
        return self._loop.run(self._api.list())


@twin_of(QuotasAPI)
class BlockingQuotas:
    """`rs.quotas` of the blocking client (see `QuotasAPI`)."""

    def __init__(self, api: QuotasAPI, loop: Loop) -> None:
        self._api = api
        self._loop = loop

    def ensure(self, name: str, *, units_per_window: int, window_seconds: int) -> dict[str, Any]:
        return self._loop.run(self._api.ensure(name, units_per_window=units_per_window, window_seconds=window_seconds))

    def list(self) -> builtins.list[dict[str, Any]]:
        return self._loop.run(self._api.list())


@twin_of(WorkLimitsAPI)
class BlockingWorkLimits:
    """`rs.work_limits` of the blocking client (see `WorkLimitsAPI`)."""

    def __init__(self, api: WorkLimitsAPI, loop: Loop) -> None:
        self._api = api
        self._loop = loop

    def ensure(self, name: str, *, scope_id: str, max_outstanding: int) -> dict[str, Any]:
        return self._loop.run(self._api.ensure(name, scope_id=scope_id, max_outstanding=max_outstanding))


@twin_of(BudgetsAPI)
class BlockingBudgets:
    """`rs.budgets` of the blocking client (see `BudgetsAPI`)."""

    def __init__(self, api: BudgetsAPI, loop: Loop) -> None:
        self._api = api
        self._loop = loop

    def ensure(self, name: str, *, currency: str, scale: int, limit: str) -> dict[str, Any]:
        return self._loop.run(self._api.ensure(name, currency=currency, scale=scale, limit=limit))
