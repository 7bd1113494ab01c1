"""Barriers, timers, task groups, events and diagnostics: the same names as the official client.

    run.barriers.create(target=3)        -> BarrierHandle: arrive(key=), status(), wait()
    run.timers.create(after_seconds=60)  -> TimerHandle: wait() (acks it), cancel()
    run.groups.create(mailbox=, condition=, ...) -> GroupHandle: submit, accept, reject, close,
                                            seal, join_task, status, wait
    rs.events.list(), rs.events.watch()  (an async iterator that resumes after network errors)
    rs.diagnostics.run(scope_id), .workers(scope_id), .waits()

Where the server lets a wait park, it parks there: `TimerHandle.wait` holds its poll on the server
(`waitMs`, for its own timer only) instead of asking every 250 ms; `events.watch` is a long poll.
Barriers and groups are read every `poll_ms`, as the protocol gives them no held read. Every wait
is bounded by the caller's `timeout_ms` and raises `WaitTimeoutError` after it; the thing waited
for carries on.
"""

from __future__ import annotations

import builtins

from datetime import datetime, timezone
from typing import Any, AsyncIterator

import anyio

from ._checks import check_id
from . import _runtime
from ._context import Context
from .claims import parse_timestamp
from .errors import BarrierCancelledError, ConflictError, NotFoundError, UnavailableError, WaitTimeoutError
from .tasks import TaskTicket

__all__ = [
    "BarrierHandle", "BarriersAPI", "TimerHandle", "TimersAPI", "GroupHandle", "GroupsAPI", "EventsAPI", "DiagnosticsAPI",
]

POLL_MS = 250
# The longest hold one timer poll asks of the server (it caps it again itself).
TIMER_HOLD_MS_MAX = 20_000
# After a watch fails on the network, wait this long before asking again (doubling up to the max).
WATCH_RETRY_S, WATCH_RETRY_S_MAX = 0.25, 5.0


def _timeout(what: str, timeout_ms: int) -> WaitTimeoutError:
    return WaitTimeoutError("WAIT_TIMEOUT", 0, f"{what} within {timeout_ms} ms")


# -- barriers ------------------------------------------------------------------------------------


class BarrierHandle:
    """A barrier by its `id`: `arrive(key=)`, `status()`, `wait()`. It is released once `target`
    distinct keys have arrived."""

    def __init__(self, ctx: Context, barrier_id: str) -> None:
        self._ctx = ctx
        self.id = check_id("barrier_id", barrier_id)

    def __repr__(self) -> str:
        return f"BarrierHandle(id={self.id!r})"

    async def arrive(self, *, key: str) -> dict[str, Any]:
        """Arrive once under `key` (again with the same key counts once); the barrier view."""
        answer: dict[str, Any] = (await self._ctx.call("POST", f"/barriers/{self.id}/arrive", body={"arrivalKey": key})).body
        return answer

    async def status(self) -> dict[str, Any]:
        """The barrier view: its `target`, how many distinct keys have `arrived` (a count, not
        the keys), its `state` and `epoch`."""
        answer: dict[str, Any] = (await self._ctx.call("GET", f"/barriers/{self.id}")).body
        return answer

    async def wait(self, *, timeout_ms: int = 60_000, poll_ms: int = POLL_MS) -> dict[str, Any]:
        """Until the barrier is released (or its epoch moves on); `BarrierCancelledError`
        (`BARRIER_CANCELLED`, a `ConflictError` and a `StoppedError`, as an `arrive()` is
        answered) when its scope ended. It does not arrive for the caller."""
        deadline = _runtime.deadline_in(timeout_ms)
        pinned = await self.status()
        while True:
            view = await self.status()
            if view["state"] == "CANCELLED":
                raise BarrierCancelledError("BARRIER_CANCELLED", 409, f"barrier {self.id} was cancelled")
            if view["state"] == "RELEASED" or view["epoch"] != pinned["epoch"]:
                return view
            if anyio.current_time() >= deadline:
                raise _timeout(f"barrier {self.id} did not release", timeout_ms)
            await _runtime.sleep_before(poll_ms / 1000, deadline)


