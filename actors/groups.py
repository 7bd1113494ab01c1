"""Task groups: collective completion over durable tasks, OPEN -> SEALED -> FINALIZED.

A group owns a gate scope (a child of `parentScopeId`, or a root) and delivers its members through
one mailbox. Members are tasks submitted into the group (they live in the gate scope) or outside
tasks joined while it is open; at most `group_members_max`. Callers give verdicts (accept, reject)
on members, whatever the member task's state; the same verdict again is harmless, the other one a
409 `CONFLICT`. The group is SEALED by `close`/`seal` or when `expectedMembers` have joined; then
no member joins any more.

Its condition decides when it is FINALIZED, with an `outcome` and an `outcomeReason`:

    FIRST_ACCEPTED  SUCCEEDED at the first accept (threshold_reached)
    N_ACCEPTED      SUCCEEDED at `threshold` accepts (threshold_reached); once sealed, FAILED as
                    soon as accepts plus members without a verdict fall short (threshold_unreachable)
    ALL_TERMINAL    once sealed and every member's task has ended: SUCCEEDED (all_terminal) if
                    every member is accepted or, without a verdict, SUCCEEDED; else FAILED
                    (member_failed)
    any             FAILED at its deadline (deadline_exceeded); CANCELLED when its gate scope ends
                    (scope_cancelled, scope_completed, scope_expired)

Finalizing is not a record of its own: it follows from the records it depends on (a verdict, a
seal, a member's task ending, the gate scope ending), so `evaluate` runs when those are applied,
live and in replay alike, and decides the same thing both times. The outcome, once set, never
changes. The commands, transitions and the groups' declaration (`GROUPS`) are `group_commands.py`.

Pure: no IO, no clock reads.
"""

from __future__ import annotations

from typing import Final, Iterator, Literal, NamedTuple

from .caps import full
from .errors import CONFLICT, NOT_FOUND, VALIDATION_FAILED, KernelError
from .limits import Limits
from .primitive import record_type
from .tasks import SUCCEEDED, TaskTable
from .shapes import EpochMs, Record

__all__ = [
    "Group", "GroupTable", "CONDITIONS", "OPEN", "SEALED", "FINALIZED", "ACCEPTED", "REJECTED",
    "GroupView", "GroupMemberView", "GroupCountsView", "GroupStateView", "GroupVerdictView",
    "GROUP_CREATED", "GROUP_EXPIRED", "GROUP_IMAGE", "GROUP_JOINED", "GROUP_SEALED", "GROUP_VERDICT",
]

# The record types this module decides and applies (the journal's spelling of each).
GROUP_CREATED = record_type("group.created")
GROUP_EXPIRED = record_type("group.expired")
GROUP_IMAGE = record_type("group.image")
GROUP_JOINED = record_type("group.joined")
GROUP_SEALED = record_type("group.sealed")
GROUP_VERDICT = record_type("group.verdict")

GroupState = Literal["OPEN", "SEALED", "FINALIZED"]
OPEN: Final = "OPEN"
SEALED: Final = "SEALED"
FINALIZED: Final = "FINALIZED"

Condition = Literal["ALL_TERMINAL", "N_ACCEPTED", "FIRST_ACCEPTED"]
ALL_TERMINAL: Final = "ALL_TERMINAL"
N_ACCEPTED: Final = "N_ACCEPTED"
FIRST_ACCEPTED: Final = "FIRST_ACCEPTED"
CONDITIONS = (ALL_TERMINAL, N_ACCEPTED, FIRST_ACCEPTED)

Verdict = Literal["ACCEPTED", "REJECTED"]
ACCEPTED: Final = "ACCEPTED"
REJECTED: Final = "REJECTED"

# Outcomes.
GroupOutcome = Literal["SUCCEEDED", "FAILED", "CANCELLED"]
GROUP_SUCCEEDED: Final = "SUCCEEDED"
GROUP_FAILED: Final = "FAILED"
GROUP_CANCELLED: Final = "CANCELLED"


class GroupMemberView(NamedTuple):
    """A member: its task, the verdict given on it (None before one), and its task's state (None
    for a task no longer kept)."""

    task_id: str
    verdict: Verdict | None
    state: str | None


class GroupCountsView(NamedTuple):
    members: int
    accepted: int
    rejected: int


class GroupView(NamedTuple):
    """A task group as creating, joining and reading it answer."""

    id: str
    scope_id: str
    mailbox_id: str
    parent_scope_id: str | None
    condition: Condition
    threshold: int | None
    expected_members: int | None
    deadline_ms: EpochMs | None
    state: GroupState
    outcome: GroupOutcome | None
    outcome_reason: str | None
    members: tuple[GroupMemberView, ...]
    counts: GroupCountsView
    created_ms: EpochMs
    sealed_ms: EpochMs | None
    finalized_ms: EpochMs | None


