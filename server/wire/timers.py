"""The wire shapes of timers (`actors/timers.py`'s views)."""

from __future__ import annotations

from typing import Any

from ...actors.timers import FiredTimerView, NamedTimerView, TimerPollOneView, TimerPollView, TimerView
from ...actors.coordination_reads import RunTimersView
from .shape import Shape, component

__all__ = ["RUN_TIMERS", "TIMER", "FIRED_TIMER", "NAMED_TIMER", "TIMER_POLL", "TIMER_POLL_ONE", "COMPONENTS"]

TIMER = Shape(TimerView)
# A poll's entry: the timer and the token that acknowledges it.
FIRED_TIMER = TIMER.extended(FiredTimerView)
# A put by name: the server's clock is `now` (what the official 0.3.0 client reads).
NAMED_TIMER = Shape(NamedTimerView, rename={"now_ms": "now"})
# A poll's answer; with `timerId`, the timer as it stands too (`timer`).
TIMER_POLL = Shape(TimerPollView)
TIMER_POLL_ONE = Shape(TimerPollOneView)
# A run's timers, newest first (`/scopes/{scope_id}/timers`).
RUN_TIMERS = Shape(RunTimersView)

# The OpenAPI components these shapes make, by name.
COMPONENTS: dict[str, dict[str, Any]] = {
    "Timer": component(TIMER),
    "NamedTimer": component(NAMED_TIMER),
    "TimerPoll": component(TIMER_POLL, TIMER_POLL_ONE),
    "RunTimers": component(RUN_TIMERS),
}
