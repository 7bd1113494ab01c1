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

Pure: no IO, no clock reads, no awaits.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Iterator

from .budgets import BUDGET_RECORDS, BudgetTable
from .commands import capacity_actor
from .errors import VALIDATION_FAILED, KernelError
from .limits import Limits
from .outcome import Outcome, Timer
from .pools import POOL_RECORDS, PoolTable
from .quotas import QUOTA_RECORDS, WAITING, Allowance, AllowanceTable
from .scopes import ScopeTree
from .tasks import TaskTable
from .timestamps import format_ms
from .work_limits import WORK_LIMIT_RECORDS, WorkLimitTable

if TYPE_CHECKING:
    from . import commands as c

__all__ = ["CapacityCommands", "CAPACITY_APPLY", "CAPACITY_TIMERS", "CAPACITY_RECORDS"]

GRANT_TIMER, SERVE_TIMER, WAITER_TIMER, SETTLE_BY_TIMER = "grant-lease", "quota-serve", "waiter-ttl", "settle-by"

# Every record type of capacity and its fields (type -> required fields), for the journal's registry.
CAPACITY_RECORDS: dict[str, tuple[str, ...]] = {
    **POOL_RECORDS, **QUOTA_RECORDS, **WORK_LIMIT_RECORDS, **BUDGET_RECORDS,
    "task.requirements": ("task_id", "pools", "quotas", "budgets", "at_ms"),  # admission.py
}

Commit = Callable[..., Outcome]


class CapacityCommands:
    __slots__ = (
        "_space_id", "limits", "scopes", "pools", "allowances", "work_limits", "budgets", "_commit", "requirements", "wakeups",
    )
    # Queues with an admission parked on them: not state (parked calls do not outlive a process).
    # (`scopes` is the space's own tree, compared there.)
    _DERIVED = ("wakeups", "scopes")

    def __init__(self, space_id: str, limits: Limits, scopes: ScopeTree, tasks: TaskTable, commit: Commit) -> None:
        self._space_id = space_id
        self.limits = limits
        self.scopes = scopes
        self.pools = PoolTable(limits.pools_max)
        self.allowances = AllowanceTable(limits.allowances_max, limits.waiters_max)
        self.work_limits = WorkLimitTable(tasks, limits.work_limits_max)
        self.budgets = BudgetTable(limits.budgets_max)
        self._commit = commit
        # Task id -> what admission must take for it (`admission.py`), kept with the task.
        self.requirements: dict[str, dict] = {}
        self.wakeups: set[tuple] = set()

    def needs_admission(self, task_id: str) -> bool:
        return task_id in self.requirements

    def take_wakeups(self) -> list[tuple]:
        """The queues of parked admissions, once: each looks again and parks again if need be."""
        woken = list(self.wakeups)
        self.wakeups.clear()
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

    def acquire_grant(self, command: "c.AcquireGrant", now_ms: int) -> Outcome:
        self.scopes.require_active(command.scope_id, now_ms)
        records = self.pools.decide_acquire(
            command.pool_id, command.grant_id, command.scope_id, command.units, command.token, command.holder,
            command.session, command.lease_s * 1000, now_ms,
        )
        outcome = self._commit(Outcome(), *records)
        grant = self.pools.grant(command.grant_id)
        assert grant is not None
        outcome.timers.append(self._grant_timer(grant.id, grant.token, grant.expires_ms))
        outcome.reply = self.pools.grant_view(grant, self.pools.get(grant.pool_id))
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
        reply.update(token=None, released=True, releasedAt=format_ms(now_ms))
        outcome.reply = reply
        return outcome

    def on_grant_timer(self, grant_id: str, token: Any, now_ms: int) -> Outcome:
        record = self.pools.decide_expire(grant_id, token, now_ms)
        return Outcome() if record is None else self._commit(Outcome(), record)

    def _grant_timer(self, grant_id: str, token: str, expires_ms: int) -> Timer:
        return Timer(expires_ms, self._actor, (GRANT_TIMER, grant_id), token)

    # -- quotas ---------------------------------------------------------------------------------

    def create_allowance(self, command: "c.CreateAllowance", now_ms: int) -> Outcome:
        record = self.allowances.decide_create(command.allowance_id, command.name, command.units_limit, command.window_s * 1000, now_ms)
        outcome = self._commit(Outcome(), record)
        outcome.reply = self.allowances.view(self.allowances.get(command.allowance_id), now_ms)
        return outcome

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
        self._commit(outcome, {"type": "work_limit.counted", "id": limit.id, "task_id": task_id, "at_ms": now_ms})

    # -- budgets --------------------------------------------------------------------------------

    def create_budget(self, command: "c.CreateBudget", now_ms: int) -> Outcome:
        record = self.budgets.decide_create(command.budget_id, command.name, command.currency, command.scale, command.limit, now_ms)
        outcome = self._commit(Outcome(), record)
        outcome.reply = self.budgets.view(self.budgets.get(command.budget_id))
        return outcome

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
        outcome = self._commit(Outcome(), *budgets.decide_settle(reservation, command.amount, command.work_key, now_ms))
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

    def restart(self, newest_ms: int, now_ms: int, grace_ms: int) -> Outcome:
        """After a recovery: grant leases get the claims' rule (`PoolTable.decide_restart`)."""
        outcome = self._commit(Outcome(), *self.pools.decide_restart(newest_ms, now_ms, grace_ms))
        for grant in self.pools.grants():
            if grant.message_id is None:
                outcome.timers.append(self._grant_timer(grant.id, grant.token, grant.expires_ms))
        return outcome

    def image(self) -> Iterator[dict]:
        """Pools with their grants, allowances then their waiters (in the order they came),
        work limits (after the tasks they count: `SpaceState.image` puts them last), budgets then
        their reservations."""
        yield from self.pools.image()
        yield from self.allowances.image()
        yield from self.budgets.image()
        yield from self.work_limits.image()
        for task_id, needs in self.requirements.items():
            yield {"type": "task.requirements", "task_id": task_id, **needs, "at_ms": 0}

    def is_empty(self) -> bool:
        return not (len(self.pools) or len(self.allowances) or len(self.work_limits) or len(self.budgets) or self.requirements)

    def serve_timers(self, at_ms: int) -> Iterator[Timer]:
        """A serve at `at_ms` for every allowance with waiters (a scope's end may have removed the
        head of a queue, so those behind it may fit now)."""
        for allowance in self.allowances.all():
            if allowance.queue:
                yield Timer(at_ms, self._actor, (SERVE_TIMER, allowance.id), at_ms)

    def cascade_scope_ended(self, scope_ids: list[str], at_ms: int) -> None:
        """Applied with `scope.ended`: grants of the subtree give their units back, its waiters are
        CANCELLED. Budget reservations stay until settled, voided or their settleBy passes: the
        money may have been spent already, and only the caller knows how much."""
        self.pools.drop_scopes(scope_ids)
        self.allowances.end_in_scopes(scope_ids, at_ms)


