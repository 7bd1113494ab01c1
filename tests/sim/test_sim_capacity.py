"""The simulation catches what capacity's invariants are for: bugs injected into the kernel for the
length of a test (`test_sim.py` does the same for claims, deliveries and pool units)."""

from __future__ import annotations

from runstate.actors.pools import SIGNALED, WAITING, PoolTable

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
