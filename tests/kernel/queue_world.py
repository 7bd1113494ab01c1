"""A space driven by hand, without trio: commands at chosen instants, every record and timer kept.

`World.replayed()` applies the kept records to a fresh space, and `snapshot()` describes what a
space holds, so a test can check that replay rebuilds exactly the state the commands built.
"""

from __future__ import annotations

from typing import Any

from runstate.actors import commands as c
from runstate.actors.fields import validate
from runstate.actors.limits import Limits
from runstate.actors.outcome import Outcome
from runstate.actors.space import SpaceState
from runstate.actors.transitions import TRANSITIONS
from runstate.server import wire

# 2027-01-15T08:00:00.000Z
T0 = 1_800_000_000_000
SPACE = "default"


class World:
    def __init__(self, limits: Limits | None = None) -> None:
        self.limits = limits or Limits()
        self.space = SpaceState(SPACE, self.limits)
        self.now = T0
        self.records: list[dict] = []
        self.timers: list = []
        self.pokes: list = []
        self._ids = 0

    def new_id(self, prefix: str) -> str:
        self._ids += 1
        return f"{prefix}{self._ids:04d}"

    def at(self, offset_ms: int) -> "World":
        """Move the clock to T0 + offset (never backwards)."""
        assert T0 + offset_ms >= self.now
        self.now = T0 + offset_ms
        return self

    def do(self, method: str, *args: Any) -> Outcome:
        """Run one command on the space at the current time, named by what it does (see `_COMMANDS`)."""
        if method == "restart_deliveries":  # (grace_ms, spread_ms): the restart rule over the space's leases
            outcome = self.space.restart(self.now, *args)
        else:
            command = _COMMANDS[method](*args)
            validate(command, self.limits)
            outcome = TRANSITIONS[type(command)](_OneSpace(self.space), command, self.now)
        self.records.extend(outcome.records)
        self.timers.extend(outcome.timers)
        self.pokes.extend(outcome.pokes)
        return outcome

    # -- shorthands -----------------------------------------------------------------------------

    def scope(self, parent: str | None = None, deadline_ms: int | None = None) -> str:
        scope_id = self.new_id("sc_")
        self.do("create_scope", scope_id, None, parent, deadline_ms, None)
        return scope_id

    def mailbox(self, name: str = "research", **settings: Any) -> str:
        mailbox_id = self.new_id("mb_")
        self.do(
            "create_mailbox",
            mailbox_id,
            name,
            settings.get("mode"),
            settings.get("backlog_limit"),
            settings.get("max_attempts"),
        )
        return mailbox_id

    def send(self, mailbox_id: str, scope_id: str, payload: Any = None, work_key: str | None = None, deadline_ms: int | None = None) -> dict:
        return wire.encode(self.do("send_message", mailbox_id, scope_id, self.new_id("ms_"), payload, work_key, deadline_ms).reply)

    def submit(
        self,
        mailbox_id: str,
        scope_id: str,
        key: str,
        task_input: Any = None,
        deadline_ms: int | None = None,
        subscriber: str | None = None,
    ) -> dict:
        return wire.encode(self.do(
            "submit_task",
            self.new_id("tk_"),
            self.new_id("ms_"),
            scope_id,
            mailbox_id,
            key,
            task_input,
            deadline_ms,
            subscriber,
        ).reply)

    def recv(self, mailbox_id: str, scope_id: str, lease_s: int = 30, holder: str = "w1") -> dict | None:
        outcome = self.do("receive", mailbox_id, scope_id, holder, "s-" + holder, lease_s * 1000, self.new_id("dt_"))
        return None if outcome.empty else wire.encode(outcome.reply)

    def requeue(self, mailbox_id: str, **fields: Any) -> dict:
        """Requeue dead letters (`fields` as `RequeueDeadLetters` names them: message_ids, reason...)."""
        return wire.encode(self.do("requeue_dead_letters", mailbox_id, self.new_id("ms_"), fields).reply)

    def delete(self, mailbox_id: str, **fields: Any) -> dict:
        return wire.encode(self.do("delete_dead_letters", mailbox_id, fields).reply)

    def purge(self, mailbox_id: str, **fields: Any) -> dict:
        return wire.encode(self.do("purge_mailbox", mailbox_id, fields).reply)

    def fire(self, timer_tag: tuple, marker: Any = None, actor: tuple | None = None) -> Outcome:
        """Run the newest timer with this tag (as the supervisor would), at the current time."""
        if actor is None:
            matching = [t for t in self.timers if t.tag == timer_tag]
            assert matching, f"no timer {timer_tag}"
            timer = matching[-1]
            actor, marker = timer.actor, timer.marker
        return self.do("on_timer", actor, timer_tag, marker)

    def task(self, task_id: str) -> dict:
        return wire.encode(self.space.tasks.view(self.space.tasks.get(task_id), self.now))

    def message(self, message_id: str) -> dict:
        message = self.space.messages.get(message_id)
        return {**wire.encode(self.space.messages.view(message)), "payload": message.payload}

    def replayed(self) -> SpaceState:
        fresh = SpaceState(SPACE, self.limits)
        for record in self.records:
            fresh.apply(record)
        return fresh

    def assert_replay_matches(self) -> None:
        assert snapshot(self.replayed(), self.now) == snapshot(self.space, self.now)


