"""Reading a past point through the API's own read routes, and what changed between two points.

`read_route(past, "/scopes/sc_1/claims")` answers exactly what `GET
/v1/spaces/{space}/scopes/sc_1/claims` answered live at that point: it runs the route's own
handler, handed a `PastKernel` in place of the kernel. The handlers of reads never wait on a
`PastKernel` (its `settled` returns at once), so a read runs to its end in one step, without an
event loop: the offline `runstate replay` and the replay thread of a diff read through the routes
the same way the history API does.

A diff between two points A and B (`Diff`) is one replay through both (`History.between` or
`rebuild`), and says:
- `events`: every event the space made between A and B, counted by type (claims taken
  (`claim.acquired`, `claim.taken_over`), released, expired, forced free; tasks started, retried,
  ended; deliveries leased, requeued, dead-lettered...), with `causes` for events whose payload
  names a cause (a delivery requeued because its lease `expired`: taken over by the next worker);
- `records`: the journal's records of the space between them, counted by type;
- `states`: how many things stood in each state at A and at B (tasks by state, messages, runs,
  barriers, timers, groups), summed over the space's top runs as `GET /ops/runs/{id}` counts them;
- `changes`: the events themselves, oldest first (at most `CHANGES_MAX`; the cursors page the rest
  through `GET /history/events?at=B&cursor=...` while B's event log holds them).
Events are the space's own log, made from the records as they are applied (`actors/events.py`): the
diff watches the log grow record by record, so its counts are complete whatever the log keeps.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote, urlencode

from ..actors.events import EventView
from ..actors.shapes import Record
from ..actors.state import KernelState
from ..actors.limits import Limits
from .history import PastKernel, Point
from .views import CountsView, CursorsView, DiffView
from .http import Request
from .services import ReadServices
from . import wire

__all__ = ["read_route", "space_states", "Diff", "CHANGES_MAX", "RUNS_MAX"]

# The events a diff lists (the counts cover them all).
CHANGES_MAX = 1000
# The top runs whose counts are summed (the newest first).
RUNS_MAX = 1000


class _Reader:
    """What a read route's handler asks of `services`, at a past point: the past kernel, and the
    key already checked (by the history route live, or nobody offline: the operator holds the files)."""

    __slots__ = ("kernel", "limits")

    def __init__(self, kernel: PastKernel) -> None:
        self.kernel = kernel
        self.limits: Limits = kernel.limits

    def authorize(self, request: Request, space: str, *, operator: bool = False) -> str:
        return space


def read_route(past: PastKernel, tail: str, query: dict[str, Any] | None = None) -> dict[str, Any]:
    """What `GET /v1/spaces/{space}{tail}?query` answered at the past point (KernelError if refused)."""
    from .routes import ROUTER  # (the routes import the history module)

    path = f"/v1/spaces/{quote(past.space_id, safe='')}{tail}"
    route, params = ROUTER.match("GET", path)
    request = Request("GET", path, {}, b"", None, past.limits)
    request.query = urlencode({k: v for k, v in (query or {}).items() if v is not None}).encode()
    reader: ReadServices = _Reader(past)
    running = route.handler(reader, request, **params)
    try:
        running.send(None)
    except StopIteration as done:
        status, body = done.value
        assert status == 200, f"a read answered {status}"
        encoded = wire.encode(body)  # (the kernel's typed views as the route's answer writes them)
        assert isinstance(encoded, dict), f"a read of a space answers an object, not {type(encoded).__name__}"
        return encoded
    running.close()
    raise RuntimeError(f"GET {route.path} waited at a past point: a read of the state never waits")


def space_states(past: PastKernel) -> dict[str, dict[str, int]]:
    """How many things of each kind stand in each state, over the space's top runs (`ops/runs`)."""
    scopes = read_route(past, "/scopes", {"limit": RUNS_MAX})["scopes"]
    totals: dict[str, dict[str, int]] = {}
    for scope in scopes:
        if scope.get("parentId") is not None:
            continue  # counted in its top run's subtree
        for kind, states in read_route(past, f"/ops/runs/{quote(scope['id'], safe='')}")["counts"].items():
            into = totals.setdefault(kind, {})
            for state, count in states.items():
                into[state] = into.get(state, 0) + count
    return totals


class Diff:
    """What changed in a space between two points, gathered during one replay through both."""

    def __init__(self, space: str) -> None:
        self.space = space
        self.states: list[dict[str, Any]] = []
        self.events: dict[str, int] = {}
        self.causes: dict[str, dict[str, int]] = {}
        self.records: dict[str, int] = {}
        self.changes: list[EventView] = []
        self.cursors: list[int] = []
        self._seen = 0  # the newest event counted

    def at_point(self, past: PastKernel) -> dict[str, Any]:
        """Read the state at a point (both: A first, then B)."""
        self._harvest(past.state)
        if not self.cursors:
            self._seen = self._seq(past.state)
        self.cursors.append(self._seq(past.state))
        states = space_states(past) if past.space_id in past.state.spaces else {}
        self.states.append(states)
        return states

    def on_record(self, lsn: int, record: Record, reached: int, state: KernelState) -> None:
        """A record between the points, before it is applied: the events its predecessor made are in the log."""
        if reached != 1 or record.get("space") != self.space:
            return
        self._harvest(state)
        kind = record["type"]
        self.records[kind] = self.records.get(kind, 0) + 1

    def _seq(self, state: KernelState) -> int:
        space = state.spaces.get(self.space)
        return 0 if space is None else space.events.seq

    def _harvest(self, state: KernelState) -> None:
        """Count (and list) the events made since the last look: the newest of the log."""
        if not self.cursors:
            return
        space = state.spaces.get(self.space)
        if space is None or space.events.seq <= self._seen:
            return
        log = space.events
        fresh = []
        for seq, change, at_ms in log.scan(newest_first=True):
            if seq <= self._seen:
                break
            fresh.append(log.made(seq, change, at_ms))
        assert len(fresh) == log.seq - self._seen, "the log holds every event made since the last record"
        for event in reversed(fresh):
            self.events[event.type] = self.events.get(event.type, 0) + 1
            cause = event.payload.get("cause") if isinstance(event.payload, dict) else None
            if isinstance(cause, str):
                into = self.causes.setdefault(event.type, {})
                into[cause] = into.get(cause, 0) + 1
            if len(self.changes) < CHANGES_MAX:
                self.changes.append(event.view())
        self._seen = log.seq

    def view(self, first: Point, second: Point) -> DiffView:
        assert len(self.states) == 2 and len(self.cursors) == 2, "both points were read"
        states: dict[str, dict[str, CountsView]] = {}
        for kind in sorted(set(self.states[0]) | set(self.states[1])):
            before, after = self.states[0].get(kind, {}), self.states[1].get(kind, {})
            if before or after:
                states[kind] = {state: CountsView(before.get(state, 0), after.get(state, 0)) for state in sorted(set(before) | set(after))}
        counted = sum(self.events.values())
        return DiffView(
            self.space, first.view(), second.view(), dict(sorted(self.events.items())),
            {kind: dict(sorted(found.items())) for kind, found in sorted(self.causes.items())}, dict(sorted(self.records.items())),
            states, tuple(self.changes), counted > len(self.changes), CursorsView(str(self.cursors[0]), str(self.cursors[1])),
        )