class BarriersAPI:
    """`run.barriers`: make barriers in the run (`scope_id`), or reach one by id."""

    def __init__(self, ctx: Context, scope_id: str) -> None:
        self._ctx = ctx
        self.scope_id = scope_id

    async def create(self, *, target: int) -> BarrierHandle:
        """A new barrier that is released once `target` distinct keys have arrived."""
        reply = await self._ctx.call("POST", "/barriers", body={"scopeId": self.scope_id, "target": target})
        return BarrierHandle(self._ctx, reply.body["id"])

    def get(self, barrier_id: str) -> BarrierHandle:
        """A handle on a barrier by id; sends nothing."""
        return BarrierHandle(self._ctx, barrier_id)


# -- timers --------------------------------------------------------------------------------------


class TimerHandle:
    """A durable timer by its `id`, in the run `scope_id`: `fire_at` is when it fires (an aware
    datetime; the epoch on a handle made by id, which does not know it). `wait()`, `status()`,
    `cancel()`."""

    def __init__(self, ctx: Context, scope_id: str, timer_id: str, fire_at: datetime) -> None:
        self._ctx = ctx
        self.scope_id = scope_id
        self.id = check_id("timer_id", timer_id)
        self.fire_at = fire_at

    def __repr__(self) -> str:
        return f"TimerHandle(id={self.id!r})"

    async def status(self) -> dict[str, Any]:
        """The timer view: its `state` (`ARMED`, `FIRED`, `ACKED`, `CANCELLED`...) and `fireAt`."""
        answer: dict[str, Any] = (await self._ctx.call("GET", f"/timers/{self.id}")).body
        return answer

    async def wait(self, *, timeout_ms: int = 30_000, poll_ms: int = POLL_MS) -> dict[str, Any]:
        """Until the timer fires; acknowledges it and returns `{"fired_at": datetime}`.
        `ConflictError` when it was cancelled or expired unacknowledged."""
        deadline = _runtime.deadline_in(timeout_ms)
        while True:
            hold_ms = max(0, min(int((deadline - anyio.current_time()) * 1000), TIMER_HOLD_MS_MAX))
            asked = anyio.current_time()
            body = {"scopeId": self.scope_id, "timerId": self.id, "waitMs": hold_ms}
            listing = (await self._ctx.call("POST", "/timers/poll", body=body, wait_ms=hold_ms)).body
            for entry in listing["timers"]:
                if entry["id"] == self.id:
                    await self._ctx.call("POST", f"/timers/{self.id}/ack", body={"token": entry["token"]})
                    return {"fired_at": parse_timestamp(entry["firedAt"])}
            state = (listing.get("timer") or {}).get("state")
            if state == "ACKED":  # acknowledged by another handle of this timer
                return {"fired_at": parse_timestamp(listing["timer"]["firedAt"])}
            if state in ("CANCELLED", "EXPIRED"):
                raise ConflictError("CONFLICT", 409, f"timer {self.id} is {state.lower()}")
            if anyio.current_time() >= deadline:
                raise _timeout(f"timer {self.id} did not fire", timeout_ms)
            # A server that does not hold polls answers at once: fall back to polling.
            if anyio.current_time() - asked < poll_ms / 1000:
                await _runtime.sleep_before(poll_ms / 1000, deadline)

    async def cancel(self) -> dict[str, Any]:
        """Cancel the timer before it fires; its view."""
        answer: dict[str, Any] = (await self._ctx.call("POST", f"/timers/{self.id}/cancel")).body
        return answer


class TimersAPI:
    """`run.timers`: arm durable timers in the run (`scope_id`), or reach one by id."""

    def __init__(self, ctx: Context, scope_id: str) -> None:
        self._ctx = ctx
        self.scope_id = scope_id

    async def create(self, *, after_seconds: int | None = None, at: str | None = None) -> TimerHandle:
        """Arm a timer `after_seconds` from now, or `at` a timestamp (give exactly one)."""
        body = {"scopeId": self.scope_id, "afterSeconds": after_seconds, "at": at}
        reply = (await self._ctx.call("POST", "/timers", body=body)).body
        return TimerHandle(self._ctx, self.scope_id, reply["id"], parse_timestamp(reply["fireAt"]))

    def get(self, timer_id: str) -> TimerHandle:
        """A handle on a timer by id; sends nothing (its fire time is not known: the epoch)."""
        return TimerHandle(self._ctx, self.scope_id, timer_id, datetime.fromtimestamp(0, timezone.utc))


