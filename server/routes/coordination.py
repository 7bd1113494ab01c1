"""Coordination: barriers, timers, task groups, and the event log (list and watch).

Barriers and groups are polled by the official client (`GET` every 250 ms); timers are found by
`POST /timers/poll`, a listing that is harmless to repeat, which may also be held (`waitMs`, an
extension our SDK uses, with `timerId` to wait for one timer). `GET /watch` is a long poll: an
empty page is held until an event arrives or `waitSeconds` ends, and always answers JSON with
`nextCursor` (never 204: the client would spin). The 0.2.0 client's 10 s timeout is not extended
for watch, so a client that does not say it is the Python client 0.3.0 or newer, or our TypeScript
SDK, is held at most `watch_wait_s_legacy_max` (8 s); those at most `watch_wait_s_max` (20 s).

Timer polls and events are answered only once everything appended so far is durable: a reader resumes from the
cursor it was given, so an event it saw must not be lost by a crash (its number would then be
given to another event, and the reader would skip that one).
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any, Literal

from ...actors import commands as c
from ...actors import coordination_reads as reads
from ...actors.errors import VALIDATION_FAILED
from ...actors.barriers import BarrierView
from ...actors.events import EVENT_TYPES, EventPageView
from ...actors.fields import unknown
from ...actors.groups import GroupView
from ...actors.timers import TimerView
from ...actors.kernel import EMPTY
from ...actors.coordination_reads import RunBarriersView, RunGroupsView, RunTimersView, RunView, WaitsView
from ..api import Doc, Reply, endpoint, endpoint_and_dot_segments, say_if_capped
from ..errors import ApiError
from ..http import Handler, Request, Router, ascii_digits, integer_param
from ..runtime import Runtime
from ..services import ReadServices
from ..wire.tasks import created_status

router = Router()

BASE = "/v1/spaces/{space}"
ERRORS = ("400", "404", "409")
EVENTS_LIMIT_DEFAULT = 100
EVENTS_LIMIT_MAX = 1000
# `runstate-sdk-python/0.3.0` (and our own SDKs' `runstate-python/...`, `runstate-sdk-typescript/...`):
# clients that extend their timeout for watch (every version of the TypeScript SDK does).
_USER_AGENT = re.compile(r"runstate(?:-sdk)?-(?:python/(\d+)\.(\d+)|typescript/)")


# -- barriers ------------------------------------------------------------------------------------


async def read_barrier(services: ReadServices, request: Request, space: str, barrier_id: str) -> tuple[int, BarrierView]:
    services.authorize(request, space)
    return 200, reads.barrier(services.kernel, space, barrier_id)


G = "Barriers"
endpoint(router, "POST", BASE + "/barriers", Doc(
    "Create a barrier that releases at target distinct arrivals", (Reply(201, "Barrier", "Created"),), c.CreateBarrier,
    errors=ERRORS, idempotent=True, group=G, location=("/barriers/{}", "id"),
), status=201)
endpoint_and_dot_segments(router, "PUT", BASE + "/barriers/by-name/{name}", Doc(
    "Get or create the scope's barrier of this name (safe to repeat; another target is 409 CONFLICT)",
    (Reply(200, "Barrier"),), c.EnsureBarrier, errors=ERRORS, idempotent=True, group=G,
), "name")
endpoint(router, "GET", BASE + "/barriers/{barrier_id}", Doc("A barrier", (Reply(200, "Barrier"),), errors=("404",), group=G), read_barrier)
endpoint(router, "POST", BASE + "/barriers/{barrier_id}/arrive", Doc(
    "Arrive (once per arrivalKey); 409 BARRIER_RELEASED after the release, BARRIER_CANCELLED once its scope ended",
    (Reply(200, "Barrier"),), c.ArriveBarrier, errors=ERRORS, idempotent=True, group=G,
))


# -- timers --------------------------------------------------------------------------------------


async def read_timer(services: ReadServices, request: Request, space: str, timer_id: str) -> tuple[int, TimerView]:
    services.authorize(request, space)
    return 200, reads.timer(services.kernel, space, timer_id)


async def poll_timers(services: Runtime, request: Request, space: str) -> tuple[int, Any]:
    """The listing; a held poll that ends with nothing answers as the same poll without a wait
    (the empty listing, not 204; with `timerId`, the timer as it stands too)."""
    services.authorize(request, space)
    kernel = services.kernel
    command = kernel.parse(c.PollTimers, request.json().for_command(c.PollTimers, kernel.limits), {"space": space})
    idem = request.idem(space)
    say_if_capped(request, kernel.limits, command.wait_ms)
    reply = await kernel.submit(command, idem=idem, wait_ms=command.wait_ms)
    if reply is EMPTY:
        reply = await kernel.submit(dataclasses.replace(command, wait_ms=None), idem=idem)
    # (A firing is shown only once it is durable, as every answer is: shown and then lost in a
    # crash, the timer would fire again later with another time, and be seen to fire twice.)
    return 200, reply


G = "Timers"
endpoint(router, "POST", BASE + "/timers", Doc(
    "Arm a timer (afterSeconds or at, exactly one)", (Reply(201, "Timer", "Created"),), c.CreateTimer,
    errors=ERRORS, idempotent=True, group=G, location=("/timers/{}", "id"),
), status=201)
endpoint_and_dot_segments(router, "PUT", BASE + "/timers/by-name/{name}", Doc(
    "Get the scope's timer of this name as it is, or arm it (afterSeconds or at); answers the server's now",
    (Reply(200, "NamedTimer"),), c.EnsureTimer, errors=ERRORS, idempotent=True, group=G,
), "name")
endpoint(router, "POST", BASE + "/timers/poll", Doc(
    "Every fired, unacknowledged timer of a scope with its token (harmless to repeat)", (Reply(200, "TimerPoll"),),
    c.PollTimers, errors=ERRORS, idempotent=True, group=G,
), poll_timers, long_poll=True)
endpoint(router, "GET", BASE + "/timers/{timer_id}", Doc("A timer", (Reply(200, "Timer"),), errors=("404",), group=G), read_timer)
endpoint(router, "POST", BASE + "/timers/{timer_id}/ack", Doc(
    "Acknowledge a fired timer with its token (409 STALE_CLAIM for another token)", (Reply(200, "Timer"),), c.AckTimer,
    errors=ERRORS, idempotent=True, group=G,
))
endpoint(router, "POST", BASE + "/timers/{timer_id}/cancel", Doc(
    "Cancel a timer (no body)", (Reply(200, "Timer"),), c.CancelTimer, body_required=False, errors=ERRORS,
    idempotent=True, group=G,
))


# -- task groups ---------------------------------------------------------------------------------


async def read_group(services: ReadServices, request: Request, space: str, group_id: str) -> tuple[int, GroupView]:
    services.authorize(request, space)
    return 200, reads.group(services.kernel, space, group_id)


G = "Task groups"
GROUP = "/task-groups/{group_id}"
endpoint(router, "POST", BASE + "/task-groups", Doc(
    "Create a task group and its gate scope", (Reply(201, "TaskGroup", "Created"),), c.CreateGroup, errors=ERRORS,
    idempotent=True, group=G, location=("/task-groups/{}", "groupId"),
), status=201)
endpoint(router, "GET", BASE + GROUP, Doc("A task group", (Reply(200, "TaskGroup"),), errors=("404",), group=G), read_group)
endpoint(router, "POST", BASE + GROUP + "/tasks", Doc(
    "Submit a member task (or return the key's task)",
    (Reply(201, "GroupSubmitted", "Created"), Reply(200, "GroupSubmitted", "The key's existing task")),
    c.SubmitGroupTask, errors=ERRORS, idempotent=True, group=G, location=("/tasks/{}", "taskId"),
), status=created_status)
endpoint(router, "POST", BASE + GROUP + "/join-task", Doc(
    "Make an outside task a member (only while the group is open)", (Reply(200, "TaskGroup"),), c.JoinGroupTask,
    errors=ERRORS, idempotent=True, group=G,
))
endpoint(router, "POST", BASE + GROUP + "/tasks/{task_id}/accept", Doc(
    "Accept a member (the same verdict again is harmless, the other one 409)", (Reply(200, "GroupVerdict"),),
    c.AcceptGroupTask, body_required=False, errors=ERRORS, idempotent=True, group=G,
))
endpoint(router, "POST", BASE + GROUP + "/tasks/{task_id}/reject", Doc(
    "Reject a member (the same verdict again is harmless, the other one 409)", (Reply(200, "GroupVerdict"),),
    c.RejectGroupTask, body_required=False, errors=ERRORS, idempotent=True, group=G,
))
endpoint(router, "POST", BASE + GROUP + "/close", Doc(
    "Close membership (SEALED); harmless to repeat", (Reply(200, "GroupState"),), c.CloseGroup, body_required=False,
    errors=ERRORS, idempotent=True, group=G,
))
endpoint(router, "POST", BASE + GROUP + "/seal", Doc(
    "Close membership (SEALED); 409 once finalized", (Reply(200, "GroupState"),), c.SealGroup, body_required=False,
    errors=ERRORS, idempotent=True, group=G,
))


# -- events --------------------------------------------------------------------------------------


def _cursor(request: Request) -> int | None:
    text = request.param("cursor")
    if not text:
        return None
    if not ascii_digits(text):
        raise ApiError(VALIDATION_FAILED, f"cursor {text[:40]!r} is not a cursor this server gave out")
    return int(text)


def _wait_s(services: ReadServices, request: Request) -> int:
    """How long to hold an empty watch: `waitSeconds`, capped for the client that asks."""
    limits = services.kernel.limits
    asked = integer_param(request, "waitSeconds", 0, None)
    match = _USER_AGENT.search(request.headers.get("user-agent", ""))
    extends = match is not None and (match.group(1) is None or (int(match.group(1)), int(match.group(2))) >= (0, 3))
    cap = limits.watch_wait_s_max if extends else limits.watch_wait_s_legacy_max
    return min(limits.watch_wait_s_default if asked is None else asked, cap)


async def list_events(services: ReadServices, request: Request, space: str) -> tuple[int, EventPageView]:
    services.authorize(request, space)
    kernel = services.kernel
    limit = integer_param(request, "limit", 1, EVENTS_LIMIT_MAX) or EVENTS_LIMIT_DEFAULT
    latest = integer_param(request, "latest", 0, EVENTS_LIMIT_MAX)
    cursor = _cursor(request)
    if latest is not None:
        if cursor is not None:
            raise ApiError(VALIDATION_FAILED, "give either cursor (the events after it) or latest (the newest ones), not both")
        if request.param("limit") is not None:  # (latest is the count: a limit beside it would be dropped)
            raise ApiError(VALIDATION_FAILED, "give either limit (a page after a cursor) or latest (the newest N), not both")
        return 200, reads.events_latest(kernel, space, latest)
    return 200, reads.events_page(kernel, space, cursor, limit)


async def watch(services: ReadServices, request: Request, space: str) -> tuple[int, EventPageView]:
    services.authorize(request, space)
    kernel = services.kernel
    after, limit = _cursor(request), integer_param(request, "limit", 1, EVENTS_LIMIT_MAX) or EVENTS_LIMIT_DEFAULT
    types_text = request.param("types")
    types = frozenset(name.strip() for name in types_text.split(",") if name.strip()) if types_text else None
    for name in sorted(types or ()):
        if name not in EVENT_TYPES:  # a mistyped type would hold every watch to its end, empty
            raise unknown("event type", name, EVENT_TYPES)
    aggregate = None
    aggregate_text = request.param("aggregate")
    if aggregate_text:
        kind, colon, ident = aggregate_text.partition(":")
        if not colon or not kind or not ident:
            raise ApiError(VALIDATION_FAILED, f"aggregate must be TYPE:ID, got {aggregate_text[:80]!r}")
        aggregate = (kind, ident)
    scope_id = request.param("scopeId") or None
    wait_ms = _wait_s(services, request) * 1000
    command = c.WatchEvents(
        space=space, after=after, limit=limit, types=types or None, aggregate=aggregate, scope_id=scope_id, wait_ms=wait_ms
    )
    reply = await kernel.submit(command, wait_ms=wait_ms)
    if reply is EMPTY:  # the hold ended with nothing: the page again, for its nextCursor
        reply = reads.events_page(kernel, space, after, limit, types or None, aggregate, scope_id)
    return 200, reply


G = "Events"
QUERY = ("cursor", "limit")
endpoint(router, "GET", BASE + "/events", Doc(
    "A page of the space's events after a cursor (410 CURSOR_EXPIRED for a cursor older than what is kept); "
    "latest=N instead: the newest N (0: only the cursor after the newest, to follow from now on)",
    (Reply(200, "EventPage"),), query=(*QUERY, "latest"), errors=("400", "404", "410"), group=G,
), list_events)
endpoint(router, "GET", BASE + "/watch", Doc(
    "Events after a cursor, held until one arrives or waitSeconds ends; always with nextCursor",
    (Reply(200, "EventPage"),), query=(*QUERY, "types", "aggregate", "scopeId", "waitSeconds"),
    errors=("400", "404", "410"), group=G,
), watch, long_poll=True)


# -- diagnostics ---------------------------------------------------------------------------------


async def ops_run(services: ReadServices, request: Request, space: str, scope_id: str) -> tuple[int, RunView]:
    services.authorize(request, space)
    return 200, reads.run(services.kernel, space, scope_id)


async def ops_waits(services: ReadServices, request: Request, space: str) -> tuple[int, WaitsView]:
    services.authorize(request, space)
    return 200, reads.waits(services.kernel, space)


G = "Diagnostics"
endpoint(router, "GET", BASE + "/ops/runs/{scope_id}", Doc(
    "A run's subtree: its workers with their keys and earliest lease end, what waits, counts by state",
    (Reply(200, "OpsRun"),), errors=("404",), group=G,
), ops_run)
endpoint(router, "GET", BASE + "/ops/waits", Doc(
    "What waits in the space now: acquires parked on a held claim, reads parked on a once key and held receives (with the "
    "holders waiting), reads parked on a task's end, timer polls, watches, and the waiters of pools' lines and allowances' queues",
    (Reply(200, "OpsWaits"),),
    errors=("404",), group=G,
), ops_waits)


# -- inspection (our extension) ------------------------------------------------------------------


def _lister(what: Literal["barriers", "timers", "groups"]) -> Handler:
    async def listing(
        services: ReadServices, request: Request, space: str, scope_id: str,
    ) -> tuple[int, RunBarriersView | RunTimersView | RunGroupsView]:
        services.authorize(request, space)
        limit = integer_param(request, "limit", 1, EVENTS_LIMIT_MAX) or EVENTS_LIMIT_DEFAULT
        return 200, reads.in_scope(services.kernel, space, scope_id, what, limit, request.param("cursor") or None)

    listing.__name__ = listing.__qualname__ = f"list_{what}"
    return listing


G = "Inspection"
_LISTINGS: tuple[tuple[Literal["barriers", "timers", "groups"], str, str], ...] = (
    ("barriers", "RunBarriers", "Barriers of a run, newest first"),
    ("timers", "RunTimers", "Timers of a run, newest first"),
    ("groups", "RunGroups", "Task groups of a run (gated by it or under it), newest first"),
)
_PAGE = (
    f"a page at a time (limit 1-{EVENTS_LIMIT_MAX}, default {EVENTS_LIMIT_DEFAULT}; cursor: the page's nextCursor, "
    "null on the last)"
)
for _what, _schema, _summary in _LISTINGS:
    endpoint(router, "GET", BASE + "/scopes/{scope_id}/" + _what, Doc(
        f"{_summary}, {_PAGE}", (Reply(200, _schema),), query=("limit", "cursor"), errors=("400", "404"), group=G,
    ), _lister(_what))
