"""Reads of barriers, timers, task groups and the event log, straight from the state (no turn).

Like `reads.py`: a read may see a change whose record is not yet durable. The event log is the
exception a reader acts on (a cursor it resumes from), so the routes that serve it wait until
everything appended so far is durable before they answer (`server/routes/coordination.py`).
"""

from __future__ import annotations

from typing import Any

from . import events as event_log

__all__ = ["barrier", "timer", "group", "events_page"]


def barrier(kernel: Any, space: str, barrier_id: str) -> dict:
    part = kernel.state.space(space).coordination
    return part.barriers.view(part.barriers.get(barrier_id), kernel.clock.now_ms())


def timer(kernel: Any, space: str, timer_id: str) -> dict:
    part = kernel.state.space(space).coordination
    return part.timers.view(part.timers.get(timer_id))


def group(kernel: Any, space: str, group_id: str) -> dict:
    part = kernel.state.space(space).coordination
    return part.groups.view(part.groups.get(group_id), kernel.clock.now_ms())


def events_page(kernel: Any, space: str, after: int | None, limit: int, types=None, aggregate=None, scope_id=None) -> dict:
    return event_log.page(kernel.state.space(space), after, limit, types, aggregate, scope_id)
