"""Tasks: submit (create or replay), read, cancel, join, detach.

A submit that creates the task answers 201, one that returns the key's existing task 200 with
`created: false`; both carry `taskId`, which is all the official client reads.
"""

from __future__ import annotations

from ...actors.errors import VALIDATION_FAILED
from ..errors import ApiError
from ..http import Request, Router
from ..runtime import Runtime

router = Router()

BASE = "/v1/spaces/{space}/tasks"


@router.route("POST", BASE)
async def submit(services: Runtime, request: Request, space: str) -> tuple[int, dict]:
    services.authorize(request, space)
    body = request.json()
    # Requirements are taken by admission (pools, quotas, budgets), which this server does not
    # serve yet: refusing them beats delivering the task without what it asked for.
    for unsupported in ("requirements", "workLimit"):
        if body.data.get(unsupported) is not None:
            raise ApiError(VALIDATION_FAILED, f"field {unsupported!r} is not supported by this server yet")
    view = await services.tasks.submit(
        space,
        scope_id=body.text("scopeId"),
        mailbox_id=body.text("mailboxId"),
        key=body.text("taskKey"),
        task_input=body.value("input", services.limits),
        deadline_ms=body.opt_timestamp("deadline"),
        subscriber_id=body.opt_text("subscriberId"),
        idem=request.idem(space),
    )
    return (201 if view["created"] else 200), view


@router.route("GET", BASE + "/{task_id}")
async def read(services: Runtime, request: Request, space: str, task_id: str) -> tuple[int, dict]:
    services.authorize(request, space)
    return 200, services.tasks.view(space, task_id)


@router.route("POST", BASE + "/{task_id}/cancel")
async def cancel(services: Runtime, request: Request, space: str, task_id: str) -> tuple[int, dict]:
    services.authorize(request, space)
    body = request.json()
    return 200, await services.tasks.cancel(space, task_id, reason=body.opt_text("reason"), idem=request.idem(space))


@router.route("POST", BASE + "/{task_id}/join")
async def join(services: Runtime, request: Request, space: str, task_id: str) -> tuple[int, dict]:
    services.authorize(request, space)
    body = request.json()
    view = await services.tasks.join(
        space,
        task_id,
        subscriber_id=body.text("subscriberId"),
        scope_id=body.text("scopeId"),
        idem=request.idem(space),
    )
    return 200, view


@router.route("POST", BASE + "/{task_id}/detach")
async def detach(services: Runtime, request: Request, space: str, task_id: str) -> tuple[int, dict]:
    services.authorize(request, space)
    body = request.json()
    view = await services.tasks.detach(
        space, task_id, subscriber_id=body.text("subscriberId"), idem=request.idem(space)
    )
    return 200, view
