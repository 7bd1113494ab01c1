"""Task groups inside a space, declared: create, submit or join members, verdicts, seal, the deadline.

The table, its records and the conditions that finalize a group are `groups.py`. A group runs on
its queue's actor (its members are that queue's tasks); it is created in its parent scope's actor
with its gate scope, like any child scope. A group finalizes as what it depends on is applied (a
member's task ending, a verdict, a seal, its gate scope ending: `after`), live and in replay.

Timers (on the group's queue actor):
    ("group-deadline", group_id)   -   FAILED if not finalized

Pure: no IO, no clock reads, no awaits.
"""

from __future__ import annotations

from typing import Any, Callable, ClassVar, Iterator, NamedTuple

from .actor_keys import ActorKey, queue_actor, scope_actor
from .errors import DEADLINE_EXCEEDED, KernelError
from .fields import INTEGER, JSON, TIMESTAMP, body, drawn, path
from .groups import (
    ACCEPTED, FINALIZED, GROUP_CREATED, GROUP_EXPIRED, GROUP_IMAGE, GROUP_JOINED, GROUP_SEALED, GROUP_VERDICT, REJECTED,
    Group, GroupStateView, GroupTable, GroupVerdictView, Verdict,
)
from .messages import DELIVERY_COMPLETED, DELIVERY_DEAD
from .limits import Limits
from .outcome import Outcome, Timer, Space, State, TimerMarker
from .primitive import NOT_COUNTED, Command, Primitive, command, event, operation, timer_kind
from .requirements import REQUIREMENTS, parse_requirements
from .scopes import SCOPE_END_REASONS, SCOPE_ENDED
from .task_commands import SubmitTask, submit
from .tasks import TASK_ENDED, SubmittedTaskView, TaskState
from .events import Change, entity_event
from .coordination import CoordinationCommands
from .shapes import EpochMs, Json, Record

__all__ = [
    "CreateGroup", "SubmitGroupTask", "JoinGroupTask", "GroupVerdict", "AcceptGroupTask", "RejectGroupTask",
    "EndGroupMembership", "CloseGroup", "SealGroup", "GroupSubmittedView", "GROUPS",
]

DEADLINE_TIMER = timer_kind("group-deadline")


# -- commands ----------------------------------------------------------------------------------


@command
class CreateGroup(Command):
    """A task group and its gate scope (a child of `parentScopeId`, or a root)."""

    space: str = path("space")
    mailbox_id: str = body("mailboxId")
    condition: str = body("condition", description="ALL_TERMINAL, N_ACCEPTED (with threshold) or FIRST_ACCEPTED")
    threshold: int | None = body("threshold", INTEGER, required=False, minimum=1, maximum="group_members_max")
    expected_members: int | None = body("expectedMembers", INTEGER, required=False, minimum=1, maximum="group_members_max")
    deadline_ms: int | None = body("deadline", TIMESTAMP, required=False)
    parent_scope_id: str | None = body("parentScopeId", required=False)
    group_id: str = drawn("tg_")
    scope_id: str = drawn("sc_")

    def actor(self, state: State) -> ActorKey:
        return scope_actor(self.space, self.parent_scope_id if self.parent_scope_id is not None else self.scope_id)


def _group_queue(state: State, space: str, group_id: str) -> ActorKey:
    """A group runs on its queue's actor: its members are that queue's tasks."""
    group = state.space(space).coordination.groups.get(group_id)
    return queue_actor(space, group.mailbox_id, group.scope_id)


@command
class SubmitGroupTask(Command):
    space: str = path("space")
    group_id: str = path("group_id")
    key: str = body("taskKey", length_max="task_key_len_max")
    task_input: Any = body("input", JSON, required=False)
    deadline_ms: int | None = body("deadline", TIMESTAMP, required=False)
    # What admission takes with the member, as for `POST /tasks` (else its mailbox's defaults).
    requirements: Any = body(
        "requirements", JSON, required=False,
        description="an object of " + REQUIREMENTS,
    )
    task_id: str = drawn("tk_")
    message_id: str = drawn("ms_")

    def actor(self, state: State) -> ActorKey:
        return _group_queue(state, self.space, self.group_id)

    def check(self, limits: Limits) -> None:
        if self.requirements is not None:
            parse_requirements(self.requirements)


