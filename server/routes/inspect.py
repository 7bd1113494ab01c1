"""Reads for inspection (our extension, not in the 0.2.0 API): runs, a run's claims, usage.

For `runstate inspect` and dashboards. An API key reads the spaces it opens; the admin key reads
any space the server knows. Lists are bounded: `?limit=` (default 100, at most 1000) with
`truncated` saying whether more were left out. Claims are listed without their fencing token:
the token is the holder's proof of ownership, and whoever could read it could release the claim.

    GET /v1/spaces/{space}/scopes[?limit=N]               {"scopes": [...newest first], "truncated"}
    GET /v1/spaces/{space}/scopes/{id}/claims[?limit=N]   {"scopeId", "claims": [...], "truncated"}
    GET /v1/spaces/{space}/scopes/{id}/tasks[?limit=N]    {"scopeId", "tasks": [...newest first], "truncated"}
    GET /v1/spaces/{space}/usage                          {"spaceId", "operations", "total", "free", "events"}
"""

from __future__ import annotations

import itertools

from ...actors.errors import VALIDATION_FAILED
from ..errors import ApiError
from ..http import Request, Router
from ..runtime import Runtime

router = Router()

BASE = "/v1/spaces/{space}"
LIMIT_DEFAULT = 100
LIMIT_MAX = 1000


def _limit(request: Request) -> int:
    text = request.param("limit")
    if text is None:
        return LIMIT_DEFAULT
    if not text.isdigit() or not 1 <= int(text) <= LIMIT_MAX:
        raise ApiError(VALIDATION_FAILED, f"limit must be an integer from 1 to {LIMIT_MAX}, got {text!r}")
    return int(text)


@router.route("GET", BASE + "/scopes")
async def list_scopes(services: Runtime, request: Request, space: str) -> tuple[int, dict]:
    services.authorize(request, space)
    limit = _limit(request)
    state = services.kernel.state.space(space)  # type: ignore[union-attr]
    now_ms = services.kernel.clock.now_ms()  # type: ignore[union-attr]
    newest = list(itertools.islice(reversed(list(state.scopes.all())), limit + 1))
    views = [state.scopes.view(scope, now_ms) for scope in newest[:limit]]
    return 200, {"scopes": views, "truncated": len(newest) > limit}


@router.route("GET", BASE + "/scopes/{scope_id}/claims")
async def list_claims(services: Runtime, request: Request, space: str, scope_id: str) -> tuple[int, dict]:
    services.authorize(request, space)
    limit = _limit(request)
    claims = services.claims.in_scope(space, scope_id)
    for claim in claims:
        del claim["token"]
    return 200, {"scopeId": scope_id, "claims": claims[:limit], "truncated": len(claims) > limit}


@router.route("GET", BASE + "/scopes/{scope_id}/tasks")
async def list_tasks(services: Runtime, request: Request, space: str, scope_id: str) -> tuple[int, dict]:
    services.authorize(request, space)
    limit = _limit(request)
    state = services.kernel.state.space(space)  # type: ignore[union-attr]
    state.scopes.get(scope_id)  # 404 for a run that does not exist
    now_ms = services.kernel.clock.now_ms()  # type: ignore[union-attr]
    tasks = sorted((task for task in state.tasks.all() if task.scope_id == scope_id), key=lambda task: task.created_ms, reverse=True)
    views = [state.tasks.view(task, now_ms) for task in tasks[:limit]]
    return 200, {"scopeId": scope_id, "tasks": views, "truncated": len(tasks) > limit}


@router.route("GET", BASE + "/usage")
async def usage(services: Runtime, request: Request, space: str) -> tuple[int, dict]:
    services.authorize(request, space)
    return 200, services.kernel.state.space(space).usage.view(space)  # type: ignore[union-attr]
