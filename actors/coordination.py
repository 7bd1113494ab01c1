"""Coordination inside a space: barriers, timers and task groups, their timers and their cascade.

`CoordinationCommands` is one part of a `SpaceState`, given the tables it uses (the scope tree,
the mailboxes and tasks, its own `barriers.py`, `timers.py` and `groups.py`), the queue part (a
group's members are tasks of its queue) and the space's `commit`. Each command is a pure
transition: a command and `now_ms` in, an `Outcome` out, its records already applied.

Where each runs (the actor that serializes it):
    barriers    ("barrier", space, barrier_id)     create, arrive
                ("barrier-name", space, scope, name)  get or create by name
    timers      ("timers", space, scope_id)        create (by name too), poll (and its long poll), ack, cancel,
                                                   and the timers' own firing and expiry
    groups      the group's queue actor            submit, join-task, accept, reject, close, seal,
                ("queue", space, mailbox, gate)    and the deadline; created in its parent's scope
                                                   actor, like any child scope

What follows from other records is applied with them (`after_apply`, live and in replay): a
scope's end cancels the open barriers, armed or fired timers and unfinished groups of its subtree;
a member task's end, a verdict or a seal may finalize its group. Those changes come back as the
list of what changed, for the event log.

Timers (tags, each proposing a change the turn checks again):
    ("timer-fire", timer_id)      on the timer's scope actor   fire if still armed and due
    ("timer-expiry", timer_id)    on the timer's scope actor   EXPIRED if fired and never acked
    ("group-deadline", group_id)  on the group's queue actor   FAILED if not finalized

Pure: no IO, no clock reads, no awaits.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Iterator

from . import commands as c
from .actor_keys import queue_actor, timers_actor
from .barriers import BARRIER_RECORDS, RELEASED, BarrierTable
from .barriers import BARRIER_ARRIVED, BARRIER_CREATED, BARRIER_IMAGE
from .errors import DEADLINE_EXCEEDED, SCOPE_CANCELLED, VALIDATION_FAILED, KernelError
from .groups import ACCEPTED, FINALIZED, GROUP_RECORDS, REJECTED, Group, GroupTable
from .groups import GROUP_CREATED, GROUP_EXPIRED, GROUP_IMAGE, GROUP_JOINED, GROUP_SEALED, GROUP_VERDICT
from .limits import Limits
from .mailboxes import MailboxTable
from .messages import MessageTable
from .messages import DELIVERY_COMPLETED, DELIVERY_DEAD
from .outcome import ActorKey, Outcome, Timer
from .scopes import SCOPE_ENDED
from .scopes import ACTIVE, ScopeTree
from .tasks import TaskTable
from .tasks import TASK_ENDED
from .timers import ARMED, FIRED, TIMER_RECORDS, ScopeTimer, TimerTable
from .timers import TIMER_ACKED, TIMER_CANCELLED, TIMER_CREATED, TIMER_EXPIRED, TIMER_FIRED, TIMER_IMAGE

if TYPE_CHECKING:
    from .work import WorkCommands

__all__ = [
    "CoordinationCommands", "COORDINATION_APPLY", "COORDINATION_TIMERS", "COORDINATION_RECORDS",
    "AFTER_APPLY_KINDS",
]

FIRE_TIMER, EXPIRY_TIMER, GROUP_DEADLINE_TIMER = "timer-fire", "timer-expiry", "group-deadline"

# Every record type of this part, with the fields it carries (for the registry of record types).
COORDINATION_RECORDS: dict[str, tuple[str, ...]] = {**BARRIER_RECORDS, **TIMER_RECORDS, **GROUP_RECORDS}

SCOPE_END_REASONS = {"CANCELLED": "scope_cancelled", "COMPLETED": "scope_completed", "EXPIRED": "scope_expired"}

# Records after which a member task may have ended (its group may finalize), and how to find it.
_TASK_ENDS = (DELIVERY_COMPLETED, DELIVERY_DEAD, TASK_ENDED)
# The record types `after_apply` may make events of (the space asks only for these).
AFTER_APPLY_KINDS = frozenset({SCOPE_ENDED, *_TASK_ENDS, GROUP_JOINED, GROUP_VERDICT, GROUP_SEALED, GROUP_EXPIRED, BARRIER_ARRIVED})

Commit = Callable[..., Outcome]
# A change that followed from a record (for the event log): (type, scope_id, aggregate, id, payload).
Change = tuple[str, str | None, str, str, dict]


class CoordinationCommands:
    __slots__ = ("id", "limits", "scopes", "mailboxes", "messages", "tasks", "work", "barriers", "timers", "groups", "_commit")
    # The space's own tables and its work part, compared there (`snapshots.equality`).
    _DERIVED = ("scopes", "mailboxes", "messages", "tasks", "work")

    def __init__(
        self,
        space_id: str,
        limits: Limits,
        scopes: ScopeTree,
        mailboxes: MailboxTable,
        messages: MessageTable,
        tasks: TaskTable,
        work: "WorkCommands",
        commit: Commit,
    ) -> None:
        self.id = space_id
        self.limits = limits
        self.scopes = scopes
        self.mailboxes = mailboxes
        self.messages = messages
        self.tasks = tasks
        self.work = work
        self.barriers = BarrierTable(limits, scopes)
        self.timers = TimerTable(limits, scopes)
        self.groups = GroupTable(limits, tasks)
        self._commit = commit

    # -- barriers -------------------------------------------------------------------------------

    def create_barrier(self, command: c.CreateBarrier, now_ms: int) -> Outcome:
        record = self.barriers.decide_create(command.barrier_id, command.scope_id, command.target, now_ms)
        outcome = self._commit(Outcome(), record)
        outcome.reply = self.barriers.view(self.barriers.get(command.barrier_id), now_ms)
        return outcome

    def ensure_barrier(self, command: c.EnsureBarrier, now_ms: int) -> Outcome:
        """The scope's barrier of this name (its target must be the one sent), created if missing."""
        barrier = self.barriers.by_name(command.scope_id, command.name)
        if barrier is not None:
            self.barriers.check_named(barrier, command.target)
            return Outcome(reply=self.barriers.view(barrier, now_ms))
        record = self.barriers.decide_create(command.barrier_id, command.scope_id, command.target, now_ms, command.name)
        outcome = self._commit(Outcome(), record)
        outcome.reply = self.barriers.view(self.barriers.get(command.barrier_id), now_ms)
        return outcome

    def arrive(self, command: c.ArriveBarrier, now_ms: int) -> Outcome:
        barrier = self.barriers.get(command.barrier_id)
        outcome = self._commit(Outcome(), *self.barriers.decide_arrive(barrier, command.arrival_key, now_ms))
        outcome.reply = self.barriers.view(barrier, now_ms)
        return outcome

    # -- timers ---------------------------------------------------------------------------------

    def create_timer(self, command: c.CreateTimer | c.EnsureTimer, now_ms: int, name: str | None = None) -> Outcome:
        fire_ms = command.at_ms if command.at_ms is not None else now_ms + (command.after_s or 0) * 1000
        if fire_ms - now_ms > self.limits.timer_after_s_max * 1000:
            raise KernelError(
                VALIDATION_FAILED, f"a timer fires at most {self.limits.timer_after_s_max} seconds from now"
            )
        record = self.timers.decide_create(command.timer_id, command.scope_id, fire_ms, command.token, now_ms, name)
        outcome = self._commit(Outcome(), record)
        timer = self.timers.get(command.timer_id)
        outcome.timers.extend(self._timer_timers(timer))
        outcome.reply = self.timers.view(timer)
        return outcome

    def ensure_timer(self, command: c.EnsureTimer, now_ms: int) -> Outcome:
        """The scope's timer of this name as it is (the body is not compared), armed if missing."""
        timer = self.timers.by_name(command.scope_id, command.name)
        if timer is not None:
            return Outcome(reply=self.timers.named_view(timer, now_ms))
        outcome = self.create_timer(command, now_ms, command.name)
        outcome.reply = self.timers.named_view(self.timers.get(command.timer_id), now_ms)
        return outcome

    def poll_timers(self, command: c.PollTimers, now_ms: int) -> Outcome:
        """Every fired, unacked timer of the scope, with its token (a listing, harmless to repeat).

        With `timerId`, only that one, and the answer says its state when it has ended (so a
        caller waiting for a cancelled timer stops). With `waitMs`, an empty listing waits for a
        firing in this scope (the timers fire on this actor).
        """
        scope = self.scopes.get(command.scope_id)
        fired = self.timers.fired_in(command.scope_id)
        reply: dict[str, Any] = {"scopeId": command.scope_id}
        if command.timer_id is not None:
            timer = self.timers.get(command.timer_id)
            fired = [timer] if timer.state == FIRED else []
            reply["timer"] = self.timers.view(timer)
            if timer.state not in (ARMED, FIRED):
                reply["timers"] = []
                return Outcome(reply=reply)
        if not fired:
            if self.scopes.effective(scope, now_ms) != ACTIVE:
                raise KernelError(SCOPE_CANCELLED, f"scope {command.scope_id} is {self.scopes.effective(scope, now_ms).lower()}")
            if command.wait_ms:
                return Outcome(empty=True)
        reply["timers"] = [self.timers.fired_view(timer) for timer in fired[: self.limits.timers_listed_max]]
        return Outcome(reply=reply)

    def ack_timer(self, command: c.AckTimer, now_ms: int) -> Outcome:
        timer = self.timers.get(command.timer_id)
        record = self.timers.decide_ack(timer, command.token, now_ms)
        outcome = Outcome() if record is None else self._commit(Outcome(), record)
        outcome.reply = self.timers.view(timer)
        return outcome

    def cancel_timer(self, command: c.CancelTimer, now_ms: int) -> Outcome:
        timer = self.timers.get(command.timer_id)
        record = self.timers.decide_cancel(timer, now_ms)
        outcome = Outcome() if record is None else self._commit(Outcome(), record)
        outcome.reply = self.timers.view(timer)
        return outcome

    def on_fire_timer(self, timer_id: str, _: Any, now_ms: int) -> Outcome:
        timer = self.timers.find(timer_id)
        record = None if timer is None else self.timers.decide_fire(timer, now_ms)
        if record is None:
            return Outcome()
        assert timer is not None
        outcome = self._commit(Outcome(), record)
        outcome.timers.extend(self._timer_timers(timer))
        return outcome

    def on_expiry_timer(self, timer_id: str, _: Any, now_ms: int) -> Outcome:
        timer = self.timers.find(timer_id)
        record = None if timer is None else self.timers.decide_expire(timer, now_ms)
        return Outcome() if record is None else self._commit(Outcome(), record)

    def _timer_timers(self, timer: ScopeTimer) -> Iterator[Timer]:
        actor = timers_actor(self.id, timer.scope_id)
        if timer.state == ARMED:
            yield Timer(timer.fire_ms, actor, (FIRE_TIMER, timer.id), None)
        elif timer.state == FIRED:
            yield Timer(self.timers.expiry_ms(timer), actor, (EXPIRY_TIMER, timer.id), None)

    # -- task groups ----------------------------------------------------------------------------

    def create_group(self, command: c.CreateGroup, now_ms: int) -> Outcome:
        """The group and its gate scope (a child of `parentScopeId`, or a root), in one turn."""
        self.mailboxes.get(command.mailbox_id)
        self.groups.check_new(command.condition, command.threshold, command.expected_members, command.group_id)
        if command.deadline_ms is not None and command.deadline_ms <= now_ms:
            raise KernelError(DEADLINE_EXCEEDED, "the deadline has already passed")
        scope_record = self.scopes.decide_create(command.scope_id, None, command.parent_scope_id, None, None, now_ms)
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
        outcome = self._commit(Outcome(), scope_record, record)
        group = self.groups.get(command.group_id)
        outcome.timers.extend(self.group_timers(group))
        outcome.reply = self.groups.view(group, now_ms)
        return outcome

    def submit_member(
        self, command: c.SubmitGroupTask, now_ms: int, submit: Callable[[c.SubmitTask, int], Outcome] | None = None
    ) -> Outcome:
        """Submit a task into the group's queue (or return the key's task) and make it a member.

        `submit` is how a task is submitted in this space (with its requirements: `transitions.py`);
        without it, the queue part's own submit, which records none."""
        group = self.groups.get(command.group_id)
        existing = self.tasks.by_key(group.scope_id, command.key)
        if existing is None or existing.id not in group.members:
            self.groups.check_joinable(group)
        task = c.SubmitTask(
            space=command.space, scope_id=group.scope_id, mailbox_id=group.mailbox_id, key=command.key,
            task_input=command.task_input, deadline_ms=command.deadline_ms, task_id=command.task_id,
            message_id=command.message_id, requirements=command.requirements,
        )
        outcome = (self.work.submit_task if submit is None else submit)(task, now_ms)
        task_id = outcome.reply["id"]
        record = self.groups.decide_join(group, task_id, now_ms)
        if record is not None:
            self._commit(outcome, record)
        outcome.reply = {**outcome.reply, "taskId": task_id, "groupId": group.id, "group": self.groups.state_view(group)}
        return outcome

    def join_member(self, command: c.JoinGroupTask, now_ms: int) -> Outcome:
        group = self.groups.get(command.group_id)
        task = self.tasks.get(command.task_id)
        record = self.groups.decide_join(group, task.id, now_ms)
        outcome = Outcome() if record is None else self._commit(Outcome(), record)
        outcome.reply = self.groups.view(group, now_ms)
        return outcome

    def verdict(self, command: c.GroupVerdict, now_ms: int) -> Outcome:
        group = self.groups.get(command.group_id)
        verdict = ACCEPTED if command.accept else REJECTED
        record = self.groups.decide_verdict(group, command.task_id, verdict, now_ms)
        outcome = Outcome() if record is None else self._commit(Outcome(), record)
        outcome.reply = {**self.groups.state_view(group), "taskId": command.task_id, "verdict": verdict}
        return outcome

    def seal(self, command: c.EndGroupMembership, now_ms: int) -> Outcome:
        group = self.groups.get(command.group_id)
        record = self.groups.decide_seal(group, now_ms, strict=command.strict)
        outcome = Outcome() if record is None else self._commit(Outcome(), record)
        outcome.reply = self.groups.state_view(group)
        return outcome

    def on_group_deadline(self, group_id: str, _: Any, now_ms: int) -> Outcome:
        group = self.groups.find(group_id)
        record = None if group is None else self.groups.decide_expire(group, now_ms)
        return Outcome() if record is None else self._commit(Outcome(), record)

    def group_timers(self, group: Group) -> Iterator[Timer]:
        if group.state != FINALIZED and group.deadline_ms is not None:
            actor = queue_actor(self.id, group.mailbox_id, group.scope_id)
            yield Timer(group.deadline_ms, actor, (GROUP_DEADLINE_TIMER, group.id), None)

    # -- what follows from other records ---------------------------------------------------------

    def after_apply(self, record: dict) -> list[Change]:
        """What changed here because `record` was applied (the scope cascade, groups finalizing)."""
        kind = record["type"]
        if kind == SCOPE_ENDED:
            return self._scope_ended(record)
        groups: list[Group]
        if kind in _TASK_ENDS:
            task_id = record.get("task_id")
            if task_id is None:
                message = self.messages.find(record["message_id"])
                task_id = None if message is None else message.task_id
            if task_id is None or not self.groups:
                return []
            groups = self.groups.of_task(task_id)
        elif kind in (GROUP_JOINED, GROUP_VERDICT, GROUP_SEALED):
            groups = [self.groups.get(record["id"])]
        elif kind == GROUP_EXPIRED:
            return [self._finalized(self.groups.get(record["id"]))]
        elif kind == BARRIER_ARRIVED:
            barrier = self.barriers.get(record["id"])
            if barrier.state == RELEASED:  # this arrival made the target
                return [("barrier.released", barrier.scope_id, "barrier", barrier.id, {"arrived": len(barrier.arrivals)})]
            return []
        else:
            return []
        return [self._finalized(group) for group in groups if self.groups.evaluate(group, record["at_ms"])]

    def _scope_ended(self, record: dict) -> list[Change]:
        subtree = self.scopes.subtree(record["id"])
        at_ms = record["at_ms"]
        changes: list[Change] = []
        for barrier in self.barriers.cancel_in_scopes(subtree, at_ms):
            changes.append(("barrier.cancelled", barrier.scope_id, "barrier", barrier.id, {"state": barrier.state}))
        for timer in self.timers.cancel_in_scopes(subtree, at_ms):
            changes.append(("timer.cancelled", timer.scope_id, "timer", timer.id, {"state": timer.state}))
        if self.groups:
            in_subtree = set(subtree)
            reason = SCOPE_END_REASONS[record["state"]]
            for group in self.groups.unfinished():
                if group.scope_id in in_subtree:
                    ended = self.groups.end_with_scope(group, reason, at_ms)
                else:  # a joined member of another scope may have been cancelled with it
                    ended = self.groups.evaluate(group, at_ms)
                if ended:
                    changes.append(self._finalized(group))
        return changes

    @staticmethod
    def _finalized(group: Group) -> Change:
        return ("group.finalized", group.scope_id, "group", group.id, {"outcome": group.outcome, "outcomeReason": group.reason})

    def scope_actors(self, scope_ids: list[str]) -> list[ActorKey]:
        """The timer actors of these scopes, so a poll parked there hears that the scope ended."""
        return [timers_actor(self.id, scope_id) for scope_id in scope_ids]

    # -- recovery and images ----------------------------------------------------------------------

    def all_timers(self) -> Iterator[Timer]:
        """Every supervisor deadline this part needs now (after a recovery)."""
        for timer in self.timers.live():
            yield from self._timer_timers(timer)
        for group in self.groups.unfinished():
            yield from self.group_timers(group)

    def image(self) -> Iterator[dict]:
        yield from self.barriers.image()
        yield from self.timers.image()
        yield from self.groups.image()

    def is_empty(self) -> bool:
        return not len(self.barriers) and not len(self.timers) and not len(self.groups)