class GroupStateView(NamedTuple):
    """Where a group stands: what close and seal answer, and what a member's submission carries."""

    group_id: str
    state: GroupState
    outcome: GroupOutcome | None
    outcome_reason: str | None


class GroupVerdictView(NamedTuple):
    """What a verdict answers: the group's state (GroupStateView's fields first), then the member
    and the verdict given on it."""

    group_id: str
    state: GroupState
    outcome: GroupOutcome | None
    outcome_reason: str | None
    task_id: str
    verdict: Verdict

class Group:
    __slots__ = (
        "id", "scope_id", "mailbox_id", "condition", "threshold", "expected_members", "deadline_ms", "parent_scope_id",
        "state", "outcome", "reason", "members", "created_ms", "sealed_ms", "finalized_ms",
    )

    def __init__(self, record: Record) -> None:
        self.id: str = record["id"]
        self.scope_id: str = record["scope_id"]
        self.mailbox_id: str = record["mailbox_id"]
        self.condition: Condition = record["condition"]
        self.threshold: int | None = record["threshold"]
        self.expected_members: int | None = record["expected_members"]
        self.deadline_ms: int | None = record["deadline_ms"]
        self.parent_scope_id: str | None = record["parent_scope_id"]
        self.state: GroupState = OPEN
        self.outcome: GroupOutcome | None = None
        self.reason: str | None = None
        # task id -> verdict (None until accepted or rejected), in joining order.
        self.members: dict[str, Verdict | None] = {}
        self.created_ms: int = record["at_ms"]
        self.sealed_ms: int | None = None
        self.finalized_ms: int | None = None

    @property
    def needed(self) -> int | None:
        """Accepts that succeed the group, for the conditions that count them."""
        if self.condition == FIRST_ACCEPTED:
            return 1
        if self.condition == N_ACCEPTED:
            return self.threshold
        return None


