"""Reads for inspection (our extension, not in the 0.2.0 API): runs, a run's claims, usage.

For `runstate inspect` and dashboards. An API key reads the spaces it opens; the admin key reads
any space the server knows. Lists are read a page at a time: `?limit=` (default 100, at most
1000) and `?cursor=`, the `nextCursor` of the page before (null on the last page; `truncated` is
true exactly when it is not). A page goes on strictly after the last row of the one before, in
an order that rows added or removed in between do not shift (`actors/paging.py`). Claims are
listed without their fencing token: the token is the holder's proof of ownership, and whoever
could read it could release the claim.

    GET /v1/spaces/{space}/scopes[?limit=N&cursor=C]              {"scopes": [...newest first], "truncated", "nextCursor"}
    GET /v1/spaces/{space}/scopes/{id}/claims[?limit=N&cursor=C]  {"scopeId", "claims": [...by key], "truncated", "nextCursor"}
    GET /v1/spaces/{space}/scopes/{id}/tasks[?limit=N&cursor=C]   {"scopeId", "tasks": [...newest first], "truncated", "nextCursor"}
    GET /v1/spaces/{space}/usage                          {"spaceId", "operations", "total", "free", "events"}
    GET /v1/spaces/{space}/caps                           {"spaceId", "caps": [{"setting", "held", "limit"}],
                                                           "pendingRemoval": {ended runs kept, and what they hold}}
"""

from __future__ import annotations

from ...actors import caps, reads, runs
from ...actors.claims import RunClaimsView
from ...actors.errors import UNAUTHENTICATED
from ...actors.keys import digest
from ...actors.runs import SpaceCapsView
from ...actors.scopes import ScopesView
from ...actors.state import KernelState
from ...actors.tasks import RunTasksView
from ...actors.usage import UsageView
from ..api import Doc, Reply, endpoint
from ..errors import ApiError
from ..http import Request, Router, integer_of
from ..runtime import Runtime
from ..services import ReadServices
from ..views import AdminKeyView, RequestKeyView

router = Router()

BASE = "/v1/spaces/{space}"
LIMIT_DEFAULT = 100
LIMIT_MAX = 1000


def _limit(request: Request) -> int:
    text = request.param("limit")
    return LIMIT_DEFAULT if text is None else integer_of(text, "limit", 1, LIMIT_MAX)


def _cursor(request: Request) -> str | None:
    """The page's cursor: the `nextCursor` of the page before (none, or empty: the first page)."""
    return request.param("cursor") or None


async def list_scopes(services: ReadServices, request: Request, space: str) -> tuple[int, ScopesView]:
    services.authorize(request, space)
    return 200, reads.scopes_page(services.kernel, space, _limit(request), _cursor(request))


async def list_claims(services: ReadServices, request: Request, space: str, scope_id: str) -> tuple[int, RunClaimsView]:
    services.authorize(request, space)
    # (written without tokens)
    return 200, reads.claims_page(services.kernel, space, scope_id, _limit(request), _cursor(request))


async def list_tasks(services: ReadServices, request: Request, space: str, scope_id: str) -> tuple[int, RunTasksView]:
    services.authorize(request, space)
    return 200, reads.tasks_page(services.kernel, space, scope_id, _limit(request), _cursor(request))


async def usage(services: ReadServices, request: Request, space: str) -> tuple[int, UsageView]:
    services.authorize(request, space)
    return 200, services.kernel.space_view(space).usage.view(space)


async def space_caps(services: ReadServices, request: Request, space: str) -> tuple[int, SpaceCapsView]:
    services.authorize(request, space)
    kernel = services.kernel
    state = kernel.space_view(space)
    # What retention will remove, so an operator sees the entity count that is about to fall.
    return 200, SpaceCapsView(space, caps.held(state), runs.pending_removal(state, kernel.clock.now_ms()))


G = "Inspection"
PAGE = f"a page at a time (limit 1-{LIMIT_MAX}, default {LIMIT_DEFAULT}; cursor: the page's nextCursor, null on the last)"
endpoint(router, "GET", BASE + "/scopes", Doc(
    f"Runs of the space, newest first, {PAGE}", (Reply(200, "Scopes"),),
    query=("limit", "cursor"), errors=("400", "404"), group=G,
), list_scopes)
endpoint(router, "GET", BASE + "/scopes/{scope_id}/claims", Doc(
    f"Claims held in a run (tokens left out), in the order of their keys, {PAGE}", (Reply(200, "RunClaims"),),
    query=("limit", "cursor"), errors=("400", "404"), group=G,
), list_claims)
endpoint(router, "GET", BASE + "/scopes/{scope_id}/tasks", Doc(
    f"Tasks of a run, newest first, {PAGE}", (Reply(200, "RunTasks"),),
    query=("limit", "cursor"), errors=("400", "404"), group=G,
), list_tasks)
endpoint(router, "GET", BASE + "/usage", Doc("Operations counted for the space", (Reply(200, "Usage"),), errors=("404",), group=G), usage)
endpoint(router, "GET", BASE + "/caps", Doc(
    "How full the space is: what it holds against each of its caps", (Reply(200, "SpaceCaps"),), errors=("404",), group=G,
), space_caps)


async def whoami(services: Runtime, request: Request) -> tuple[int, RequestKeyView | AdminKeyView]:
    """The key this request carries: an API key's id, name and spaces, or that it is the admin key.

    So that a tool holding only an API key can find the space it opens (`runstate inspect`)."""
    secret = request.bearer()
    keys = services.kernel.keys
    spaces = keys.spaces_for(secret)
    if spaces:
        view = KernelState.key_view(keys.by_digest(digest(secret)))
        return 200, RequestKeyView(*view, admin=False)
    if services.admin.matches(secret):
        return 200, AdminKeyView(None, None, (), None, None, admin=True)
    raise ApiError(UNAUTHENTICATED, "the API key is not valid")


endpoint(router, "GET", "/v1/key", Doc(
    "The key of this request: its spaces (an API key), or that it is the admin key", (Reply(200, "RequestKey"),), group=G,
), whoami)
