"""The wire shapes of tasks (`actors/tasks.py`'s views)."""

from __future__ import annotations

from typing import Any

from ...actors.group_commands import GroupSubmittedView
from ...actors.tasks import RunTasksView, SubmittedTaskView, TaskView
from . import groups as _groups  # (a member's submit nests the group's state: its shape comes first)
from .shape import Shape, component

__all__ = ["TASK", "RUN_TASKS", "SUBMITTED_TASK", "GROUP_SUBMITTED_TASK", "COMPONENTS", "created_status"]

# A task as every task answer and read shows it. Its id is written twice, as `id` and `taskId`
# (the official clients read `taskId` from a submit's answer); its deadline keeps the name
# `deadline` the request gives it.
TASK = Shape(TaskView, rename={"deadline_ms": "deadline"}, also={"taskId": "id"})
# A submit's answer: the task, then `created` and `replay`.
SUBMITTED_TASK = TASK.extended(SubmittedTaskView)
# A group member's submit: the submit's answer, then `groupId` and the group's state.
GROUP_SUBMITTED_TASK = SUBMITTED_TASK.extended(GroupSubmittedView)
# A run's tasks, newest first (`/scopes/{scope_id}/tasks`).
RUN_TASKS = Shape(RunTasksView)

# The OpenAPI components these shapes make, by name.
COMPONENTS: dict[str, dict[str, Any]] = {
    "Task": component(TASK),
    "RunTasks": component(RUN_TASKS),
    "Submitted": component(SUBMITTED_TASK),
    "GroupSubmitted": component(GROUP_SUBMITTED_TASK),
}


def created_status(reply: Any) -> int:
    """A submit's status: 201 when it created its task, 200 when it returned the key's task. The
    reply is the kernel's view, or its wire form where the answer was kept for an
    Idempotency-Key's retry."""
    created = reply["created"] if type(reply) is dict else reply.created
    return 201 if created else 200
