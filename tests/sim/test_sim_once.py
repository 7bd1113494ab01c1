"""The simulation catches what its once invariant is for: a bug injected into once for the length
of a test."""

from __future__ import annotations

from runstate.actors import commands
from runstate.actors.once import DONE, OPEN, OnceCommands, OnceTable
from runstate.actors.transitions import TRANSITIONS, on

from .runner import run_seed


def test_an_injected_once_that_runs_a_finished_key_again_is_caught(monkeypatch):
    """An acquire that takes a DONE key for an open one: a second holder records a second result."""
    original = OnceCommands.acquire

    def acquire(self, command, now_ms):
        slot = self._slots.find(command.scope_id, command.key)
        if slot is not None and slot.state == DONE:
            slot.state = OPEN  # the bug: a recorded result does not close the key
        return original(self, command, now_ms)

    monkeypatch.setitem(TRANSITIONS, commands.AcquireOnce, on("onces", acquire))
    result = run_seed(1, virtual_s=90)
    assert "once-result" in {violation.invariant for violation in result.violations}, result.describe()



def test_an_injected_release_that_hands_an_attempt_number_out_again_is_caught(monkeypatch):
    """A release that gives the attempt back by lowering the count: the next holder gets the
    released holder's attempt number (its generation) again."""
    original = OnceTable.apply_released

    def apply_released(self, record):
        slot = original(self, record)
        slot.attempts -= 1  # the bug: the generation goes back
        slot.released -= 1
        return slot

    monkeypatch.setattr(OnceTable, "apply_released", apply_released)
    result = run_seed(1, virtual_s=300)
    assert "generations" in {violation.invariant for violation in result.violations}, result.describe()
