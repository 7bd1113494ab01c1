"""Claims: acquire, renew, release.

Renew and release carry no scope: the token names the claim, and the key in the path must match.
"""

from __future__ import annotations

from ..http import Request, Router
from ..runtime import Runtime

router = Router()

BASE = "/v1/spaces/{space}/claims"


@router.route("POST", BASE)
async def acquire(services: Runtime, request: Request, space: str) -> tuple[int, dict]:
    services.authorize(request, space)
    body = request.json()
    view = await services.claims.acquire(
        space,
        scope_id=body.text("scopeId"),
        key=body.text("key"),
        holder=body.text("holder"),
        session=body.text("holderSession"),
        lease_s=body.opt_integer("leaseSeconds", services.limits.lease_s_default),
        idem=request.idem(space),
    )
    return 200, view


@router.route("POST", BASE + "/{key}/renew")
async def renew(services: Runtime, request: Request, space: str, key: str) -> tuple[int, dict]:
    services.authorize(request, space)
    body = request.json()
    view = await services.claims.renew(
        space,
        key=key,
        token=body.text("token"),
        lease_s=body.opt_integer("leaseSeconds"),
        idem=request.idem(space),
    )
    return 200, view


@router.route("POST", BASE + "/{key}/release")
async def release(services: Runtime, request: Request, space: str, key: str) -> tuple[int, dict]:
    services.authorize(request, space)
    body = request.json()
    view = await services.claims.release(
        space,
        key=key,
        token=body.text("token"),
        observation=body.value("observation", services.limits),
        idem=request.idem(space),
    )
    return 200, view
