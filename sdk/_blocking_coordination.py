"""The blocking twins of barriers, timers, task groups, the event log and diagnostics (see
`runstate.coordination` and `runstate.blocking`).

A run's `barriers`, `timers` and `groups` make `BlockingBarrier`s, `BlockingTimer`s and
`BlockingGroup`s; the client's `event_log` (`list()`, and `watch()`, an iterator) and
`diagnostics` read the space. Each wait (`barrier.wait()`, `timer.wait()`, `group.wait()`)
blocks the calling thread only: it runs on the client's loop, and Ctrl-C cancels it there.
"""

from __future__ import annotations

import builtins
from datetime import datetime
from typing import Any, Iterator

from ._blocking_work import BlockingTicket
from ._docs import twin_of
from ._loop import Loop
from .coordination import (
    POLL_MS, BarrierHandle, BarriersAPI, DiagnosticsAPI, EventsAPI, GroupHandle, GroupsAPI, TimerHandle, TimersAPI,
)

__all__ = [
    "BlockingBarrier", "BlockingBarriers", "BlockingTimer", "BlockingTimers", "BlockingGroup", "BlockingGroups",
    "BlockingEvents", "BlockingDiagnostics",
]


# -- barriers ------------------------------------------------------------------------------------


@twin_of(BarrierHandle)
class BlockingBarrier:
    """A barrier by its `id` (see `BarrierHandle`): `arrive(key=)`, `status()`, `wait()`."""

    def __init__(self, handle: BarrierHandle, loop: Loop) -> None:
        self._handle = handle
        self._loop = loop

    def __repr__(self) -> str:
        return f"<blocking {self._handle!r}>"

    @property
    def id(self) -> str:
        return self._handle.id

    def arrive(self, *, key: str) -> dict[str, Any]:
        return self._loop.run(self._handle.arrive(key=key))

    def status(self) -> dict[str, Any]:
        return self._loop.run(self._handle.status())

    def wait(self, *, timeout_ms: int = 60_000, poll_ms: int = POLL_MS) -> dict[str, Any]:
        return self._loop.run(self._handle.wait(timeout_ms=timeout_ms, poll_ms=poll_ms))


@twin_of(BarriersAPI)
class BlockingBarriers:
    """`run.barriers` of the blocking client (see `BarriersAPI`): its `scope_id`."""

    def __init__(self, api: BarriersAPI, loop: Loop) -> None:
        self._api = api
        self._loop = loop

    @property
    def scope_id(self) -> str:
        return self._api.scope_id

    def create(self, *, target: int) -> BlockingBarrier:
        return BlockingBarrier(self._loop.run(self._api.create(target=target)), self._loop)

    def get(self, barrier_id: str) -> BlockingBarrier:
        return BlockingBarrier(self._api.get(barrier_id), self._loop)


# -- timers --------------------------------------------------------------------------------------


@twin_of(TimerHandle)
class BlockingTimer:
    """A durable timer (see `TimerHandle`): its `id`, `scope_id` and `fire_at`; `wait()`,
    `status()`, `cancel()`."""

    def __init__(self, handle: TimerHandle, loop: Loop) -> None:
        self._handle = handle
        self._loop = loop

    def __repr__(self) -> str:
        return f"<blocking {self._handle!r}>"

    @property
    def id(self) -> str:
        return self._handle.id

    @property
    def scope_id(self) -> str:
        return self._handle.scope_id

    @property
    def fire_at(self) -> datetime:
        return self._handle.fire_at

    def status(self) -> dict[str, Any]:
        return self._loop.run(self._handle.status())

    def wait(self, *, timeout_ms: int = 30_000, poll_ms: int = POLL_MS) -> dict[str, Any]:
        return self._loop.run(self._handle.wait(timeout_ms=timeout_ms, poll_ms=poll_ms))

    def cancel(self) -> dict[str, Any]:
        return self._loop.run(self._handle.cancel())


@twin_of(TimersAPI)
class BlockingTimers:
    """`run.timers` of the blocking client (see `TimersAPI`): its `scope_id`."""

    def __init__(self, api: TimersAPI, loop: Loop) -> None:
        self._api = api
        self._loop = loop

    @property
    def scope_id(self) -> str:
        return self._api.scope_id

    def create(self, *, after_seconds: int | None = None, at: str | None = None) -> BlockingTimer:
        return BlockingTimer(self._loop.run(self._api.create(after_seconds=after_seconds, at=at)), self._loop)

    def get(self, timer_id: str) -> BlockingTimer:
        return BlockingTimer(self._api.get(timer_id), self._loop)


# -- task groups ---------------------------------------------------------------------------------


