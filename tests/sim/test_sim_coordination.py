"""The simulation catches what its coordination invariants are for: bugs injected into the kernel's
barriers, timers, task groups and event log for the length of a test."""

from __future__ import annotations

from runstate.actors.barriers import BarrierTable
from runstate.actors.events import EventLog
from runstate.actors.groups import GroupTable
from runstate.actors.timers import ARMED, FIRED, TimerTable

from .runner import run_seed


def _invariants(result) -> set[str]:
    return {violation.invariant for violation in result.violations}


def test_an_injected_barrier_that_counts_a_key_twice_is_caught(monkeypatch):
    """An arrival stored under a new name each time: a repeated key counts again and releases early."""

    def apply_arrived(self, record):
        barrier = self._by_id[record["id"]]
        barrier.arrivals[f"{record['arrival_key']}@{record['at_ms']}"] = None  # the bug
        if len(barrier.arrivals) == barrier.target:
            self._close(barrier, "RELEASED", record["at_ms"])
        return barrier

    monkeypatch.setattr(BarrierTable, "apply_arrived", apply_arrived)
    result = run_seed(4, virtual_s=90)
    assert "barrier-release" in _invariants(result), result.describe()


def test_an_injected_early_timer_is_caught(monkeypatch):
    """A timer that fires as soon as it is proposed, up to 5 s before its time."""
    import runstate.actors.timers as timers

    original = timers._timer_timers

    def early(space_id, table, timer):
        for deadline in original(space_id, table, timer):
            yield deadline._replace(due_ms=deadline.due_ms - 5_000) if timer.state == ARMED else deadline

    def decide_fire(self, timer, now_ms):
        if timer.state != ARMED:
            return None
        return {"type": "timer.fired", "id": timer.id, "at_ms": now_ms}  # the bug: no look at the time

    def apply_fired(self, record):
        timer = self._by_id[record["id"]]
        timer.state, timer.fired_ms = FIRED, record["at_ms"]
        return timer

    monkeypatch.setattr(timers, "_timer_timers", early)
    monkeypatch.setattr(TimerTable, "decide_fire", decide_fire)
    monkeypatch.setattr(TimerTable, "apply_fired", apply_fired)
    result = run_seed(5, virtual_s=90)
    assert "timer-early" in _invariants(result), result.describe()


def test_an_injected_group_threshold_off_by_one_is_caught(monkeypatch):
    """N_ACCEPTED that counts one accept more than it has."""
    original = GroupTable.evaluate

    def evaluate(self, group, at_ms):
        if group.state != "FINALIZED" and group.needed is not None:
            if list(group.members.values()).count("ACCEPTED") + 1 >= group.needed:  # the bug
                self._finalize(group, "SUCCEEDED", "threshold_reached", at_ms)
                return True
        return original(self, group, at_ms)

    monkeypatch.setattr(GroupTable, "evaluate", evaluate)
    result = run_seed(6, virtual_s=90)
    assert "group-outcome" in _invariants(result), result.describe()


def test_an_injected_cursor_that_includes_its_own_event_is_caught(monkeypatch):
    """A page "after" a cursor that starts at the cursor's event: the reader sees it twice."""

    def after(self, after):
        start = max(0, after - self.oldest_seq)  # the bug: not strictly after
        return (self._event(index) for index in range(start, len(self)))

    monkeypatch.setattr(EventLog, "after", after)
    result = run_seed(6, virtual_s=90)
    assert "event-log" in _invariants(result), result.describe()


def test_an_injected_name_lookup_across_scopes_is_caught(monkeypatch):
    """Timers and barriers looked up by name alone, not by (scope, name): a put in one run answers
    another run's timer or barrier."""

    def timer_by_name(self, scope_id, name):
        return next((timer for timer in self._by_id.values() if timer.name == name), None)  # the bug

    def barrier_by_name(self, scope_id, name):
        return next((barrier for barrier in self._by_id.values() if barrier.name == name), None)  # the bug

    monkeypatch.setattr(TimerTable, "by_name", timer_by_name)
    monkeypatch.setattr(BarrierTable, "by_name", barrier_by_name)
    result = run_seed(7, virtual_s=60)
    assert "named-once" in _invariants(result), result.describe()