# -- task groups ---------------------------------------------------------------------------------


class GroupHandle:
    """A task group by its `id`; `scope_id` is its gate run, when known. Members are submitted
    through it, accepted or rejected as they finish, and the group is finalized by its condition."""

    def __init__(self, ctx: Context, group_id: str, scope_id: str | None = None) -> None:
        self._ctx = ctx
        self.id = check_id("group_id", group_id)
        self.scope_id = scope_id  # the group's gate scope, when known

    def __repr__(self) -> str:
        return f"GroupHandle(id={self.id!r})"

    def _path(self, suffix: str = "") -> str:
        return f"/task-groups/{self.id}{suffix}"

    async def status(self) -> dict[str, Any]:
        """The group view: its `state`, members and counts, and its `outcome` once finalized."""
        answer: dict[str, Any] = (await self._ctx.call("GET", self._path())).body
        return answer

    async def submit(self, input: object, *, key: str, deadline: str | None = None) -> TaskTicket:
        """Submit a member task, delivered through the group's mailbox in its gate scope."""
        reply = (await self._ctx.call("POST", self._path("/tasks"), body={"taskKey": key, "input": input, "deadline": deadline})).body
        return TaskTicket(self._ctx, reply["taskId"], reply.get("scopeId"))

    async def close(self) -> dict[str, Any]:
        """No more members (SEALED); harmless to repeat. `{"state", "outcome", "outcomeReason"}`."""
        answer: dict[str, Any] = (await self._ctx.call("POST", self._path("/close"))).body
        return answer

    async def seal(self) -> dict[str, Any]:
        """As `close`, but a `ConflictError` once the group is finalized."""
        answer: dict[str, Any] = (await self._ctx.call("POST", self._path("/seal"))).body
        return answer

    async def accept(self, task_id: str) -> dict[str, Any]:
        """Count the finished member `task_id` towards the group's condition."""
        answer: dict[str, Any] = (await self._ctx.call("POST", self._path(f"/tasks/{task_id}/accept"))).body
        return answer

    async def reject(self, task_id: str) -> dict[str, Any]:
        """Count the finished member `task_id` as not accepted."""
        answer: dict[str, Any] = (await self._ctx.call("POST", self._path(f"/tasks/{task_id}/reject"))).body
        return answer

    async def join_task(self, task_id: str) -> dict[str, Any]:
        """Make an outside task a member (only while the group is open)."""
        answer: dict[str, Any] = (await self._ctx.call("POST", self._path("/join-task"), body={"taskId": task_id})).body
        return answer

    async def wait(self, *, timeout_ms: int = 30_000, poll_ms: int = POLL_MS) -> dict[str, Any]:
        """Until the group is FINALIZED: `{"outcome", "outcomeReason"}`."""
        deadline = _runtime.deadline_in(timeout_ms)
        while True:
            view = await self.status()
            if view["state"] == "FINALIZED":
                return {"outcome": view.get("outcome"), "outcomeReason": view.get("outcomeReason")}
            if anyio.current_time() >= deadline:
                raise _timeout(f"group {self.id} was not finalized", timeout_ms)
            await _runtime.sleep_before(poll_ms / 1000, deadline)


class GroupsAPI:
    """`run.groups`: make task groups, or reach one by id."""

    def __init__(self, ctx: Context) -> None:
        self._ctx = ctx

    async def create(
        self,
        *,
        mailbox: str,
        condition: str,
        threshold: int | None = None,
        expected_members: int | None = None,
        deadline: str | None = None,
        parent_scope_id: str | None = None,
    ) -> GroupHandle:
        """A group with its own gate scope, delivering through the mailbox named `mailbox`.
        `parent_scope_id` is not taken from the scope handle (as in the official client)."""
        rows = (await self._ctx.call("GET", "/mailboxes")).body["mailboxes"]
        mailbox_id = next((row["id"] for row in rows if row["name"] == mailbox), None)
        if mailbox_id is None:
            raise NotFoundError("NOT_FOUND", 404, f"mailbox {mailbox!r} not found in space {self._ctx.space_id}")
        body = {
            "mailboxId": mailbox_id, "condition": condition, "threshold": threshold, "expectedMembers": expected_members,
            "deadline": deadline, "parentScopeId": parent_scope_id,
        }
        reply = (await self._ctx.call("POST", "/task-groups", body=body)).body
        return GroupHandle(self._ctx, reply["groupId"], reply.get("scopeId"))

    def by_id(self, group_id: str) -> GroupHandle:
        """Re-attach to a group by id; sends nothing."""
        return GroupHandle(self._ctx, group_id)