@command
class JoinGroupTask(Command):
    """Make an outside task a member (only while the group is open)."""

    space: str = path("space")
    group_id: str = path("group_id")
    task_id: str = body("taskId")

    def actor(self, state: State) -> ActorKey:
        return _group_queue(state, self.space, self.group_id)


@command(base=True)
class GroupVerdict(Command):
    accept: ClassVar[bool]
    space: str = path("space")
    group_id: str = path("group_id")
    task_id: str = path("task_id")

    def actor(self, state: State) -> ActorKey:
        return _group_queue(state, self.space, self.group_id)


@command
class AcceptGroupTask(GroupVerdict):
    accept: ClassVar[bool] = True


@command
class RejectGroupTask(GroupVerdict):
    accept: ClassVar[bool] = False


@command(base=True)
class EndGroupMembership(Command):
    """Seal the group: no member joins any more. `close` is harmless to repeat; `seal` refuses a
    finalized group."""

    strict: ClassVar[bool]
    space: str = path("space")
    group_id: str = path("group_id")

    def actor(self, state: State) -> ActorKey:
        return _group_queue(state, self.space, self.group_id)


@command
class CloseGroup(EndGroupMembership):
    strict: ClassVar[bool] = False


@command
class SealGroup(EndGroupMembership):
    strict: ClassVar[bool] = True


# -- answers -----------------------------------------------------------------------------------


class GroupSubmittedView(NamedTuple):
    """A member's submit: the task as a submit answers it (`tasks.SubmittedTaskView`'s fields,
    in its order), then the group's id and its state (`GroupTable.state_view`)."""

    id: str
    task_key: str
    scope_id: str
    mailbox_id: str
    message_id: str
    state: TaskState
    attempt: int
    outcome: Json
    outcome_reason: str | None
    deadline_ms: EpochMs | None
    subscribers: tuple[str, ...]
    created_ms: EpochMs
    updated_ms: EpochMs
    finished_ms: EpochMs | None
    tombstoned: bool
    created: bool
    replay: bool
    group_id: str
    group: GroupStateView


# -- transitions (of the coordination part) --------------------------------------------------------


def create(part: CoordinationCommands, command: CreateGroup, now_ms: int) -> Outcome:
    """The group and its gate scope (a child of `parentScopeId`, or a root), in one turn."""
    groups: GroupTable = part.groups
    part.mailboxes.get(command.mailbox_id)
    groups.check_new(command.condition, command.threshold, command.expected_members, command.group_id)
    if command.deadline_ms is not None and command.deadline_ms <= now_ms:
        raise KernelError(DEADLINE_EXCEEDED, "the deadline has already passed")
    scope_record = part.scopes.decide_create(command.scope_id, None, command.parent_scope_id, None, None, now_ms)
    record = {
        "type": GROUP_CREATED,
        "id": command.group_id,
        "scope_id": command.scope_id,
        "mailbox_id": command.mailbox_id,
        "condition": command.condition,
        "threshold": command.threshold,
        "expected_members": command.expected_members,
        "deadline_ms": command.deadline_ms,
        "parent_scope_id": command.parent_scope_id,
        "at_ms": now_ms,
    }
    outcome = part.commit(Outcome(), scope_record, record)
    group = groups.get(command.group_id)
    outcome.timers.extend(_group_timers(part.id, group))
    outcome.reply = groups.view(group, now_ms)
    return outcome


def submit_member(state: State, command: SubmitGroupTask, now_ms: int) -> Outcome:
    """Submit a task into the group's queue (or return the key's task) and make it a member: a
    member is submitted as any task is, its requirements included (`task_commands.submit`)."""
    part = state.space(command.space).coordination
    groups: GroupTable = part.groups
    group = groups.get(command.group_id)
    existing = part.tasks.by_key(group.scope_id, command.key)
    if existing is None or existing.id not in group.members:
        groups.check_joinable(group)
    task = SubmitTask(
        space=command.space, scope_id=group.scope_id, mailbox_id=group.mailbox_id, key=command.key,
        task_input=command.task_input, deadline_ms=command.deadline_ms, task_id=command.task_id,
        message_id=command.message_id, requirements=command.requirements,
    )
    outcome = submit(state, task, now_ms)
    submitted: SubmittedTaskView = outcome.reply
    task_id = submitted.id
    record = groups.decide_join(group, task_id, now_ms)
    if record is not None:
        part.commit(outcome, record)
    outcome.reply = GroupSubmittedView(*submitted, group.id, groups.state_view(group))
    return outcome


