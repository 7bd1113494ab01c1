"""Watching a run: `events()` (its event log as it happens) and `status()` (a snapshot).

- **events** follows `GET /watch` for the run and its child runs (held 20 s at a time), resuming
  from its cursor after a failure (pauses from 0.5 s doubling to 10 s, each failure logged at
  debug level); a cursor older than what the server keeps (`CURSOR_EXPIRED`) starts again from the
  oldest event kept. It ends when the given `signal` (anything with `is_set()`) is set; an
  authentication error, or another refusal that sending again cannot change, is raised.
- **status** is the run's state (`running`, `stopped`, `finished`, `expired`), the workers
  holding something in it, and what waits for slots.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, AsyncIterator, Awaitable, Iterator, Sequence, TypeVar

import anyio

from . import _runtime
from ._bound import RunBinding, parse_time
from .errors import AuthenticationError, CursorExpiredError, RunstateError

__all__ = ["RunEvent", "RunState", "WorkerStatus", "Waiting", "RunStatus", "EventStream", "events", "aevents", "status"]

T = TypeVar("T")

WATCH_HOLD_S = 20
RETRY_FIRST_S, RETRY_MAX_S = 0.5, 10.0
# How often a held watch looks at the caller's stop flag.
STOP_CHECK_S = 0.1


@dataclass(frozen=True)
class RunEvent:
    """One event of a run (`runstate.events()`): its `id`, `type` (`task.completed`,
    `claim.acquired`...), when it happened (`at`, an aware datetime) and its `data`."""

    id: str
    type: str
    at: datetime
    #: The event's payload.
    data: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class RunState:
    """A run as `status()` sees it: its `id`, `name`, `state` and `deadline` (None without one)."""

    id: str
    name: str
    #: "running", "stopped", "finished" or "expired".
    state: str
    deadline: datetime | None


@dataclass(frozen=True)
class WorkerStatus:
    """A worker that holds something in the run (`status().workers`): its name (`worker`, the
    client's holder), how much it is `holding`, and when its soonest lease ends
    (`lease_expires_at`)."""

    worker: str
    #: How many things the worker holds in the run.
    holding: int
    lease_expires_at: datetime | None


@dataclass(frozen=True)
class Waiting:
    """Something that waits for capacity (`status().waiting`): its `kind` (`slots`, `limit`,
    `budget`), the resource's `name`, and the `units` it waits for."""

    kind: str
    name: str
    units: int


@dataclass(frozen=True)
class RunStatus:
    """`runstate.status()`: the `run` (a `RunState`), the `workers` holding something in it, and
    what is `waiting` for capacity."""

    run: RunState
    #: Workers holding something in this run.
    workers: list[WorkerStatus]
    #: What waits for capacity.
    waiting: list[Waiting]


async def until_flag(stop: Any, awaitable: Awaitable[T]) -> tuple[bool, T | None]:
    """Await `awaitable` unless `stop` (anything with `is_set()`) is set first: (stopped, value)."""
    outcome: dict[str, Any] = {}
    async with anyio.create_task_group() as group:

        async def watch() -> None:
            while not stop.is_set():
                await anyio.sleep(STOP_CHECK_S)
            outcome["stopped"] = True
            group.cancel_scope.cancel()

        group.start_soon(watch)
        try:
            outcome["value"] = await awaitable
        except Exception as err:
            outcome["error"] = err
        group.cancel_scope.cancel()
    if "error" in outcome:
        raise outcome["error"]
    if "value" not in outcome:
        return True, None
    value: T = outcome["value"]
    return False, value


class EventStream:
    """Pages of a run's events, resuming after failures."""

    def __init__(self, binding: RunBinding, types: Sequence[str] | None, signal: Any) -> None:
        self._binding = binding
        self._types = ",".join(types) if types else None
        self._signal = signal
        self._run_id: str | None = None
        self._cursor: str | None = None
        self._pause = RETRY_FIRST_S

    def _stopped(self) -> bool:
        return self._signal is not None and bool(self._signal.is_set())

    async def page(self) -> list[RunEvent] | None:
        """The next events, or None once the signal is set."""
        if self._run_id is None:
            self._run_id = (await self._binding.known_run()).id
        while not self._stopped():
            query = {"scopeId": self._run_id, "types": self._types, "cursor": self._cursor, "waitSeconds": WATCH_HOLD_S}
            watching = self._binding.call("GET", "/watch", query=query, wait_ms=WATCH_HOLD_S * 1000)
            try:
                if self._signal is None:
                    body = await watching
                else:
                    stopped, body = await until_flag(self._signal, watching)
                    if stopped:
                        return None
            except CursorExpiredError:
                self._cursor = None  # start again from the oldest event kept
                continue
            except Exception as err:
                if isinstance(err, AuthenticationError) or (
                    isinstance(err, RunstateError) and 400 <= err.status < 500 and err.status not in (408, 409, 429)
                ):
                    raise
                _runtime.log.debug("events of run %s: %s; trying again in %.1f s", self._run_id, err, self._pause)
                await anyio.sleep(self._pause)
                self._pause = min(2 * self._pause, RETRY_MAX_S)
                continue
            self._pause = RETRY_FIRST_S
            assert body is not None
            if body.get("nextCursor") is not None:
                self._cursor = str(body["nextCursor"])
            return [
                RunEvent(id=e["eventId"], type=e["type"], at=parse_time(e["createdAt"]), data=e.get("payload") or {})
                for e in body.get("events", [])
            ]
        return None


async def aevents(binding: RunBinding, types: Sequence[str] | None = None, signal: Any = None) -> AsyncIterator[RunEvent]:
    stream = EventStream(binding, types, signal)
    while True:
        page = await stream.page()
        if page is None:
            return
        for event in page:
            yield event


def events(binding: RunBinding, types: Sequence[str] | None = None, signal: Any = None) -> Iterator[RunEvent]:
    stream = EventStream(binding, types, signal)
    while True:
        page = binding.shared.run_blocking(stream.page())
        if page is None:
            return
        yield from page


_STATES = {"ACTIVE": "running", "CANCELLED": "stopped", "COMPLETED": "finished", "EXPIRED": "expired"}


def _time(value: str | None) -> datetime | None:
    return None if value is None else parse_time(value)


async def status(binding: RunBinding) -> RunStatus:
    run = await binding.known_run()
    scope = await binding.call("GET", f"/scopes/{run.id}")
    state = _STATES.get(scope["storedState"], "stopped")
    deadline = _time(scope.get("deadline"))
    if state == "running" and scope["effective"] != "ACTIVE":
        state = "expired" if deadline is not None and deadline <= datetime.now(timezone.utc) else "stopped"
    workers: list[WorkerStatus] = []
    waiting: list[Waiting] = []
    try:
        ops = await binding.call("GET", f"/ops/runs/{run.id}", contention_s=0)
    except AuthenticationError:
        ops = {}  # a key without the right to diagnostics still gets the run's state
    for worker in ops.get("workers", []):
        workers.append(WorkerStatus(
            worker=worker["holder"], holding=len(worker.get("keys") or []), lease_expires_at=_time(worker.get("earliestLeaseExpiry")),
        ))
    for waiter in ops.get("waiting", []):
        waiting.append(Waiting(kind="slots", name=waiter["permit"], units=waiter["units"]))
    return RunStatus(
        run=RunState(id=run.id, name=scope.get("name") or run.name, state=state, deadline=deadline),
        workers=workers,
        waiting=waiting,
    )