class GroupTable:
    """The groups of one space, by id, with the groups each task is a member of."""

    __slots__ = ("_by_id", "_by_task", "_unfinished", "_tasks", "_limits")
    # (`_tasks` is the space's own table, compared there: `snapshots.equality`.)
    _DERIVED = ("_tasks",)

    def __init__(self, limits: Limits, tasks: TaskTable) -> None:
        self._by_id: dict[str, Group] = {}
        self._by_task: dict[str, dict[str, None]] = {}
        self._unfinished: dict[str, None] = {}
        self._tasks = tasks
        self._limits = limits

    def __len__(self) -> int:
        return len(self._by_id)

    def get(self, group_id: str) -> Group:
        group = self._by_id.get(group_id)
        if group is None:
            raise KernelError(NOT_FOUND, f"task group {group_id!r} not found")
        return group

    def find(self, group_id: str) -> Group | None:
        return self._by_id.get(group_id)

    def all(self) -> Iterator[Group]:
        return iter(self._by_id.values())

    def unfinished(self) -> Iterator[Group]:
        return (self._by_id[group_id] for group_id in list(self._unfinished))

    def of_task(self, task_id: str) -> list[Group]:
        return [self._by_id[group_id] for group_id in self._by_task.get(task_id, ())]

    def view(self, group: Group, now_ms: int) -> GroupView:
        tasks = self._tasks
        members = tuple(
            GroupMemberView(task_id, verdict, None if (task := tasks.find(task_id)) is None else task.state)
            for task_id, verdict in group.members.items()
        )
        verdicts = list(group.members.values())
        counts = GroupCountsView(len(verdicts), verdicts.count(ACCEPTED), verdicts.count(REJECTED))
        assert counts.accepted + counts.rejected <= counts.members, "a verdict is on a member"
        assert (group.outcome is None) == (group.state != FINALIZED), "a group has an outcome once finalized"
        return GroupView(
            group.id, group.scope_id, group.mailbox_id, group.parent_scope_id, group.condition, group.threshold,
            group.expected_members, group.deadline_ms, group.state, group.outcome, group.reason, members, counts,
            group.created_ms, group.sealed_ms, group.finalized_ms,
        )

    @staticmethod
    def state_view(group: Group) -> GroupStateView:
        """What close and seal answer."""
        return GroupStateView(group.id, group.state, group.outcome, group.reason)

    # -- deciding -------------------------------------------------------------------------------

    def check_new(
        self, condition: str, threshold: int | None, expected_members: int | None, group_id: str
    ) -> None:
        members_max = self._limits.group_members_max
        if condition not in CONDITIONS:
            raise KernelError(VALIDATION_FAILED, f"condition {condition!r} is not one of {', '.join(CONDITIONS)}")
        if condition == N_ACCEPTED and threshold is None:
            raise KernelError(VALIDATION_FAILED, "condition N_ACCEPTED needs a threshold")
        if condition != N_ACCEPTED and threshold is not None and not (condition == FIRST_ACCEPTED and threshold == 1):
            raise KernelError(VALIDATION_FAILED, f"threshold goes with condition N_ACCEPTED, not {condition}")
        if threshold is not None and expected_members is not None and threshold > expected_members:
            raise KernelError(
                VALIDATION_FAILED, f"threshold {threshold} can never be reached by {expected_members} expected members"
            )
        if len(self._by_id) >= self._limits.groups_max:
            raise full(f"space holds {len(self._by_id)} task groups", "groups_max")
        if group_id in self._by_id:
            raise KernelError(CONFLICT, f"task group id {group_id} is taken")
        assert members_max >= 1

    def check_joinable(self, group: Group) -> None:
        if group.state != OPEN:
            raise KernelError(CONFLICT, f"task group {group.id} is {group.state.lower()}: no member joins any more")
        if len(group.members) >= self._limits.group_members_max:
            raise full(f"task group {group.id} has {len(group.members)} members", "group_members_max")

    def decide_join(self, group: Group, task_id: str, now_ms: int) -> Record | None:
        """Add a member; none for a task that already is one."""
        if task_id in group.members:
            return None
        self.check_joinable(group)
        assert group.state == OPEN, "members join an open group only"
        record: Record = {"type": GROUP_JOINED, "id": group.id, "task_id": task_id, "at_ms": now_ms}
        if group.expected_members is not None and len(group.members) + 1 >= group.expected_members:
            record["seals"] = True  # (applying it seals the group: said so in the event log)
        return record

    def decide_verdict(self, group: Group, task_id: str, verdict: str, now_ms: int) -> Record | None:
        if task_id not in group.members:
            raise KernelError(NOT_FOUND, f"task {task_id!r} is not a member of task group {group.id}")
        given = group.members[task_id]
        if given == verdict:
            return None
        if given is not None:
            raise KernelError(CONFLICT, f"task {task_id} was already {given.lower()} in task group {group.id}")
        assert verdict in (ACCEPTED, REJECTED), f"no verdict {verdict!r}"
        return {"type": GROUP_VERDICT, "id": group.id, "task_id": task_id, "verdict": verdict, "at_ms": now_ms}

    def decide_seal(self, group: Group, now_ms: int, *, strict: bool) -> Record | None:
        """SEALED if open; a repeat is harmless, except that `seal` (strict) refuses a finalized group."""
        if group.state == FINALIZED and strict:
            raise KernelError(CONFLICT, f"task group {group.id} is already finalized ({group.outcome})")
        if group.state != OPEN:
            return None
        assert group.sealed_ms is None, "a group is sealed once"
        return {"type": GROUP_SEALED, "id": group.id, "at_ms": now_ms}

    def decide_expire(self, group: Group, now_ms: int) -> Record | None:
        if group.state == FINALIZED or group.deadline_ms is None or now_ms < group.deadline_ms:
            return None
        assert group.outcome is None, "an outcome, once set, never changes"
        return {"type": GROUP_EXPIRED, "id": group.id, "at_ms": now_ms}

    # -- applying -------------------------------------------------------------------------------

    def apply_created(self, record: Record) -> Group:
        group = Group(record)
        self._by_id[group.id] = group
        self._unfinished[group.id] = None
        return group

    def apply_joined(self, record: Record) -> Group:
        group = self._by_id[record["id"]]
        task_id = record["task_id"]
        assert group.state == OPEN, f"a member joined task group {group.id} after it was sealed"
        group.members[task_id] = None
        self._by_task.setdefault(task_id, {})[group.id] = None
        assert len(group.members) <= self._limits.group_members_max, "a group holds at most group_members_max members"
        if group.expected_members is not None and len(group.members) >= group.expected_members:
            self._seal(group, record["at_ms"])
        return group

    def apply_verdict(self, record: Record) -> Group:
        group = self._by_id[record["id"]]
        assert group.members[record["task_id"]] is None, "a member's verdict is given once"
        group.members[record["task_id"]] = record["verdict"]
        return group

    def apply_sealed(self, record: Record) -> Group:
        group = self._by_id[record["id"]]
        self._seal(group, record["at_ms"])
        return group

    def apply_expired(self, record: Record) -> Group:
        group = self._by_id[record["id"]]
        self._finalize(group, GROUP_FAILED, "deadline_exceeded", record["at_ms"])
        return group

    def _seal(self, group: Group, at_ms: int) -> None:
        if group.state == OPEN:
            group.state = SEALED
            group.sealed_ms = at_ms

    def _finalize(self, group: Group, outcome: GroupOutcome, reason: str, at_ms: int) -> None:
        assert group.state != FINALIZED, f"task group {group.id} finalized twice"
        if group.sealed_ms is None:
            group.sealed_ms = at_ms
        group.state = FINALIZED
        group.outcome = outcome
        group.reason = reason
        group.finalized_ms = at_ms
        self._unfinished.pop(group.id, None)

    def end_with_scope(self, group: Group, reason: str, at_ms: int) -> bool:
        """Its gate scope ended: CANCELLED, unless it was finalized already."""
        if group.state == FINALIZED:
            return False
        self._finalize(group, GROUP_CANCELLED, reason, at_ms)
        return True

    def evaluate(self, group: Group, at_ms: int) -> bool:
        """Finalize the group if its condition now holds; True when it did."""
        if group.state == FINALIZED:
            return False
        verdicts = list(group.members.values())
        sealed = group.state == SEALED
        needed = group.needed
        if needed is not None:
            accepted = verdicts.count(ACCEPTED)
            if accepted >= needed:
                self._finalize(group, GROUP_SUCCEEDED, "threshold_reached", at_ms)
                return True
            if sealed and accepted + verdicts.count(None) < needed:
                self._finalize(group, GROUP_FAILED, "threshold_unreachable", at_ms)
                return True
            return False
        if not sealed:
            return False
        tasks = [self._tasks.find(task_id) for task_id in group.members]
        if any(task is not None and not task.terminal for task in tasks):
            return False
        good = all(
            verdict == ACCEPTED or (verdict is None and task is not None and task.state == SUCCEEDED)
            for verdict, task in zip(verdicts, tasks)
        )
        if good:
            self._finalize(group, GROUP_SUCCEEDED, "all_terminal", at_ms)
        else:
            self._finalize(group, GROUP_FAILED, "member_failed", at_ms)
        return True

    def referring_to(self, scope_ids: frozenset[str]) -> set[str]:
        """Those of `scope_ids` holding a member task of a group not finalized outside them: the
        group's outcome still depends on that task (a removal keeps them, `runs.py`)."""
        kept: set[str] = set()
        for group_id in self._unfinished:
            group = self._by_id[group_id]
            if group.scope_id in scope_ids:
                continue
            for task_id in group.members:
                task = self._tasks.find(task_id)
                if task is not None and task.scope_id in scope_ids:
                    kept.add(task.scope_id)
        return kept

    def drop_scopes(self, scope_ids: frozenset[str]) -> None:
        """Ended runs removed (`runs.py`): the groups gated by their scopes leave. A finalized
        group outside them still lists a member task they held (its state null)."""
        for group in [group for group in self._by_id.values() if group.scope_id in scope_ids]:
            del self._by_id[group.id]
            self._unfinished.pop(group.id, None)
            for task_id in group.members:
                memberships = self._by_task.get(task_id)
                if memberships is not None:
                    memberships.pop(group.id, None)
                    if not memberships:
                        del self._by_task[task_id]

    # -- images ---------------------------------------------------------------------------------

    def image(self) -> Iterator[Record]:
        for group in self._by_id.values():
            yield {
                "type": GROUP_IMAGE,
                "id": group.id,
                "scope_id": group.scope_id,
                "mailbox_id": group.mailbox_id,
                "condition": group.condition,
                "threshold": group.threshold,
                "expected_members": group.expected_members,
                "deadline_ms": group.deadline_ms,
                "parent_scope_id": group.parent_scope_id,
                "state": group.state,
                "outcome": group.outcome,
                "reason": group.reason,
                "members": [[task_id, verdict] for task_id, verdict in group.members.items()],
                "sealed_ms": group.sealed_ms,
                "finalized_ms": group.finalized_ms,
                "at_ms": group.created_ms,
            }

    def apply_image(self, record: Record) -> Group:
        group = self.apply_created(record)
        group.state = record["state"]
        group.outcome = record["outcome"]
        group.reason = record["reason"]
        group.sealed_ms = record["sealed_ms"]
        group.finalized_ms = record["finalized_ms"]
        for task_id, verdict in record["members"]:
            group.members[task_id] = verdict
            self._by_task.setdefault(task_id, {})[group.id] = None
        if group.state == FINALIZED:
            self._unfinished.pop(group.id, None)
        return group
