"""Settling a delivery: complete, nack, renew.

Each carries the delivery's token; one that is not current (the lease ran out and the message was
delivered again, or the task was cancelled) is 409 STALE_CLAIM and changes nothing.
"""

from __future__ import annotations

from ..http import Request, Router
from ..runtime import Runtime

router = Router()

BASE = "/v1/spaces/{space}/messages/{message_id}"


@router.route("POST", BASE + "/complete")
async def complete(services: Runtime, request: Request, space: str, message_id: str) -> tuple[int, dict]:
    services.authorize(request, space)
    body = request.json()
    reply = await services.messages.complete(
        space,
        message_id,
        token=body.text("token"),
        result=body.value("result", services.limits),
        idem=request.idem(space),
    )
    return 200, reply


@router.route("POST", BASE + "/nack")
async def nack(services: Runtime, request: Request, space: str, message_id: str) -> tuple[int, dict]:
    services.authorize(request, space)
    body = request.json()
    reply = await services.messages.nack(
        space,
        message_id,
        token=body.text("token"),
        retry=body.boolean("retry"),
        error=body.opt_text("error"),
        idem=request.idem(space),
    )
    return 200, reply


@router.route("POST", BASE + "/renew")
async def renew(services: Runtime, request: Request, space: str, message_id: str) -> tuple[int, dict]:
    services.authorize(request, space)
    body = request.json()
    reply = await services.messages.renew(
        space,
        message_id,
        token=body.text("token"),
        lease_s=body.opt_integer("leaseSeconds"),
        idem=request.idem(space),
    )
    return 200, reply