def join(part: CoordinationCommands, command: JoinGroupTask, now_ms: int) -> Outcome:
    groups: GroupTable = part.groups
    group = groups.get(command.group_id)
    task = part.tasks.get(command.task_id)
    record = groups.decide_join(group, task.id, now_ms)
    outcome = Outcome() if record is None else part.commit(Outcome(), record)
    outcome.reply = groups.view(group, now_ms)
    return outcome


def verdict(part: CoordinationCommands, command: GroupVerdict, now_ms: int) -> Outcome:
    groups: GroupTable = part.groups
    group = groups.get(command.group_id)
    said: Verdict = ACCEPTED if command.accept else REJECTED
    record = groups.decide_verdict(group, command.task_id, said, now_ms)
    outcome = Outcome() if record is None else part.commit(Outcome(), record)
    outcome.reply = GroupVerdictView(*groups.state_view(group), command.task_id, said)
    return outcome


def seal(part: CoordinationCommands, command: EndGroupMembership, now_ms: int) -> Outcome:
    groups: GroupTable = part.groups
    group = groups.get(command.group_id)
    record = groups.decide_seal(group, now_ms, strict=command.strict)
    outcome = Outcome() if record is None else part.commit(Outcome(), record)
    outcome.reply = groups.state_view(group)
    return outcome


def on_deadline(part: CoordinationCommands, group_id: str, _: TimerMarker, now_ms: int) -> Outcome:
    group = part.groups.find(group_id)
    record = None if group is None else part.groups.decide_expire(group, now_ms)
    return Outcome() if record is None else part.commit(Outcome(), record)


def _group_timers(space_id: str, group: Group) -> Iterator[Timer]:
    if group.state != FINALIZED and group.deadline_ms is not None:
        actor = queue_actor(space_id, group.mailbox_id, group.scope_id)
        yield Timer(group.deadline_ms, actor, (DEADLINE_TIMER, group.id), None)


def _deadlines(space: Space) -> Iterator[Timer]:
    for group in space.coordination.groups.unfinished():
        yield from _group_timers(space.id, group)


# -- what follows from other records (a group finalizing) ------------------------------------------


def _finalized(group: Group) -> Change:
    return ("group.finalized", group.scope_id, "group", group.id, {"outcome": group.outcome, "outcomeReason": group.reason})


def _after_task_end(space: Space, record: Record) -> list[Change]:
    """A member's task ended: its groups may finalize."""
    groups: GroupTable = space.coordination.groups
    if not groups:
        return []
    task_id = record.get("task_id")
    if task_id is None:
        message = space.messages.find(record["message_id"])
        task_id = None if message is None else message.task_id
    if task_id is None:
        return []
    return [_finalized(group) for group in groups.of_task(task_id) if groups.evaluate(group, record["at_ms"])]


def _after_change(space: Space, record: Record) -> list[Change]:
    """A join, a verdict or a seal: the group may finalize."""
    groups: GroupTable = space.coordination.groups
    group = groups.get(record["id"])
    return [_finalized(group)] if groups.evaluate(group, record["at_ms"]) else []


def _after_scope_ended(space: Space, record: Record) -> list[Change]:
    """A scope's end ends the unfinished groups whose gate is in its subtree; a group elsewhere with
    a joined member of that subtree may finalize (its member was cancelled with it)."""
    groups: GroupTable = space.coordination.groups
    if not groups:
        return []
    in_subtree = set(space.scopes.subtree(record["id"]))
    reason = SCOPE_END_REASONS[record["state"]]
    at_ms = record["at_ms"]
    changes = []
    for group in groups.unfinished():
        if group.scope_id in in_subtree:
            ended = groups.end_with_scope(group, reason, at_ms)
        else:
            ended = groups.evaluate(group, at_ms)
        if ended:
            changes.append(_finalized(group))
    return changes


def _find(space: Space, group_id: str) -> Group | None:
    return space.coordination.groups.find(group_id)


_JOINED = entity_event("group.joined", "group", _find, "task_id")


