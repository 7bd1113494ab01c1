"""The simulation catches what capacity's invariants are for: bugs injected into the kernel for the
length of a test (`test_sim.py` does the same for claims, deliveries and pool units)."""

from __future__ import annotations

from runstate.actors.budgets import BudgetTable
from runstate.actors.pools import SIGNALED, WAITING, PoolTable
from runstate.actors.quotas import ALLOWANCE_REFUNDED, AllowanceTable
from runstate.actors.scopes import ScopeTree

from .runner import run_seeds_until


def test_an_injected_newest_first_pool_line_is_caught(monkeypatch):
    """A pool whose line gives the turn to the newest waiter that fits (and applies such a signal
    without its order check) lets a later waiter overtake an earlier one."""

    def decide_serve(self, pool, turn_ms, now_ms):
        records, live = [], []
        free = pool.units_total - self.in_use(pool, now_ms)
        for waiter_id in pool.line:
            waiter = self._waiters[waiter_id]
            if now_ms >= waiter.due_ms:
                records.append({"type": "permit_waiter.ended", "id": waiter.id, "state": "EXPIRED", "grant_id": None, "at_ms": now_ms})
            elif waiter.state == SIGNALED:
                free -= waiter.units
            else:
                live.append(waiter)
        for waiter in reversed(live):  # the bug: the newest first
            if waiter.units <= free:
                records.append({"type": "permit_waiter.signaled", "id": waiter.id, "turn_ends_ms": now_ms + turn_ms, "at_ms": now_ms})
                free -= waiter.units
        return records

    def apply_waiter_signaled(self, record):
        waiter = self._waiters[record["id"]]
        assert waiter.state == WAITING
        waiter.state, waiter.signaled_ms, waiter.turn_ends_ms = SIGNALED, record["at_ms"], record["turn_ends_ms"]

    monkeypatch.setattr(PoolTable, "decide_serve", decide_serve)
    monkeypatch.setattr(PoolTable, "apply_waiter_signaled", apply_waiter_signaled)
    found, result = run_seeds_until("pool-fifo", (1, 2, 3), virtual_s=90)
    assert "pool-fifo" in found, result.describe()


def test_an_injected_late_charge_taken_twice_is_caught(monkeypatch):
    """A late charge that does not look whether its released reservation was charged late
    already (nor pair them): its cost is charged twice."""

    def check_late(self, budget, late_of, scope_id, amount):
        self.reservation(budget, late_of)  # the bug: any number of late charges

    def link_late(self, reservation, late_of):
        reservation.late_of = late_of

    monkeypatch.setattr(BudgetTable, "check_late", check_late)
    monkeypatch.setattr(BudgetTable, "_link_late", link_late)
    found, result = run_seeds_until("late-charge", (1, 2, 3, 4), virtual_s=120)
    assert "late-charge" in found, result.describe()


def test_an_injected_reservation_in_an_ended_run_is_caught(monkeypatch):
    """A reserve that takes any reservation in an ended run, not only a late charge's."""

    def require_active(self, scope_id, now_ms):
        self.get(scope_id)  # the bug: an ended run is taken as active

    monkeypatch.setattr(ScopeTree, "require_active", require_active)
    found, result = run_seeds_until("late-charge", (1, 2, 3, 4), virtual_s=120)
    assert "late-charge" in found, result.describe()


def test_an_injected_refund_given_twice_is_caught(monkeypatch):
    """A refund that does not look whether its consumption was refunded already (nor mark it when
    applied): a second refund gives the units back again, and the window hands them out twice."""

    def decide_refund(self, allowance, consumption_id, now_ms):
        recent = allowance.recent.get(consumption_id)
        if recent is None or recent.window_start_ms != allowance.window_at(now_ms):
            return None
        return {"type": ALLOWANCE_REFUNDED, "id": allowance.id, "consumption_id": consumption_id, "units": recent.units, "at_ms": now_ms}

    def apply_refunded(self, record):
        allowance = self._allowances[record["id"]]
        allowance.used = max(0, allowance.used - record["units"])  # the bug: never marked refunded

    monkeypatch.setattr(AllowanceTable, "decide_refund", decide_refund)
    monkeypatch.setattr(AllowanceTable, "apply_refunded", apply_refunded)
    found, result = run_seeds_until("quota-refund", (1, 2, 3, 4), virtual_s=120)
    assert "quota-refund" in found, result.describe()


def test_an_injected_return_that_keeps_what_its_admission_took_is_caught(monkeypatch):
    """A return of an admitted delivery that gives back nothing taken with it: its budget
    reservations stay held for an hour, for no one."""
    from runstate.actors import deliveries

    monkeypatch.setattr(deliveries, "_give_back_admitted", lambda space, outcome, message, now_ms: None)
    found, result = run_seeds_until("return-gives-back", (1, 2, 3), virtual_s=120)
    assert "return-gives-back" in found, result.describe()