CAPACITY_APPLY: dict[str, Callable[[CapacityCommands, dict], Any]] = {
    "pool.created": lambda part, record: part.pools.apply_created(record),
    "grant.acquired": lambda part, record: part.pools.apply_acquired(record),
    "grant.renewed": lambda part, record: part.pools.apply_renewed(record),
    "grant.released": lambda part, record: part.pools.apply_ended(record),
    "grant.expired": lambda part, record: part.pools.apply_ended(record),
    "pool.image": lambda part, record: part.pools.apply_image(record),
    "allowance.created": lambda part, record: part.allowances.apply_created(record),
    "allowance.consumed": lambda part, record: part.allowances.apply_consumed(record),
    "allowance.cooldown": lambda part, record: part.allowances.apply_cooldown(record),
    "waiter.added": lambda part, record: part.allowances.apply_waiter_added(record),
    "waiter.granted": lambda part, record: part.allowances.apply_waiter_granted(record),
    "waiter.ended": lambda part, record: part.allowances.apply_waiter_ended(record),
    "allowance.image": lambda part, record: part.allowances.apply_image(record),
    "waiter.image": lambda part, record: part.allowances.apply_waiter_image(record),
    "work_limit.created": lambda part, record: part.work_limits.apply_created(record),
    "work_limit.counted": lambda part, record: part.work_limits.apply_counted(record),
    "work_limit.image": lambda part, record: part.work_limits.apply_image(record),
    "budget.created": lambda part, record: part.budgets.apply_created(record),
    "reservation.made": lambda part, record: part.budgets.apply_made(record),
    "reservation.settled": lambda part, record: part.budgets.apply_settled(record),
    "reservation.ended": lambda part, record: part.budgets.apply_ended(record),
    "budget.image": lambda part, record: part.budgets.apply_image(record),
    "reservation.image": lambda part, record: part.budgets.apply_reservation_image(record),
    "task.requirements": CapacityCommands.apply_requirements,
}
assert set(CAPACITY_APPLY) == set(CAPACITY_RECORDS), "every capacity record type has an applier and a field list"

CAPACITY_TIMERS: dict[str, Callable[[CapacityCommands, Any, Any, int], Outcome]] = {
    GRANT_TIMER: CapacityCommands.on_grant_timer,
    SERVE_TIMER: CapacityCommands.on_serve_timer,
    WAITER_TIMER: CapacityCommands.on_waiter_timer,
    SETTLE_BY_TIMER: CapacityCommands.on_settle_by_timer,
}
