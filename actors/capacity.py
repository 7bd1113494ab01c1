"""Capacity inside a space: pools (permits and grants), quotas (allowances and waiters), work
limits and budgets; the commands, their timers and what a scope's end does to them.

`CapacityCommands` is one part of a `SpaceState`: it is given the tables it uses (`pools.py`,
`quotas.py`, `work_limits.py`, `budgets.py`, the scope tree to refuse work in an ended scope) and
the space's `commit`, and nothing else. Every command here runs on the space's one capacity actor
`("capacity", space)` (see docs/design-capacity.md for why one actor, and its trade-off).

Timers (tags on the capacity actor, each proposing a change the turn checks again;
`CAPACITY_TIMERS` maps each kind to its handler):
    ("grant-lease", grant_id)          marker token   a grant's lease ran out: its units go back
    ("quota-serve", allowance_id)      marker due_ms  a window began or a cooldown ended: grant waiters
    ("waiter-ttl", waiter_id)          -              a waiter's TTL ran out: EXPIRED if still waiting
    ("settle-by", reservation_id)      -              a reservation's settleBy passed: release it
    ("pool-waiter", waiter_id)         -              a pool waiter's TTL or turn ran out: EXPIRED, the line moves
    ("pool-serve", pool_id)            -              units came back outside this actor (a delivery ended): move the line

Pure: no IO, no clock reads, no awaits.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Iterator

from .admission import TASK_REQUIREMENTS
from .budgets import BUDGET_RECORDS, BudgetTable
from .budgets import (
    BUDGET_CREATED, BUDGET_IMAGE, RESERVATION_ENDED, RESERVATION_IMAGE, RESERVATION_MADE, RESERVATION_SETTLED,
)
from .actor_keys import capacity_actor
from .errors import CONFLICT, NOT_FOUND, VALIDATION_FAILED, KernelError
from .limits import Limits
from .leases import LeaseKind
from .outcome import Outcome, Timer
from .pools import POOL_RECORDS, SIGNALED, Grant, Pool, PoolTable
from .pools import (
    GRANT_ACQUIRED, GRANT_EXPIRED, GRANT_RELEASED, GRANT_RENEWED, PERMIT_WAITER_ADDED, PERMIT_WAITER_ENDED,
    PERMIT_WAITER_IMAGE, PERMIT_WAITER_SIGNALED, POOL_CREATED, POOL_IMAGE,
)
from .quotas import QUOTA_RECORDS, WAITING, Allowance, AllowanceTable
from .quotas import (
    ALLOWANCE_CONSUMED, ALLOWANCE_COOLDOWN_RECORD, ALLOWANCE_CREATED, ALLOWANCE_IMAGE, WAITER_ADDED, WAITER_ENDED,
    WAITER_GRANTED, WAITER_IMAGE,
)
from .scopes import ScopeTree
from .tasks import TaskTable
from .timestamps import format_ms
from .work_limits import WORK_LIMIT_RECORDS, WorkLimitTable
from .work_limits import WORK_LIMIT_COUNTED, WORK_LIMIT_CREATED, WORK_LIMIT_IMAGE

if TYPE_CHECKING:
    from . import commands as c

__all__ = ["CapacityCommands", "CAPACITY_APPLY", "CAPACITY_TIMERS", "CAPACITY_RECORDS"]

GRANT_TIMER, SERVE_TIMER, WAITER_TIMER, SETTLE_BY_TIMER = "grant-lease", "quota-serve", "waiter-ttl", "settle-by"
POOL_WAITER_TIMER, POOL_SERVE_TIMER = "pool-waiter", "pool-serve"
GRANT_LEASE = "grant"  # the kind of lease a pool grant is held under, in the lease table

# Every record type of capacity and its fields (type -> required fields), for the journal's registry.
CAPACITY_RECORDS: dict[str, tuple[str, ...]] = {
    **POOL_RECORDS, **QUOTA_RECORDS, **WORK_LIMIT_RECORDS, **BUDGET_RECORDS,
    TASK_REQUIREMENTS: ("task_id", "pools", "quotas", "budgets", "at_ms"),  # admission.py
}

Commit = Callable[..., Outcome]


class CapacityCommands:
    __slots__ = (
        "_space_id", "limits", "scopes", "pools", "allowances", "work_limits", "budgets", "_commit", "requirements", "wakeups",
        "subtree_wakeups", "check_entities",
    )
    # Queues with an admission parked on them: not state (parked calls do not outlive a process).
    # `subtree_wakeups`: those admitting from descendant scopes too, which a new task of any queue
    # may concern. (`scopes` is the space's own tree, compared there.)
    _DERIVED = ("wakeups", "subtree_wakeups", "scopes", "check_entities")

    def __init__(self, space_id: str, limits: Limits, scopes: ScopeTree, tasks: TaskTable, commit: Commit) -> None:
        self._space_id = space_id
        self.limits = limits
        self.scopes = scopes
        self.pools = PoolTable(limits.pools_max, limits.waiters_max)
        self.allowances = AllowanceTable(limits.allowances_max, limits.waiters_max)
        self.work_limits = WorkLimitTable(tasks, limits.work_limits_max)
        # The space's cap on the entities it keeps (`caps.py`): a waiter is one more.
        self.check_entities: Callable[[int], None] = lambda adding: None
        self.budgets = BudgetTable(limits.budgets_max)
        self._commit = commit
        # Task id -> what admission must take for it (`admission.py`), kept with the task.
        self.requirements: dict[str, dict] = {}
        self.wakeups: set[tuple] = set()
        self.subtree_wakeups: set[tuple] = set()

    def needs_admission(self, task_id: str) -> bool:
        return task_id in self.requirements

    def take_wakeups(self) -> list[tuple]:
        """The queues of parked admissions, once: each looks again and parks again if need be."""
        woken = list(self.wakeups | self.subtree_wakeups)
        self.wakeups.clear()
        self.subtree_wakeups.clear()
        return woken

    def take_subtree_wakeups(self) -> list[tuple]:
        """The queues of parked admissions that include descendants, once (a task was created)."""
        woken = list(self.subtree_wakeups)
        self.subtree_wakeups.clear()
        return woken

    def apply_requirements(self, record: dict) -> None:
        self.requirements[record["task_id"]] = {"pools": record["pools"], "quotas": record["quotas"], "budgets": record["budgets"]}

    @property
    def _actor(self) -> tuple:
        return capacity_actor(self._space_id)

    # -- pools ----------------------------------------------------------------------------------

    def create_pool(self, command: "c.CreatePool", now_ms: int) -> Outcome:
        outcome = self._commit(Outcome(), self.pools.decide_create(command.pool_id, command.name, command.units, now_ms))
        outcome.reply = self.pools.view(self.pools.get(command.pool_id), now_ms)
        return outcome

    def ensure_pool(self, command: "c.EnsurePool", now_ms: int) -> Outcome:
        """`PUT /permits/by-name/{name}`: look up, create, or check the pool of this name."""
        pool = self.pools.named(command.name)
        if pool is None:
            if command.units is None:
                raise KernelError(NOT_FOUND, f"permit pool {command.name!r} not found (send units to create it)")
            return self.create_pool(command, now_ms)  # type: ignore[arg-type]
        if command.units is not None and command.units != pool.units_total:
            raise KernelError(
                CONFLICT, f"permit pool {pool.name!r} has {pool.units_total} units, not {command.units}",
                details={"id": pool.id, "units": pool.units_total},
            )
        return Outcome(reply=self.pools.view(pool, now_ms))

    def acquire_grant(self, command: "c.AcquireGrant", now_ms: int) -> Outcome:
        self.scopes.require_active(command.scope_id, now_ms)
        pools = self.pools
        pool = pools.get(command.pool_id)
        # The line moves first (a waiter whose turn came is signaled), and the acquire is decided
        # as after that move; both are committed only once nothing refuses (a turn that raises
        # must not have changed the state).
        served = pools.decide_serve(pool, self.limits.pool_turn_s * 1000, now_ms)
        records = pools.decide_acquire(
            command.pool_id, command.grant_id, command.scope_id, command.units, command.token, command.holder,
            command.session, command.lease_s * 1000, now_ms, command.waiter_id, tuple(served),
        )
        outcome = self._waiter_timers(self._commit(Outcome(), *served), pool)
        self._commit(outcome, *records)
        grant = pools.grant(command.grant_id)
        assert grant is not None
        outcome.timers.append(self._grant_timer(grant.id, grant.token, grant.expires_ms))
        outcome.reply = pools.grant_view(grant, pool)
        if command.waiter_id is not None:
            outcome.reply["waiterId"] = command.waiter_id
        return outcome

    def renew_grant(self, command: "c.RenewGrant", now_ms: int) -> Outcome:
        lease_ms = None if command.lease_s is None else command.lease_s * 1000
        outcome = self._commit(Outcome(), self.pools.decide_renew(command.grant_id, command.token, lease_ms, now_ms))
        grant = self.pools.grant(command.grant_id)
        assert grant is not None
        outcome.timers.append(self._grant_timer(grant.id, grant.token, grant.expires_ms))
        outcome.reply = self.pools.grant_view(grant, self.pools.get(grant.pool_id))
        return outcome

    def release_grant(self, command: "c.ReleaseGrant", now_ms: int) -> Outcome:
        pools = self.pools
        grant = pools.current(command.grant_id, command.token, now_ms)
        reply = pools.grant_view(grant, pools.get(grant.pool_id))
        outcome = self._commit(Outcome(), pools.decide_release(command.grant_id, command.token, command.observation, now_ms))
        assert pools.grant(command.grant_id) is None, "a released grant must not stay valid"
        self._serve_line(outcome, pools.get(grant.pool_id), now_ms)
        reply.update(token=None, released=True, releasedAt=format_ms(now_ms))
        outcome.reply = reply
        return outcome

    def on_grant_timer(self, grant_id: str, token: Any, now_ms: int) -> Outcome:
        record = self.pools.decide_expire(grant_id, token, now_ms)
        if record is None:
            return Outcome()
        pool = self.pools.get(self.pools.grant(grant_id).pool_id)  # type: ignore[union-attr]
        return self._serve_line(self._commit(Outcome(), record), pool, now_ms)

    # -- the line of a pool (`pools.py`: what 0.3.0's slots() waits in) -------------------------

    def _serve_line(self, outcome: Outcome, pool: Pool | None, now_ms: int) -> Outcome:
        """Move the line of `pool` at the end of `outcome` (units may have come back)."""
        if pool is None or not pool.line:
            return outcome
        self._commit(outcome, *self.pools.decide_serve(pool, self.limits.pool_turn_s * 1000, now_ms))
        return self._waiter_timers(outcome, pool)

    def _waiter_timers(self, outcome: Outcome, pool: Pool | None) -> Outcome:
        """The timer of every waiter signaled in `outcome` (its turn's end; a WAITING one has its TTL's)."""
        for record in outcome.records:
            if record["type"] == PERMIT_WAITER_SIGNALED:
                outcome.timers.append(Timer(record["turn_ends_ms"], self._actor, (POOL_WAITER_TIMER, record["id"]), None))
        return outcome

    def wait_pool(self, command: "c.WaitPool", now_ms: int) -> Outcome:
        self.scopes.require_active(command.scope_id, now_ms)
        pools = self.pools
        pool = pools.get(command.pool_id)
        ttl_s = self.limits.waiter_ttl_s_max if command.ttl_s is None else command.ttl_s
        self.check_entities(1)
        record = pools.decide_wait(pool, command.waiter_id, command.scope_id, command.holder, command.units, ttl_s * 1000, now_ms)
        outcome = self._commit(Outcome(), record)
        # Signaled at once when nothing is ahead and its units are free.
        self._serve_line(outcome, pool, now_ms)
        waiter = pools.waiter(command.waiter_id)
        if waiter.state != SIGNALED:
            outcome.timers.append(Timer(waiter.due_ms, self._actor, (POOL_WAITER_TIMER, waiter.id), None))
        outcome.reply = pools.waiter_view(waiter)
        return outcome

    def cancel_pool_waiter(self, command: "c.CancelPoolWaiter", now_ms: int) -> Outcome:
        pools = self.pools
        waiter = pools.waiter(command.waiter_id)
        record = pools.decide_cancel(waiter, now_ms)
        outcome = Outcome()
        if record is not None:
            self._commit(outcome, record)
            # It may have been the head, or held units back: those behind it may fit now.
            self._serve_line(outcome, pools.get(waiter.pool_id), now_ms)
        outcome.reply = pools.waiter_view(waiter)
        return outcome

    def on_pool_waiter_timer(self, waiter_id: str, _: Any, now_ms: int) -> Outcome:
        """A waiter's TTL or turn may have run out: the line moves (which ends it if so)."""
        waiter = self.pools.waiter(waiter_id)
        if waiter.state not in ("WAITING", SIGNALED):
            return Outcome()
        return self._serve_line(Outcome(), self.pools.get(waiter.pool_id), now_ms)

    def on_pool_serve_timer(self, pool_id: str, _: Any, now_ms: int) -> Outcome:
        return self._serve_line(Outcome(), self.pools.get(pool_id), now_ms)

    def pool_serve_timers(self, at_ms: int) -> Iterator[Timer]:
        """A move of every line at `at_ms`: units came back in another actor's turn (a delivery
        holding admission grants ended), and only this actor signals waiters."""
        for pool in self.pools.all():
            if pool.line:
                yield Timer(at_ms, self._actor, (POOL_SERVE_TIMER, pool.id), None)

    def _grant_timer(self, grant_id: str, token: str, expires_ms: int) -> Timer:
        return Timer(expires_ms, self._actor, (GRANT_TIMER, grant_id), token)

    # -- quotas ---------------------------------------------------------------------------------

    def create_allowance(self, command: "c.CreateAllowance", now_ms: int) -> Outcome:
        record = self.allowances.decide_create(command.allowance_id, command.name, command.units_limit, command.window_s * 1000, now_ms)
        outcome = self._commit(Outcome(), record)
        outcome.reply = self.allowances.view(self.allowances.get(command.allowance_id), now_ms)
        return outcome

    def ensure_allowance(self, command: "c.EnsureAllowance", now_ms: int) -> Outcome:
        """`PUT /allowances/by-name/{name}`: look up, create, or check the allowance of this name."""
        allowance = self.allowances.named(command.name)
        if allowance is None:
            if command.units_limit is None:
                raise KernelError(NOT_FOUND, f"allowance {command.name!r} not found (send unitsLimit and windowSeconds to create it)")
            return self.create_allowance(command, now_ms)  # type: ignore[arg-type]
        if command.units_limit is not None:
            assert command.window_s is not None
            if (command.units_limit, command.window_s * 1000) != (allowance.units_limit, allowance.window_ms):
                raise KernelError(
                    CONFLICT,
                    f"allowance {allowance.name!r} allows {allowance.units_limit} units per {allowance.window_ms // 1000} s, "
                    f"not {command.units_limit} per {command.window_s} s",
                    details={"id": allowance.id, "unitsLimit": allowance.units_limit, "windowSeconds": allowance.window_ms // 1000},
                )
        return Outcome(reply=self.allowances.view(allowance, now_ms))

    def _served(self, allowance: Allowance, now_ms: int) -> Outcome:
        """An outcome that begins with the grants waiters are owed now (FIFO, head first)."""
        return self._commit(Outcome(), *self.allowances.decide_serve(allowance, now_ms))

    def _serve_timer(self, outcome: Outcome, allowance: Allowance, now_ms: int) -> Outcome:
        due_ms = self.allowances.serve_due_ms(allowance, now_ms)
        if due_ms is not None:
            outcome.timers.append(Timer(due_ms, self._actor, (SERVE_TIMER, allowance.id), due_ms))
        return outcome

    def consume(self, command: "c.Consume", now_ms: int) -> Outcome:
        self.scopes.require_active(command.scope_id, now_ms)
        allowances = self.allowances
        allowance = allowances.get(command.allowance_id)
        record = allowances.decide_consume(
            allowance, command.consumption_id, command.scope_id, command.holder, command.units, now_ms
        )
        outcome = Outcome()
        self._commit(outcome, record)
        outcome.reply = {
            "consumptionId": command.consumption_id,
            "allowanceId": allowance.id,
            "units": command.units,
            "windowStart": format_ms(record["window_start_ms"]),
            "remaining": allowance.remaining_at(now_ms),
        }
        return self._serve_timer(outcome, allowance, now_ms)

    def wait(self, command: "c.WaitAllowance", now_ms: int) -> Outcome:
        self.scopes.require_active(command.scope_id, now_ms)
        allowances = self.allowances
        allowance = allowances.get(command.allowance_id)
        self.check_entities(1)
        record = allowances.decide_wait(
            allowance, command.waiter_id, command.scope_id, command.holder, command.units, command.ttl_s * 1000, now_ms
        )
        outcome = self._served(allowance, now_ms)
        self._commit(outcome, record)
        # The new waiter may be granted at once (nothing ahead, units free).
        self._commit(outcome, *allowances.decide_serve(allowance, now_ms))
        waiter = allowances.waiter(command.waiter_id)
        if waiter.state == WAITING:
            outcome.timers.append(Timer(waiter.expires_ms, self._actor, (WAITER_TIMER, waiter.id), None))
        outcome.reply = allowances.waiter_view(waiter)
        return self._serve_timer(outcome, allowance, now_ms)

    def cancel_waiter(self, command: "c.CancelWaiter", now_ms: int) -> Outcome:
        allowances = self.allowances
        waiter = allowances.waiter(command.waiter_id)
        record = allowances.decide_cancel(waiter, now_ms)
        outcome = Outcome() if record is None else self._commit(Outcome(), record)
        allowance = allowances.get(waiter.allowance_id)
        if record is not None:
            # The head may have left: those behind it may fit now.
            self._commit(outcome, *allowances.decide_serve(allowance, now_ms))
        outcome.reply = allowances.waiter_view(waiter)
        return self._serve_timer(outcome, allowance, now_ms)

    def cooldown(self, command: "c.Cooldown", now_ms: int) -> Outcome:
        allowances = self.allowances
        allowance = allowances.get(command.allowance_id)
        outcome = self._served(allowance, now_ms)
        self._commit(outcome, allowances.decide_cooldown(allowance, command.seconds, command.reason, now_ms))
        outcome.reply = {
            "allowanceId": allowance.id,
            "cooldownUntil": format_ms(allowance.cooldown_until_ms),
            "reason": allowance.cooldown_reason,
        }
        return self._serve_timer(outcome, allowance, now_ms)

    def on_serve_timer(self, allowance_id: str, due_ms: Any, now_ms: int) -> Outcome:
        allowance = self.allowances.get(allowance_id)
        return self._serve_timer(self._served(allowance, now_ms), allowance, now_ms)

    def on_waiter_timer(self, waiter_id: str, _: Any, now_ms: int) -> Outcome:
        allowances = self.allowances
        record = allowances.decide_expire(waiter_id, now_ms)
        if record is None:
            return Outcome()
        outcome = self._commit(Outcome(), record)
        allowance = allowances.get(allowances.waiter(waiter_id).allowance_id)
        self._commit(outcome, *allowances.decide_serve(allowance, now_ms))
        return self._serve_timer(outcome, allowance, now_ms)

    # -- work limits ----------------------------------------------------------------------------

    def create_work_limit(self, command: "c.CreateWorkLimit", now_ms: int) -> Outcome:
        self.scopes.get(command.scope_id)
        record = self.work_limits.decide_create(command.work_limit_id, command.name, command.scope_id, command.max_outstanding, now_ms)
        outcome = self._commit(Outcome(), record)
        outcome.reply = self.work_limits.view(self.work_limits.find(command.work_limit_id))
        return outcome

    def check_work_limit(self, name_or_id: str) -> Any:
        """The work limit a submit names, if it has room for one more task (else BACKLOG_FULL)."""
        limit = self.work_limits.find(name_or_id)
        self.work_limits.check_room(limit)
        return limit

    def count_task(self, outcome: Outcome, limit: Any, task_id: str, now_ms: int) -> None:
        """Count the task a submit created on its work limit, in the submit's own outcome."""
        self._commit(outcome, {"type": WORK_LIMIT_COUNTED, "id": limit.id, "task_id": task_id, "at_ms": now_ms})

    # -- budgets --------------------------------------------------------------------------------

    def create_budget(self, command: "c.CreateBudget", now_ms: int) -> Outcome:
        record = self.budgets.decide_create(command.budget_id, command.name, command.currency, command.scale, command.limit, now_ms)
        outcome = self._commit(Outcome(), record)
        outcome.reply = self.budgets.view(self.budgets.get(command.budget_id))
        return outcome

    def ensure_budget(self, command: "c.EnsureBudget", now_ms: int) -> Outcome:
        """`PUT /budgets/by-name/{name}`: look up, create, or check the budget of this name."""
        budget = self.budgets.named(command.name)
        currency = command.currency or "USD"
        scale = 2 if command.scale is None else command.scale
        if budget is None:
            if command.limit is None:
                raise KernelError(NOT_FOUND, f"budget {command.name!r} not found (send limitMinor to create it)")
            record = self.budgets.decide_create(command.budget_id, command.name, currency, scale, command.limit, now_ms)
            outcome = self._commit(Outcome(), record)
            outcome.reply = self.budgets.view(self.budgets.get(command.budget_id))
            return outcome
        if command.limit is not None:
            differs = [
                f"{field} {have!r}, not {want!r}"
                for field, have, want in (("limitMinor", str(budget.limit), str(command.limit)), ("currency", budget.currency, currency), ("scale", budget.scale, scale))
                if have != want
            ]
            if differs:
                raise KernelError(
                    CONFLICT, f"budget {budget.name!r} has " + ", ".join(differs),
                    details={"id": budget.id, "limitMinor": str(budget.limit), "currency": budget.currency, "scale": budget.scale},
                )
        return Outcome(reply=self.budgets.view(budget))

    def reserve(self, command: "c.Reserve", now_ms: int) -> Outcome:
        self.scopes.require_active(command.scope_id, now_ms)
        limits = self.limits
        settle_by_ms = command.settle_by_ms
        if settle_by_ms is None:
            settle_by_ms = now_ms + limits.settle_by_s_default * 1000
        elif settle_by_ms <= now_ms:
            raise KernelError(VALIDATION_FAILED, "settleBy must be in the future")
        elif settle_by_ms > now_ms + limits.settle_by_s_max * 1000:
            raise KernelError(VALIDATION_FAILED, f"settleBy must be at most {limits.settle_by_s_max} s from now")
        budgets = self.budgets
        budget = budgets.get(command.budget_id)
        record = budgets.decide_reserve(
            budget, command.reservation_id, command.scope_id, command.holder, command.amount, settle_by_ms, now_ms
        )
        outcome = self._commit(Outcome(), record)
        outcome.timers.append(Timer(settle_by_ms, self._actor, (SETTLE_BY_TIMER, command.reservation_id), None))
        outcome.reply = budgets.reservation_view(budgets.reservation(budget, command.reservation_id))
        return outcome

    def settle(self, command: "c.Settle", now_ms: int) -> Outcome:
        budgets = self.budgets
        reservation = budgets.reservation(budgets.get(command.budget_id), command.reservation_id)
        records = budgets.decide_settle(reservation, command.amount, command.work_key, now_ms, bool(command.allow_overrun))
        outcome = self._commit(Outcome(), *records)
        outcome.reply = budgets.reservation_view(reservation)
        return outcome

    def void(self, command: "c.Void", now_ms: int) -> Outcome:
        budgets = self.budgets
        reservation = budgets.reservation(budgets.get(command.budget_id), command.reservation_id)
        record = budgets.decide_void(reservation, command.work_key, now_ms)
        outcome = Outcome() if record is None else self._commit(Outcome(), record)
        outcome.reply = budgets.reservation_view(reservation)
        return outcome

    def on_settle_by_timer(self, reservation_id: str, _: Any, now_ms: int) -> Outcome:
        record = self.budgets.decide_release(reservation_id, now_ms)
        return Outcome() if record is None else self._commit(Outcome(), record)

    # -- recovery -------------------------------------------------------------------------------

    def timers(self) -> Iterator[Timer]:
        for grant in self.pools.grants():
            if grant.message_id is None:  # one taken at admission ends with its delivery
                yield self._grant_timer(grant.id, grant.token, grant.expires_ms)
        for allowance in self.allowances.all():
            if allowance.queue:
                # Due at once after a recovery: the turn grants what is owed and arms the next.
                yield Timer(0, self._actor, (SERVE_TIMER, allowance.id), 0)
        for waiter in self.allowances.waiters():
            if waiter.state == WAITING:
                yield Timer(waiter.expires_ms, self._actor, (WAITER_TIMER, waiter.id), None)
        for reservation in self.budgets.reservations():
            if reservation.state == "ACTIVE":
                yield Timer(reservation.settle_by_ms, self._actor, (SETTLE_BY_TIMER, reservation.id), None)
        for pool_waiter in self.pools.waiters():
            if pool_waiter.state in ("WAITING", SIGNALED):
                yield Timer(pool_waiter.due_ms, self._actor, (POOL_WAITER_TIMER, pool_waiter.id), None)
        # Due at once after a recovery: units may have come back while nobody moved the line.
        yield from self.pool_serve_timers(0)

    def restart(self, now_ms: int, grace_ms: int) -> Outcome:
        """After a recovery: signaled waiters' turns get the grace (`PoolTable.decide_turn_grace`);
        the grants' leases get the lease rule with every other lease of the space (`lease_kind`)."""
        outcome = self._commit(Outcome(), *self.pools.decide_turn_grace(now_ms, grace_ms))
        return self._waiter_timers(outcome, None)

    # -- the lease table (`leases.py`: the restart rule is decided there, for every kind at once) --

    def lease_kind(self) -> LeaseKind:
        return LeaseKind(GRANT_LEASE, self.pools.held_leases, self._lease_ended, self._lease_graced)

    def _lease_ended(self, grant: Grant, now_ms: int, outcome: Outcome) -> None:
        assert grant.expires_ms <= now_ms, "only an ended lease is expired"
        self._commit(outcome, self.pools.decide_expire(grant.id, grant.token, now_ms))  # type: ignore[arg-type]

    def _lease_graced(self, grant: Grant, expires_ms: int, now_ms: int, outcome: Outcome) -> None:
        record = self.pools.renewed_record(grant, grant.lease_ms, expires_ms, now_ms)
        record["graced"] = True
        self._commit(outcome, record)
        outcome.timers.append(self._grant_timer(grant.id, grant.token, grant.expires_ms))  # type: ignore[arg-type]

    def image(self) -> Iterator[dict]:
        """Pools with their grants, allowances then their waiters (in the order they came),
        work limits (after the tasks they count: `SpaceState.image` puts them last), budgets then
        their reservations."""
        yield from self.pools.image()
        yield from self.allowances.image()
        yield from self.budgets.image()
        yield from self.work_limits.image()
        for task_id, needs in self.requirements.items():
            yield {"type": TASK_REQUIREMENTS, "task_id": task_id, **needs, "at_ms": 0}

    def is_empty(self) -> bool:
        return not (len(self.pools) or len(self.allowances) or len(self.work_limits) or len(self.budgets) or self.requirements)

    def serve_timers(self, at_ms: int) -> Iterator[Timer]:
        """A serve at `at_ms` for every allowance with waiters and every pool with a line (a
        scope's end may have removed the head of a queue, so those behind it may fit now)."""
        for allowance in self.allowances.all():
            if allowance.queue:
                yield Timer(at_ms, self._actor, (SERVE_TIMER, allowance.id), at_ms)
        yield from self.pool_serve_timers(at_ms)

    def cascade_scope_ended(self, scope_ids: list[str], at_ms: int) -> None:
        """Applied with `scope.ended`: grants of the subtree give their units back, its waiters are
        CANCELLED. Budget reservations stay until settled, voided or their settleBy passes: the
        money may have been spent already, and only the caller knows how much."""
        self.pools.drop_scopes(scope_ids)
        self.pools.end_in_scopes(scope_ids, at_ms)
        self.allowances.end_in_scopes(scope_ids, at_ms)


CAPACITY_APPLY: dict[str, Callable[[CapacityCommands, dict], Any]] = {
    POOL_CREATED: lambda part, record: part.pools.apply_created(record),
    GRANT_ACQUIRED: lambda part, record: part.pools.apply_acquired(record),
    GRANT_RENEWED: lambda part, record: part.pools.apply_renewed(record),
    GRANT_RELEASED: lambda part, record: part.pools.apply_ended(record),
    GRANT_EXPIRED: lambda part, record: part.pools.apply_ended(record),
    POOL_IMAGE: lambda part, record: part.pools.apply_image(record),
    PERMIT_WAITER_ADDED: lambda part, record: part.pools.apply_waiter_added(record),
    PERMIT_WAITER_SIGNALED: lambda part, record: part.pools.apply_waiter_signaled(record),
    PERMIT_WAITER_ENDED: lambda part, record: part.pools.apply_waiter_ended(record),
    PERMIT_WAITER_IMAGE: lambda part, record: part.pools.apply_waiter_image(record),
    ALLOWANCE_CREATED: lambda part, record: part.allowances.apply_created(record),
    ALLOWANCE_CONSUMED: lambda part, record: part.allowances.apply_consumed(record),
    ALLOWANCE_COOLDOWN_RECORD: lambda part, record: part.allowances.apply_cooldown(record),
    WAITER_ADDED: lambda part, record: part.allowances.apply_waiter_added(record),
    WAITER_GRANTED: lambda part, record: part.allowances.apply_waiter_granted(record),
    WAITER_ENDED: lambda part, record: part.allowances.apply_waiter_ended(record),
    ALLOWANCE_IMAGE: lambda part, record: part.allowances.apply_image(record),
    WAITER_IMAGE: lambda part, record: part.allowances.apply_waiter_image(record),
    WORK_LIMIT_CREATED: lambda part, record: part.work_limits.apply_created(record),
    WORK_LIMIT_COUNTED: lambda part, record: part.work_limits.apply_counted(record),
    WORK_LIMIT_IMAGE: lambda part, record: part.work_limits.apply_image(record),
    BUDGET_CREATED: lambda part, record: part.budgets.apply_created(record),
    RESERVATION_MADE: lambda part, record: part.budgets.apply_made(record),
    RESERVATION_SETTLED: lambda part, record: part.budgets.apply_settled(record),
    RESERVATION_ENDED: lambda part, record: part.budgets.apply_ended(record),
    BUDGET_IMAGE: lambda part, record: part.budgets.apply_image(record),
    RESERVATION_IMAGE: lambda part, record: part.budgets.apply_reservation_image(record),
    TASK_REQUIREMENTS: CapacityCommands.apply_requirements,
}
assert set(CAPACITY_APPLY) == set(CAPACITY_RECORDS), "every capacity record type has an applier and a field list"

CAPACITY_TIMERS: dict[str, Callable[[CapacityCommands, Any, Any, int], Outcome]] = {
    GRANT_TIMER: CapacityCommands.on_grant_timer,
    SERVE_TIMER: CapacityCommands.on_serve_timer,
    WAITER_TIMER: CapacityCommands.on_waiter_timer,
    SETTLE_BY_TIMER: CapacityCommands.on_settle_by_timer,
    POOL_WAITER_TIMER: CapacityCommands.on_pool_waiter_timer,
    POOL_SERVE_TIMER: CapacityCommands.on_pool_serve_timer,
}