def snapshot(space: SpaceState, now_ms: int) -> dict:
    """Everything a space holds about mailboxes, messages and tasks, internals included."""
    messages = {}
    for message in space.messages.all():
        messages[message.id] = {
            slot: getattr(message, slot) for slot in type(message).__slots__
        }
    tasks = {}
    for task in space.tasks.all():
        tasks[task.id] = {slot: getattr(task, slot) for slot in type(task).__slots__}
        tasks[task.id]["subscribers"] = dict(task.subscribers)
    mailboxes = {m.id: space.mailboxes.view(m) for m in space.mailboxes.all()}  # (typed views compare by value)
    return {
        "mailboxes": mailboxes,
        "messages": messages,
        "tasks": tasks,
        "seq": space.messages.seq,
        "live": sorted(m.id for m in space.messages.live()),
        "timers": sorted((t.due_ms, t.actor, t.tag, str(t.marker)) for t in space.timers()),
    }


def recount(space: SpaceState) -> dict:
    """The mailbox counts recomputed from the messages (they must equal the kept ones, as
    `MailboxCountsView._asdict()` gives them)."""
    counts: dict[str, dict[str, int]] = {
        m.id: {"queued": 0, "delayed": 0, "leased": 0, "dead_letters": 0} for m in space.mailboxes.all()
    }
    names = {"QUEUED": "queued", "DELAYED": "delayed", "LEASED": "leased", "DEAD": "dead_letters"}
    for message in space.messages.all():
        if message.state in names:
            counts[message.mailbox_id][names[message.state]] += 1
    return counts


class _OneSpace:
    """What a transition reads of a kernel state, for a world of one space."""

    def __init__(self, space: SpaceState) -> None:
        self._space = space

    def space(self, space_id: str) -> SpaceState:
        assert space_id == SPACE
        return self._space


# The world's commands by what they do, with their arguments in order.
_COMMANDS: dict[str, Any] = {
    "create_scope": lambda scope_id, name, parent_id, deadline_ms, child_limit: c.CreateScope(
        space=SPACE, scope_id=scope_id, name=name, parent_id=parent_id, deadline_ms=deadline_ms, child_limit=child_limit
    ),
    "end_scope": lambda scope_id, end: (c.CancelScope if end == "CANCELLED" else c.CompleteScope)(space=SPACE, scope_id=scope_id),
    "create_mailbox": lambda mailbox_id, name, mode, backlog_limit, max_attempts: c.CreateMailbox(
        space=SPACE, mailbox_id=mailbox_id, name=name, mode=mode, backlog_limit=backlog_limit, max_attempts=max_attempts
    ),
    "send_message": lambda mailbox_id, scope_id, message_id, payload, work_key, deadline_ms: c.SendMessage(
        space=SPACE, mailbox_id=mailbox_id, scope_id=scope_id, message_id=message_id, payload=payload,
        work_key=work_key, deadline_ms=deadline_ms,
    ),
    "submit_task": lambda task_id, message_id, scope_id, mailbox_id, key, task_input, deadline_ms, subscriber: c.SubmitTask(
        space=SPACE, task_id=task_id, message_id=message_id, scope_id=scope_id, mailbox_id=mailbox_id, key=key,
        task_input=task_input, deadline_ms=deadline_ms, subscriber_id=subscriber,
    ),
    "receive": lambda mailbox_id, scope_id, holder, session, lease_ms, token: c.Receive(
        space=SPACE, mailbox_id=mailbox_id, scope_id=scope_id, holder=holder, session=session,
        lease_s=lease_ms // 1000, token=token,
    ),
    "cancel_task": lambda task_id, reason: c.CancelTask(space=SPACE, task_id=task_id, reason=reason),
    "join_task": lambda task_id, subscriber_id, scope_id: c.JoinTask(
        space=SPACE, task_id=task_id, subscriber_id=subscriber_id, scope_id=scope_id
    ),
    "detach_task": lambda task_id, subscriber_id: c.DetachTask(space=SPACE, task_id=task_id, subscriber_id=subscriber_id),
    "complete_delivery": lambda message_id, token, result: c.CompleteDelivery(
        space=SPACE, message_id=message_id, token=token, result=result
    ),
    "nack_delivery": lambda message_id, token, retry, error, jitter: c.NackDelivery(
        space=SPACE, message_id=message_id, token=token, retry=retry, error=error, jitter=jitter
    ),
    "return_delivery": lambda message_id, token: c.ReturnDelivery(space=SPACE, message_id=message_id, token=token),
    "renew_delivery": lambda message_id, token, lease_ms: c.RenewDelivery(
        space=SPACE, message_id=message_id, token=token, lease_s=None if lease_ms is None else lease_ms // 1000
    ),
    "on_timer": lambda actor, tag, marker: c.FireTimer(on=actor, tag=_timer_tag(actor, tag), marker=marker),
    # An operator's actions on dead letters: (mailbox, id base, fields of the body by attribute).
    "requeue_dead_letters": lambda mailbox_id, id_base, fields: c.RequeueDeadLetters(
        space=SPACE, mailbox_id=mailbox_id, id_base=id_base, **fields
    ),
    "delete_dead_letters": lambda mailbox_id, fields: c.DeleteDeadLetters(space=SPACE, mailbox_id=mailbox_id, **fields),
    "purge_mailbox": lambda mailbox_id, fields: c.PurgeMailbox(space=SPACE, mailbox_id=mailbox_id, **fields),
}


def _timer_tag(actor: tuple, tag: Any) -> tuple:
    """A timer's tag, also as tests wrote a scope's deadline: ("scope", space, id) with "deadline"."""
    if isinstance(tag, tuple):
        return tag
    assert actor[0] == "scope" and tag == "deadline", (actor, tag)
    return ("scope-deadline", actor[2])
