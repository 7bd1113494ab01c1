"""Reads for inspection (our extension, not in the 0.2.0 API): runs, a run's claims, usage.

For `runstate inspect` and dashboards. An API key reads the spaces it opens; the admin key reads
any space the server knows. Lists are bounded: `?limit=` (default 100, at most 1000) with
`truncated` saying whether more were left out. Claims are listed without their fencing token:
the token is the holder's proof of ownership, and whoever could read it could release the claim.

    GET /v1/spaces/{space}/scopes[?limit=N]               {"scopes": [...newest first], "truncated"}
    GET /v1/spaces/{space}/scopes/{id}/claims[?limit=N]   {"scopeId", "claims": [...], "truncated"}
    GET /v1/spaces/{space}/scopes/{id}/tasks[?limit=N]    {"scopeId", "tasks": [...newest first], "truncated"}
    GET /v1/spaces/{space}/usage                          {"spaceId", "operations", "total", "free", "events"}
    GET /v1/spaces/{space}/caps                           {"spaceId", "caps": [{"setting", "held", "limit"}],
                                                           "pendingRemoval": {ended runs kept, and what they hold}}
"""

from __future__ import annotations

import itertools

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


async def list_scopes(services: ReadServices, request: Request, space: str) -> tuple[int, ScopesView]:
    services.authorize(request, space)
    limit = _limit(request)
    state = services.kernel.space_view(space)
    now_ms = services.kernel.clock.now_ms()
    newest = list(itertools.islice(reversed(list(state.scopes.all())), limit + 1))
    views = [state.scopes.view(scope, now_ms) for scope in newest[:limit]]
    return 200, ScopesView(tuple(views), len(newest) > limit)


async def list_claims(services: ReadServices, request: Request, space: str, scope_id: str) -> tuple[int, RunClaimsView]:
    services.authorize(request, space)
    limit = _limit(request)
    claims = reads.claims_in_scope(services.kernel, space, scope_id)
    return 200, RunClaimsView(scope_id, tuple(claims[:limit]), len(claims) > limit)  # (written without tokens)


async def list_tasks(services: ReadServices, request: Request, space: str, scope_id: str) -> tuple[int, RunTasksView]:
    services.authorize(request, space)
    limit = _limit(request)
    state = services.kernel.space_view(space)
    state.scopes.get(scope_id)  # 404 for a run that does not exist
    now_ms = services.kernel.clock.now_ms()
    tasks = sorted((task for task in state.tasks.all() if task.scope_id == scope_id), key=lambda task: task.created_ms, reverse=True)
    views = [state.tasks.view(task, now_ms) for task in tasks[:limit]]
    return 200, RunTasksView(scope_id, tuple(views), len(tasks) > limit)


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
endpoint(router, "GET", BASE + "/scopes", Doc(
    "Runs of the space, newest first", (Reply(200, "Scopes"),),
    query=("limit",), errors=("400", "404"), group=G,
), list_scopes)
endpoint(router, "GET", BASE + "/scopes/{scope_id}/claims", Doc(
    "Claims held in a run (tokens left out)", (Reply(200, "RunClaims"),),
    query=("limit",), errors=("400", "404"), group=G,
), list_claims)
endpoint(router, "GET", BASE + "/scopes/{scope_id}/tasks", Doc(
    "Tasks of a run, newest first", (Reply(200, "RunTasks"),),
    query=("limit",), errors=("400", "404"), group=G,
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
