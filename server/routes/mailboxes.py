"""Mailboxes and their queues: list, create, send, recv, dead letters.

`recv` is a long poll: with `waitMs` it is held until a message arrives or the wait ends (capped
at `wait_ms_max`), and answers 204 with an empty body when there is nothing; when the client goes
away the wait is withdrawn, so no lease is handed to nobody.
"""

from __future__ import annotations

from typing import Any

from ..http import Request, Router
from ..runtime import Runtime

router = Router()

BASE = "/v1/spaces/{space}/mailboxes"

# The most dead letters one listing shows (newest first); `total` says how many are kept.
DEAD_LETTERS_LIST_MAX = 1000


@router.route("GET", BASE)
async def list_mailboxes(services: Runtime, request: Request, space: str) -> tuple[int, dict]:
    services.authorize(request, space)
    return 200, {"mailboxes": services.mailboxes.list(space)}


@router.route("POST", BASE)
async def create(services: Runtime, request: Request, space: str) -> tuple[int, dict]:
    services.authorize(request, space)
    body = request.json()
    view = await services.mailboxes.create(
        space,
        name=body.text("name"),
        mode=body.opt_text("mode"),
        backlog_limit=body.opt_integer("backlogLimit"),
        max_attempts=body.opt_integer("maxAttempts"),
        idem=request.idem(space),
    )
    return 201, view


@router.route("GET", BASE + "/{mailbox_id}")
async def read(services: Runtime, request: Request, space: str, mailbox_id: str) -> tuple[int, dict]:
    services.authorize(request, space)
    return 200, services.mailboxes.view(space, mailbox_id)


@router.route("GET", BASE + "/{mailbox_id}/dead-letters")
async def dead_letters(services: Runtime, request: Request, space: str, mailbox_id: str) -> tuple[int, dict]:
    services.authorize(request, space)
    return 200, services.mailboxes.dead_letters(space, mailbox_id, DEAD_LETTERS_LIST_MAX)


@router.route("POST", BASE + "/{mailbox_id}/messages")
async def send(services: Runtime, request: Request, space: str, mailbox_id: str) -> tuple[int, dict]:
    services.authorize(request, space)
    body = request.json()
    view = await services.messages.send(
        space,
        mailbox_id,
        scope_id=body.text("scopeId"),
        payload=body.value("payload", services.limits),
        work_key=body.opt_text("workKey"),
        deadline_ms=body.opt_timestamp("deadline"),
        idem=request.idem(space),
    )
    return (200 if view["replay"] else 201), view


@router.route("POST", BASE + "/{mailbox_id}/recv", long_poll=True)
async def recv(services: Runtime, request: Request, space: str, mailbox_id: str) -> tuple[int, Any]:
    services.authorize(request, space)
    body = request.json()
    delivery = await services.messages.receive(
        space,
        mailbox_id,
        scope_id=body.text("scopeId"),
        holder=body.text("holder"),
        session=body.text("holderSession"),
        lease_s=body.opt_integer("leaseSeconds", services.limits.lease_s_default),
        wait_ms=body.opt_integer("waitMs"),
        idem=request.idem(space),
    )
    if delivery is None:
        return 204, None
    return 200, delivery
