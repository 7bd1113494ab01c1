"""The capacity commands called as keyword functions, for tests that drive a kernel in process
(the same way as `tests/ops.py`: built, checked as a parse would, random values drawn, submitted)."""

from __future__ import annotations

from typing import Any

from runstate.actors import capacity_reads as reads
from runstate.actors import commands as c

from runstate.server import wire

from .ops import _Ops

__all__ = ["PoolOps", "QuotaOps", "WorkLimitOps", "BudgetOps", "AdmitOps"]


class PoolOps(_Ops):
    async def create(self, space: str, *, name: str, units: int, idem: Any = None) -> dict:
        return await self._submit(c.CreatePool, idem, space=space, name=name, units=units)

    async def ensure(self, space: str, name: str, *, units=None, idem=None) -> dict:
        return await self._submit(c.EnsurePool, idem, space=space, name=name, units=units)

    async def acquire(
        self, space: str, pool_id: str, *, scope_id, units=1, holder="h", session="s", lease_s=30, waiter_id=None, idem=None
    ) -> dict:
        return await self._submit(
            c.AcquireGrant, idem, space=space, pool_id=pool_id, scope_id=scope_id, units=units, holder=holder,
            session=session, lease_s=lease_s, waiter_id=waiter_id,
        )

    async def wait(self, space: str, pool_id: str, *, scope_id, units=1, holder="h", ttl_s=None, idem=None) -> dict:
        return await self._submit(c.WaitPool, idem, space=space, pool_id=pool_id, scope_id=scope_id, units=units, holder=holder, ttl_s=ttl_s)

    async def cancel(self, space: str, waiter_id: str, *, idem=None) -> dict:
        return await self._submit(c.CancelPoolWaiter, idem, space=space, waiter_id=waiter_id)

    def waiter(self, space: str, waiter_id: str) -> dict:
        return wire.encode(reads.pool_waiter(self._kernel, space, waiter_id))

    async def renew(self, space: str, grant_id: str, *, token, lease_s=None, idem=None) -> dict:
        return await self._submit(c.RenewGrant, idem, space=space, grant_id=grant_id, token=token, lease_s=lease_s)

    async def release(self, space: str, grant_id: str, *, token, observation=None, idem=None) -> dict:
        return await self._submit(c.ReleaseGrant, idem, space=space, grant_id=grant_id, token=token, observation=observation)

    def list(self, space: str) -> list[dict]:
        return [wire.encode(pool) for pool in reads.pools(self._kernel, space)]


class QuotaOps(_Ops):
    async def ensure(self, space: str, name: str, *, units_limit=None, window_s=None, idem=None) -> dict:
        return await self._submit(c.EnsureAllowance, idem, space=space, name=name, units_limit=units_limit, window_s=window_s)

    async def create(self, space: str, *, name: str, units_limit: int, window_s: int, idem=None) -> dict:
        return await self._submit(c.CreateAllowance, idem, space=space, name=name, units_limit=units_limit, window_s=window_s)

    async def consume(self, space: str, allowance_id: str, *, scope_id, units=1, holder="h", idem=None) -> dict:
        return await self._submit(c.Consume, idem, space=space, allowance_id=allowance_id, scope_id=scope_id, units=units, holder=holder)

    async def wait(self, space: str, allowance_id: str, *, scope_id, units=1, holder="h", ttl_s=60, idem=None) -> dict:
        return await self._submit(
            c.WaitAllowance, idem, space=space, allowance_id=allowance_id, scope_id=scope_id, units=units, holder=holder, ttl_s=ttl_s
        )

    async def cancel(self, space: str, waiter_id: str, *, idem=None) -> dict:
        return await self._submit(c.CancelWaiter, idem, space=space, waiter_id=waiter_id)

    async def cooldown(self, space: str, allowance_id: str, *, seconds: int, reason=None, idem=None) -> dict:
        return await self._submit(c.Cooldown, idem, space=space, allowance_id=allowance_id, seconds=seconds, reason=reason)

    async def refund(self, space: str, allowance_id: str, consumption_id: str, *, idem=None) -> dict:
        return await self._submit(c.RefundConsumption, idem, space=space, allowance_id=allowance_id, consumption_id=consumption_id)

    def view(self, space: str, allowance_id: str) -> dict:
        return wire.encode(reads.allowance(self._kernel, space, allowance_id))

    def waiter(self, space: str, waiter_id: str) -> dict:
        return wire.encode(reads.waiter(self._kernel, space, waiter_id))

    def list(self, space: str) -> list[dict]:
        return [wire.encode(allowance) for allowance in reads.allowances(self._kernel, space)]


class WorkLimitOps(_Ops):
    async def create(self, space: str, *, name: str, scope_id: str, max_outstanding: int, idem=None) -> dict:
        return await self._submit(c.CreateWorkLimit, idem, space=space, name=name, scope_id=scope_id, max_outstanding=max_outstanding)

    def list(self, space: str) -> list[dict]:
        return [wire.encode(limit) for limit in reads.work_limits(self._kernel, space)]


class BudgetOps(_Ops):
    async def ensure(self, space: str, name: str, *, limit=None, currency=None, scale=None, idem=None) -> dict:
        return await self._submit(c.EnsureBudget, idem, space=space, name=name, limit=limit, currency=currency, scale=scale)

    async def create(self, space: str, *, name: str, currency="USD", scale=2, limit: int, idem=None) -> dict:
        return await self._submit(c.CreateBudget, idem, space=space, name=name, currency=currency, scale=scale, limit=limit)

    async def reserve(self, space: str, budget_id: str, *, scope_id, amount: int, holder="h", settle_by_ms=None, idem=None) -> dict:
        return await self._submit(
            c.Reserve, idem, space=space, budget_id=budget_id, scope_id=scope_id, holder=holder, amount=amount, settle_by_ms=settle_by_ms
        )

    async def settle(self, space: str, budget_id: str, *, reservation_id: str, amount: int, work_key: str, allow_overrun=None, idem=None) -> dict:
        return await self._submit(
            c.Settle, idem, space=space, budget_id=budget_id, reservation_id=reservation_id, amount=amount, work_key=work_key,
            allow_overrun=allow_overrun,
        )

    async def void(self, space: str, budget_id: str, *, reservation_id: str, work_key: str, idem=None) -> dict:
        return await self._submit(c.Void, idem, space=space, budget_id=budget_id, reservation_id=reservation_id, work_key=work_key)

    def view(self, space: str, budget_id: str) -> dict:
        return wire.encode(reads.budget(self._kernel, space, budget_id))

    def list(self, space: str) -> list[dict]:
        return [wire.encode(budget) for budget in reads.budgets(self._kernel, space)]


class AdmitOps(_Ops):
    async def submit(self, space: str, *, scope_id, mailbox_id, key, task_input=None, requirements=None, work_limit=None, idem=None) -> dict:
        return await self._submit(
            c.SubmitTask, idem, space=space, scope_id=scope_id, mailbox_id=mailbox_id, key=key, task_input=task_input,
            requirements=requirements, work_limit=work_limit,
        )

    async def admit(self, space: str, *, mailbox_id, scope_id, holder="w", session="s", lease_s=30, wait_ms=None, include_descendants=None, idem=None):
        return await self._submit(
            c.Admit, idem, space=space, mailbox_id=mailbox_id, scope_id=scope_id, holder=holder, session=session,
            lease_s=lease_s, wait_ms=wait_ms, include_descendants=include_descendants,
        )
