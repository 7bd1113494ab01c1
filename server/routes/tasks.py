"""Tasks: submit (create or replay), read, cancel, join, detach.

A submit that creates the task answers 201, one that returns the key's existing task 200 with
`created: false`; both carry `taskId`, which is all the official client reads.
"""

from __future__ import annotations

from ...actors import commands as c
from ...actors import reads
from ...actors.kernel import EMPTY
from ...actors.tasks import TaskView
from ..api import Doc, Reply, endpoint, say_if_capped
from ..http import Request, Router
from ..services import ReadServices
from ..wire.tasks import created_status

router = Router()

BASE = "/v1/spaces/{space}/tasks"
TASK = (Reply(200, "Task"),)
ERRORS = ("400", "404", "409")


async def read(services: ReadServices, request: Request, space: str, task_id: str) -> tuple[int, TaskView]:
    """The task now; with `waitMs`, once it has ended or when the wait ends (a long poll)."""
    services.authorize(request, space)
    kernel = services.kernel
    command = kernel.parse(c.WaitTask, {}, {"space": space, "task_id": task_id}, request.param)
    say_if_capped(request, kernel.limits, command.wait_ms)
    if command.wait_ms:
        reply = await kernel.submit(command, wait_ms=command.wait_ms)
        if reply is not EMPTY:
            return 200, reply
    return 200, reads.task(kernel, space, task_id)


endpoint(router, "POST", BASE, Doc(
    "Create the task of (scopeId, taskKey), or return the one it has",
    (Reply(201, "Submitted", "Created"), Reply(200, "Submitted", "The key's existing task")),
    c.SubmitTask, errors=ERRORS, idempotent=True, group="Tasks", location=("/tasks/{}", "taskId"),
), status=created_status)
endpoint(router, "GET", BASE + "/{task_id}", Doc(
    "A task; with waitMs, once it has ended (a long poll)", TASK, c.WaitTask, errors=("400", "404"), group="Tasks",
), read, long_poll=lambda request: b"waitMs" in request.query)
endpoint(router, "POST", BASE + "/{task_id}/cancel", Doc(
    "Cancel a task", TASK, c.CancelTask, body_required=False, errors=ERRORS, idempotent=True, group="Tasks", operator=True,
))
endpoint(router, "POST", BASE + "/{task_id}/join", Doc(
    "Subscribe to a task", TASK, c.JoinTask, errors=ERRORS, idempotent=True, group="Tasks",
))
endpoint(router, "POST", BASE + "/{task_id}/detach", Doc(
    "Unsubscribe from a task", TASK, c.DetachTask, errors=ERRORS, idempotent=True, group="Tasks",
))
