"""Scopes (runs): create, read, cancel, complete."""

from __future__ import annotations

from ..http import Request, Router
from ..runtime import Runtime

router = Router()

BASE = "/v1/spaces/{space}/scopes"


@router.route("POST", BASE)
async def create(services: Runtime, request: Request, space: str) -> tuple[int, dict]:
    services.authorize(request, space)
    body = request.json()
    view = await services.scopes.create(
        space,
        name=body.opt_text("name"),
        parent_id=body.opt_text("parentId"),
        deadline_ms=body.opt_timestamp("deadline"),
        child_limit=body.opt_integer("childLimit"),
        idem=request.idem(space),
    )
    return 201, view


@router.route("GET", BASE + "/{scope_id}")
async def read(services: Runtime, request: Request, space: str, scope_id: str) -> tuple[int, dict]:
    services.authorize(request, space)
    return 200, services.scopes.view(space, scope_id)


@router.route("POST", BASE + "/{scope_id}/cancel")
async def cancel(services: Runtime, request: Request, space: str, scope_id: str) -> tuple[int, dict]:
    services.authorize(request, space)
    return 200, await services.scopes.cancel(space, scope_id, idem=request.idem(space))


@router.route("POST", BASE + "/{scope_id}/complete")
async def complete(services: Runtime, request: Request, space: str, scope_id: str) -> tuple[int, dict]:
    services.authorize(request, space)
    return 200, await services.scopes.complete(space, scope_id, idem=request.idem(space))
