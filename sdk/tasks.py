"""Task tickets: a handle on one shared task, by id.

A ticket is only a task id (and the scope it was submitted in): a process that restarts gets it
back with `rs.scope(run_id).task(task_id)` and reads the recorded outcome; nothing runs again.
`result()` waits on this side only: when it times out the task carries on, and stopping it takes
an explicit `cancel()`.
"""

from __future__ import annotations

from typing import Any

import anyio

from ._checks import check_id
from . import _runtime
from ._context import Context
from .errors import WaitTimeoutError
from .types import TaskResult, TaskView

__all__ = ["TaskTicket", "TERMINAL_STATES"]

TERMINAL_STATES: frozenset[str] = frozenset({"SUCCEEDED", "FAILED", "CANCELLED", "EXPIRED"})
"""The states a task ends in: `result()` returns once the task is in one of them."""
DEFAULT_TIMEOUT_MS = 30_000
DEFAULT_POLL_MS = 250


class TaskTicket:
    """A handle on one shared task: `id` (the task id) and `scope_id` (the run it was submitted
    in, if known). `mailbox.submit()` returns one; `rs.scope(run_id).task(task_id)` makes one
    again after a restart. Every method is one or more requests; nothing runs the task again."""

    def __init__(self, ctx: Context, task_id: str, scope_id: str | None = None) -> None:
        self._ctx = ctx
        self.id = check_id("task_id", task_id)
        self.scope_id = scope_id

    def __repr__(self) -> str:
        return f"TaskTicket(id={self.id!r})"

    async def status(self) -> TaskView:
        """The task view: `state`, `attempt`, `outcome`, `outcomeReason`, `subscribers`..."""
        view: TaskView = (await self._ctx.call("GET", f"/tasks/{self.id}")).body
        return view

    async def result(self, *, timeout_ms: int = DEFAULT_TIMEOUT_MS, poll_ms: int = DEFAULT_POLL_MS) -> TaskResult:
        """Poll until the task is terminal: `{"state", "outcome", "reason"}`, and `"tombstoned":
        True` when the result's retention ran out (`outcome` is then None: the result expired, it is
        not an empty one). Raises `WaitTimeoutError` after `timeout_ms`; the task keeps going."""
        view = await self._poll(TERMINAL_STATES, timeout_ms, poll_ms, "finish")
        result = TaskResult(state=view["state"], outcome=view.get("outcome"), reason=view.get("outcomeReason"))
        if view.get("tombstoned"):
            result["tombstoned"] = True
        return result

    async def await_admission(self, *, timeout_ms: int = DEFAULT_TIMEOUT_MS, poll_ms: int = DEFAULT_POLL_MS) -> TaskView:
        """Poll until the task is `RUNNING` or terminal; returns the whole view."""
        return await self._poll(TERMINAL_STATES | {"RUNNING"}, timeout_ms, poll_ms, "start")

    async def _poll(self, states: frozenset[str], timeout_ms: int, poll_ms: int, what: str) -> TaskView:
        deadline = _runtime.deadline_in(timeout_ms)
        while True:
            view = await self.status()
            if view["state"] in states:
                return view
            if anyio.current_time() >= deadline:
                raise WaitTimeoutError(
                    "WAIT_TIMEOUT", 0, f"task {self.id} did not {what} within {timeout_ms} ms"
                )
            await _runtime.sleep_before(poll_ms / 1000, deadline)

    async def cancel(self, reason: str | None = None) -> dict[str, Any]:
        """Cancel the task; without a reason the body is `{}`."""
        answer: dict[str, Any] = (await self._ctx.call("POST", f"/tasks/{self.id}/cancel", body={"reason": reason})).body
        return answer

    async def join(self, subscriber_id: str, scope_id: str | None = None) -> dict[str, Any]:
        """Subscribe to the task (harmless to repeat). `scope_id` defaults to the ticket's scope."""
        scope = scope_id or self.scope_id
        if not scope:
            raise ValueError("join() needs a scope_id: this ticket does not know its scope")
        body = {"subscriberId": subscriber_id, "scopeId": scope}
        answer: dict[str, Any] = (await self._ctx.call("POST", f"/tasks/{self.id}/join", body=body)).body
        return answer

    async def detach(self, subscriber_id: str) -> dict[str, Any]:
        """Unsubscribe. A task left with no subscribers is not cancelled."""
        body = {"subscriberId": subscriber_id}
        answer: dict[str, Any] = (await self._ctx.call("POST", f"/tasks/{self.id}/detach", body=body)).body
        return answer