@twin_of(GroupHandle)
class BlockingGroup:
    """A task group (see `GroupHandle`): its `id`, and `scope_id` (its gate run, when known)."""

    def __init__(self, handle: GroupHandle, loop: Loop) -> None:
        self._handle = handle
        self._loop = loop

    def __repr__(self) -> str:
        return f"<blocking {self._handle!r}>"

    @property
    def id(self) -> str:
        return self._handle.id

    @property
    def scope_id(self) -> str | None:
        return self._handle.scope_id

    def status(self) -> dict[str, Any]:
        return self._loop.run(self._handle.status())

    def submit(self, input: object, *, key: str, deadline: str | None = None) -> BlockingTicket:
        return BlockingTicket(self._loop.run(self._handle.submit(input, key=key, deadline=deadline)), self._loop)

    def close(self) -> dict[str, Any]:
        return self._loop.run(self._handle.close())

    def seal(self) -> dict[str, Any]:
        return self._loop.run(self._handle.seal())

    def accept(self, task_id: str) -> dict[str, Any]:
        return self._loop.run(self._handle.accept(task_id))

    def reject(self, task_id: str) -> dict[str, Any]:
        return self._loop.run(self._handle.reject(task_id))

    def join_task(self, task_id: str) -> dict[str, Any]:
        return self._loop.run(self._handle.join_task(task_id))

    def wait(self, *, timeout_ms: int = 30_000, poll_ms: int = POLL_MS) -> dict[str, Any]:
        return self._loop.run(self._handle.wait(timeout_ms=timeout_ms, poll_ms=poll_ms))


@twin_of(GroupsAPI)
class BlockingGroups:
    """`run.groups` of the blocking client (see `GroupsAPI`)."""

    def __init__(self, api: GroupsAPI, loop: Loop) -> None:
        self._api = api
        self._loop = loop

    def create(
        self,
        *,
        mailbox: str,
        condition: str,
        threshold: int | None = None,
        expected_members: int | None = None,
        deadline: str | None = None,
        parent_scope_id: str | None = None,
    ) -> BlockingGroup:
        handle = self._loop.run(self._api.create(
            mailbox=mailbox, condition=condition, threshold=threshold, expected_members=expected_members,
            deadline=deadline, parent_scope_id=parent_scope_id,
        ))
        return BlockingGroup(handle, self._loop)

    def by_id(self, group_id: str) -> BlockingGroup:
        return BlockingGroup(self._api.by_id(group_id), self._loop)


# -- the space's event log and diagnostics -------------------------------------------------------


@twin_of(EventsAPI)
class BlockingEvents:
    """The space's event log for the blocking client (see `EventsAPI`): `rs.event_log`, since
    `rs.events(...)` is the run-bound API's events of a run."""

    def __init__(self, api: EventsAPI, loop: Loop) -> None:
        self._api = api
        self._loop = loop

    def list(self, *, cursor: str | None = None, limit: int | None = None, latest: int | None = None) -> dict[str, Any]:
        return self._loop.run(self._api.list(cursor=cursor, limit=limit, latest=latest))

    def watch(
        self,
        *,
        cursor: str | None = None,
        types: builtins.list[str] | None = None,
        aggregate: dict[str, Any] | None = None,
        scope_id: str | None = None,
        limit: int | None = None,
        wait_seconds: int | None = None,
        stop_event: Any = None,
    ) -> Iterator[dict[str, Any]]:
        """`EventsAPI.watch` as a blocking iterator: each `next()` waits on the client's loop.
        `stop_event` (`rs.new_event()`, a `threading.Event`) ends it after the current page;
        leaving the loop early (`break`, an error) closes the watch."""
        stream = self._api.watch(
            cursor=cursor, types=types, aggregate=aggregate, scope_id=scope_id, limit=limit, wait_seconds=wait_seconds,
            stop_event=stop_event,
        )
        try:
            while True:
                try:
                    yield self._loop.run(stream.__anext__())
                except StopAsyncIteration:
                    return
        finally:
            aclose = getattr(stream, "aclose", None)  # an async generator: let it clean up
            if aclose is not None:
                self._loop.run(aclose())


@twin_of(DiagnosticsAPI)
class BlockingDiagnostics:
    """`rs.diagnostics` of the blocking client (see `DiagnosticsAPI`)."""

    def __init__(self, api: DiagnosticsAPI, loop: Loop) -> None:
        self._api = api
        self._loop = loop

    def run(self, scope_id: str) -> dict[str, Any]:
        return self._loop.run(self._api.run(scope_id))

    def waits(self) -> dict[str, Any]:
        return self._loop.run(self._api.waits())

    def workers(self, scope_id: str) -> builtins.list[dict[str, Any]]:
        return self._loop.run(self._api.workers(scope_id))