# -- events --------------------------------------------------------------------------------------


class EventsAPI:
    """`rs.events`: the space's event log, a page at a time (`list`) or followed (`watch`)."""

    def __init__(self, ctx: Context) -> None:
        self._ctx = ctx

    async def list(
        self, *, cursor: str | None = None, limit: int | None = None, latest: int | None = None
    ) -> dict[str, Any]:
        """One page: `{"events", "nextCursor"}`, the events strictly after `cursor`, oldest first.

        `latest=N` instead (0 to 1000; not with `cursor` nor `limit`): the space's newest N events, oldest of
        them first, and the cursor after the newest: what just happened, and where to follow
        from (`latest=0` gives that cursor alone)."""
        if latest is not None and cursor:
            raise ValueError("give either cursor (the events after it) or latest (the newest ones), not both")
        if latest is not None and limit is not None:
            raise ValueError("latest says how many events already: give limit without it")
        query = {"cursor": cursor or None, "limit": limit, "latest": latest}
        answer: dict[str, Any] = (await self._ctx.call("GET", "/events", query=query)).body
        return answer

    async def watch(
        self,
        *,
        cursor: str | None = None,
        types: builtins.list[str] | None = None,
        aggregate: dict[str, Any] | None = None,
        scope_id: str | None = None,
        limit: int | None = None,
        wait_seconds: int | None = None,
        stop_event: Any = None,
    ) -> AsyncIterator[dict[str, Any]]:
        """Every event after `cursor`, as it happens. Each carries a `cursor`: that of the page it
        came in (the page's `nextCursor`, as the official clients give it), the position after the
        page's last event, not after the event itself. Resuming from the `cursor` of an event
        handled part-way through a page skips the rest of that page: resume from that of the last
        event of a page handled whole (or from the cursor before it, deduplicating by `eventId`).

        A network failure is retried with the same cursor (so nothing is skipped or repeated);
        errors the server decided, `CursorExpiredError` among them, are raised. Setting
        `stop_event` ends the iteration after the current page.
        """
        current = cursor or None
        retry_s = WATCH_RETRY_S
        hold_s = 8 if wait_seconds is None else wait_seconds
        while stop_event is None or not stop_event.is_set():
            query = {
                "cursor": current,
                "types": ",".join(types) if types else None,
                "aggregate": f"{aggregate['type']}:{aggregate['id']}" if aggregate else None,
                "scopeId": scope_id,
                "limit": limit,
                "waitSeconds": wait_seconds,
            }
            try:
                page = (await self._ctx.call("GET", "/watch", query=query, wait_ms=hold_s * 1000)).body
            except UnavailableError:
                await anyio.sleep(retry_s)
                retry_s = min(retry_s * 2, WATCH_RETRY_S_MAX)
                continue
            retry_s = WATCH_RETRY_S
            for event in page.get("events", []):
                yield {**event, "cursor": page.get("nextCursor") or current or ""}
            if page.get("nextCursor"):
                current = page["nextCursor"]


# -- diagnostics ---------------------------------------------------------------------------------


class DiagnosticsAPI:
    """Read-only views for people and tooling; never a source of authority."""

    def __init__(self, ctx: Context) -> None:
        self._ctx = ctx

    async def run(self, scope_id: str) -> dict[str, Any]:
        """A run as an operator sees it: its state, claims, queues, workers and what waits."""
        answer: dict[str, Any] = (await self._ctx.call("GET", f"/ops/runs/{scope_id}")).body
        return answer

    async def waits(self) -> dict[str, Any]:
        """What waits in the space, and on what (claims, pools, quotas, budgets)."""
        answer: dict[str, Any] = (await self._ctx.call("GET", "/ops/waits")).body
        return answer

    async def workers(self, scope_id: str) -> builtins.list[dict[str, Any]]:
        """The workers holding something in the run (from `run()`)."""
        workers: builtins.list[dict[str, Any]] = (await self.run(scope_id)).get("workers", [])
        return workers
