"""The wire shapes of task groups (`actors/groups.py`'s views)."""

from __future__ import annotations

from typing import Any

from ...actors.groups import GroupCountsView, GroupMemberView, GroupStateView, GroupVerdictView, GroupView
from ...actors.coordination_reads import RunGroupsView
from .shape import Shape, component

__all__ = ["RUN_GROUPS", "GROUP", "GROUP_MEMBER", "GROUP_COUNTS", "GROUP_STATE", "GROUP_VERDICT", "COMPONENTS"]

GROUP_MEMBER = Shape(GroupMemberView)
GROUP_COUNTS = Shape(GroupCountsView)
# A task group: its id is its `groupId` too (what close, seal and a verdict name it); its deadline
# is `deadline`, as the request that sets it names it.
GROUP = Shape(GroupView, also={"groupId": "id"}, rename={"deadline_ms": "deadline"})
# Where a group stands (close, seal, and inside a member's submission), and a verdict's answer.
GROUP_STATE = Shape(GroupStateView)
GROUP_VERDICT = GROUP_STATE.extended(GroupVerdictView)
# A run's task groups, newest first (`/scopes/{scope_id}/groups`).
RUN_GROUPS = Shape(RunGroupsView)

# The OpenAPI components these shapes make, by name.
COMPONENTS: dict[str, dict[str, Any]] = {
    "TaskGroup": component(GROUP),
    "GroupState": component(GROUP_STATE),
    "GroupVerdict": component(GROUP_VERDICT),
    "RunGroups": component(RUN_GROUPS),
}
