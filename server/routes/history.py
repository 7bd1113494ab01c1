"""History (our extension): every read of a space as it stood at a past point.

    GET /v1/spaces/{space}/history[?at=POINT]                 what history is kept; with `at`, where that point stands
    GET /v1/spaces/{space}/history/diff?from=POINT&to=POINT   what changed between two points
    GET /v1/spaces/{space}/history/<any read>?at=POINT        that read, as it answered at the point

The third line is a family made from the router itself (`twins`): every `GET` route of a space
has a twin under `/history` with the same path after it, the same parameters, the same handler
and the same answer, plus `asOf` (where the point stands) in the body and `runstate-as-of-lsn` /
`runstate-as-of` headers. A long poll (the event watch, a task's or a once key's wait) answers at
once there, with what the point holds: nothing more happens at a past point. The handler is handed a `PastKernel` (`server/history.py`) instead of
the live kernel, so a new read route has its history with no code here. A point is a time with a
zone, `lsn:N` or an event id `ev_N`. The key that reads a space now reads its past: the admin key,
or the space's own API key for its own space.

A point older than the history kept is 410 `HISTORY_NOT_KEPT` (with `details.oldestLsn` and
`oldestAt`). In a cluster, the node that gets the request answers it from its own copy of the
partition (`forward.py`), so history reads are spread over the nodes and never wait on the leader.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ..api import Doc, Reply, endpoint
from ..history import PastKernel
from ..history_views import Diff
from ..views import DiffView, HistoryView
from ..http import Handler, Request, Route, Router
from ..runtime import Runtime
from ..services import ReadServices
from .. import wire

__all__ = ["router", "twins", "PREFIX"]

router = Router()

BASE = "/v1/spaces/{space}"
PREFIX = BASE + "/history"
G = "History"

_AS_OF = {"$ref": "#/components/schemas/AsOf"}
# Where a past read stands, in its headers too (`history.Point.headers`): always for a twin, and for
# `GET /history` when it is asked with at.
AS_OF_HEADERS = (("runstate-as-of-lsn", "AsOfLsn", True), ("runstate-as-of", "AsOfTime", True))


class _Past:
    """The services a read route's handler sees at a past point: the live runtime's, but for the
    kernel (its key checks are those of now: a key reads the past of the spaces it opens now)."""

    __slots__ = ("_services", "kernel")

    def __init__(self, services: Runtime, kernel: PastKernel) -> None:
        self._services = services
        self.kernel = kernel

    def __getattr__(self, name: str) -> Any:  # `Any`: whatever the runtime has under that name
        return getattr(self._services, name)


def _twin_handler(route: Route) -> Handler:
    handler = route.handler

    async def at_point(services: Runtime, request: Request, space: str, **params: str) -> tuple[int, Any]:
        services.authorize(request, space)
        past = await services.history.at(space, request.param("at"))
        at_past: ReadServices = _Past(services, past)
        status, body = await handler(at_past, request, space=space, **params)
        body = wire.encode(body)  # (a typed view as the object it is written as, to carry `asOf` too)
        if isinstance(body, dict):
            body = {**body, "asOf": wire.encode(past.point.view())}
        request.answer_headers = {**(request.answer_headers or {}), **past.point.headers()}
        return status, body

    at_point.__name__ = at_point.__qualname__ = "past_" + getattr(handler, "__name__", "read")
    return at_point


def _twinned(route: Route) -> bool:
    path = route.path
    return route.method == "GET" and path.startswith(BASE + "/") and not path.startswith(PREFIX) and not route.public


def twins(routes: list[Route]) -> Router:
    """The history twin of every read route of a space among `routes` (see the module docstring)."""
    found = Router()
    for route in routes:
        if not _twinned(route):
            continue
        doc = route.doc
        replies = tuple(
            Reply(
                reply.status,
                {"allOf": [{"$ref": f"#/components/schemas/{reply.schema}"} if isinstance(reply.schema, str) else reply.schema, _AS_OF]},
                reply.description, headers=AS_OF_HEADERS,
            )
            for reply in doc.replies if reply.schema is not None
        )
        # The read's command stays: its query parameters are the twin's (`GET /once` needs scopeId
        # and key at a past point too); a read's command has no body, and a twin runs its handler.
        twin = dataclasses.replace(
            doc, summary=f"{doc.summary}: as it stood at a past point", replies=replies, body=None,
            query=("at", *doc.query), errors=tuple(sorted({*doc.errors, "400", "404", "410"})), idempotent=False,
            group=G, operator=False,
        )
        endpoint(found, "GET", PREFIX + route.path[len(BASE):], twin, _twin_handler(route), settle=False)
    return found


async def history(services: Runtime, request: Request, space: str) -> tuple[int, HistoryView]:
    services.authorize(request, space)
    kept = services.history.kept(space)
    if request.param("at") is None:
        return 200, HistoryView(space, kept)
    past = await services.history.at(space, request.param("at"))
    request.answer_headers = past.point.headers()
    return 200, HistoryView(space, kept, past.point.view())


async def diff(services: Runtime, request: Request, space: str) -> tuple[int, DiffView]:
    services.authorize(request, space)
    found = Diff(space)
    first, second = await services.history.between(space, request.param("from"), request.param("to"), found.at_point, found.on_record)
    return 200, found.view(first, second)



endpoint(router, "GET", PREFIX, Doc(
    "The history kept for the space (retention, oldest point, disk); with at=POINT, where that point stands",
    (Reply(200, "History", headers=tuple((name, component, False) for name, component, _ in AS_OF_HEADERS)),),
    query=("at",), errors=("400", "404", "410"), group=G,
), history, settle=False)
endpoint(router, "GET", PREFIX + "/diff", Doc(
    "What changed in the space between two points (from=POINT, to=POINT): events and records by type, counts by state",
    (Reply(200, "HistoryDiff"),), query=("from", "to"), errors=("400", "404", "410"), group=G,
), diff, settle=False)