def _joined_events(space: Space, record: Record) -> list[Change]:
    """`group.joined`, and `group.sealed` after it when the join brings the expected members (as
    a seal by `seal`/`close` says it). A join recorded before `seals` was doubles as a seal without
    saying so: replayed, it makes the events it made then, so the log keeps its numbers."""
    joined = _JOINED(space, record)
    if record.get("seals"):
        scope_id = joined[0][1]
        joined.append(("group.sealed", scope_id, "group", record["id"], {}))
    return joined


def _make(space: Space) -> None:
    space.coordination.groups = GroupTable(space.limits, space.tasks)


_ON = "coordination"
_TABLE = "coordination.groups"

GROUPS = Primitive(
    "groups",
    make=_make,
    commands={
        CreateGroup: (_ON, create),
        SubmitGroupTask: submit_member,
        JoinGroupTask: (_ON, join),
        AcceptGroupTask: (_ON, verdict),
        RejectGroupTask: (_ON, verdict),
        CloseGroup: (_ON, seal),
        SealGroup: (_ON, seal),
    },
    records={
        GROUP_CREATED: (
            "id", "scope_id", "mailbox_id", "condition", "threshold", "expected_members", "deadline_ms", "parent_scope_id", "at_ms",
        ),
        # `seals`: the join brings the group's expectedMembers, which seals it (as a seal does); a
        # record without it (every one written before it was recorded) seals all the same.
        GROUP_JOINED: ("id", "task_id", "at_ms", "seals?"),
        GROUP_VERDICT: ("id", "task_id", "verdict", "at_ms"),
        GROUP_SEALED: ("id", "at_ms"),
        GROUP_EXPIRED: ("id", "at_ms"),
        GROUP_IMAGE: (
            "id", "scope_id", "mailbox_id", "condition", "threshold", "expected_members", "deadline_ms", "parent_scope_id",
            "state", "outcome", "reason", "members", "sealed_ms", "finalized_ms", "at_ms",
        ),
    },
    apply={
        GROUP_CREATED: (_TABLE, "apply_created"),
        GROUP_JOINED: (_TABLE, "apply_joined"),
        GROUP_VERDICT: (_TABLE, "apply_verdict"),
        GROUP_SEALED: (_TABLE, "apply_sealed"),
        GROUP_EXPIRED: (_TABLE, "apply_expired"),
        GROUP_IMAGE: (_TABLE, "apply_image"),
    },
    usage={
        GROUP_CREATED: operation("groups.create"),
        GROUP_JOINED: operation("groups.join"),
        GROUP_VERDICT: operation("groups.verdict"),
        GROUP_SEALED: operation("groups.seal"),
        GROUP_EXPIRED: event("groups.expire"),
        GROUP_IMAGE: NOT_COUNTED,
    },
    timers={DEADLINE_TIMER: (_ON, on_deadline)},
    derive={
        GROUP_CREATED: entity_event("group.created", "group", _find, "condition", "mailbox_id"),
        GROUP_JOINED: _joined_events,
        GROUP_VERDICT: entity_event("group.verdict", "group", _find, "task_id", "verdict"),
        GROUP_SEALED: entity_event("group.sealed", "group", _find),
        GROUP_EXPIRED: entity_event("group.deadline_exceeded", "group", _find),
    },
    after={
        SCOPE_ENDED: _after_scope_ended,
        DELIVERY_COMPLETED: _after_task_end,
        DELIVERY_DEAD: _after_task_end,
        TASK_ENDED: _after_task_end,
        GROUP_JOINED: _after_change,
        GROUP_VERDICT: _after_change,
        GROUP_SEALED: _after_change,
        GROUP_EXPIRED: lambda space, record: [_finalized(space.coordination.groups.get(record["id"]))],
    },
    events={
        "group.created": None, "group.joined": None, "group.verdict": None, "group.sealed": None,
        "group.deadline_exceeded": None, "group.finalized": None,
    },
    deadlines=_deadlines,
    image=lambda space: space.coordination.groups.image(),
    is_empty=lambda space: not len(space.coordination.groups),
    scopes_kept=lambda space, scope_ids: space.coordination.groups.referring_to(scope_ids),
    scopes_removed=lambda space, scope_ids: space.coordination.groups.drop_scopes(scope_ids),
)