COORDINATION_TIMERS: dict[str, Callable[[CoordinationCommands, Any, Any, int], Outcome]] = {
    FIRE_TIMER: CoordinationCommands.on_fire_timer,
    EXPIRY_TIMER: CoordinationCommands.on_expiry_timer,
    GROUP_DEADLINE_TIMER: CoordinationCommands.on_group_deadline,
}

COORDINATION_APPLY: dict[str, Callable[[CoordinationCommands, dict], Any]] = {
    BARRIER_CREATED: lambda part, record: part.barriers.apply_created(record),
    BARRIER_ARRIVED: lambda part, record: part.barriers.apply_arrived(record),
    TIMER_CREATED: lambda part, record: part.timers.apply_created(record),
    TIMER_FIRED: lambda part, record: part.timers.apply_fired(record),
    TIMER_ACKED: lambda part, record: part.timers.apply_ended(record, "ACKED"),
    TIMER_CANCELLED: lambda part, record: part.timers.apply_ended(record, "CANCELLED"),
    TIMER_EXPIRED: lambda part, record: part.timers.apply_ended(record, "EXPIRED"),
    GROUP_CREATED: lambda part, record: part.groups.apply_created(record),
    GROUP_JOINED: lambda part, record: part.groups.apply_joined(record),
    GROUP_VERDICT: lambda part, record: part.groups.apply_verdict(record),
    GROUP_SEALED: lambda part, record: part.groups.apply_sealed(record),
    GROUP_EXPIRED: lambda part, record: part.groups.apply_expired(record),
    # Image-only records.
    BARRIER_IMAGE: lambda part, record: part.barriers.apply_image(record),
    TIMER_IMAGE: lambda part, record: part.timers.apply_image(record),
    GROUP_IMAGE: lambda part, record: part.groups.apply_image(record),
}
assert set(COORDINATION_APPLY) == set(COORDINATION_RECORDS), "every coordination record has an applier"
