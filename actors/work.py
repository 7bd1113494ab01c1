"""The queues of a space: the part every queue's command runs on, and the messages, declared.

`WorkCommands` is one part of a `SpaceState`: it is given the tables it uses (the scope tree, and
`mailboxes.py`, `messages.py`, `tasks.py`) and the space's `commit`, and nothing else. It holds what
the queue's primitives share: the checks a new message or task passes (deadline, backlog, the
space's caps), what ends a delivery that did not complete (`release`), the timers of a message, and
what a scope's end does to the queues of its subtree. The primitives on it declare themselves:
the messages here (`MESSAGES`: send, a backoff's end, a deadline), the deliveries
(`deliveries.py`: receive, renew, complete, nack, a lost lease), the tasks (`task_commands.py`),
an operator's actions on dead letters and purges (`dead_letters.py`), the mailboxes
(`mailboxes.py`).

A scope's end ends what waits in its subtree (the cascade applied with `scope.ended`) and, in the
same turn, the deliveries under way there (`deliveries.end_in_flight`, explicit records): their
tasks are CANCELLED with the scope's reason, so a worker's later renewal or settlement of one is
refused with SCOPE_CANCELLED (the code that stops a worker), and no result is recorded in a run
that has ended.

Everything that touches one queue runs in that queue's actor, `("queue", space, mailbox_id,
scope_id)`: send, submit, recv (and its parked long polls), complete, nack, renew, cancel, join and
detach of its tasks, and every timer of its messages and tasks. So a parked recv is answered in
the same turn that made a message deliverable, without polling, and two deliveries of one message
can never be decided at once.

Timers (tags on the queue actor, each proposing a change the turn checks again):
    ("visible", message_id)   marker gen    a retry backoff ended: wake parked receivers
    ("deadline", message_id)  -             a plain message's deadline: drop it if not delivered
(and `deliveries.py`'s lease, `task_commands.py`'s deadline and retention, on the same actor).

Pure: no IO, no clock reads, no awaits.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator, NamedTuple

from .actor_keys import ActorKey, queue_actor
from .caps import RETRY_AFTER_S, full, value_bytes
from .deliveries import HANDLER_ERROR, LEASE_TIMER, decide_dead, decide_requeue, outcome_of
from .errors import BACKLOG_FULL, DEADLINE_EXCEEDED, IDEMPOTENCY_CONFLICT, KernelError, quote
from .fields import JSON, TIMESTAMP, body, drawn, path
from .limits import Limits
from .mailboxes import Mailbox, MailboxTable
from .messages import (
    DELAYED, LEASED, MESSAGE_DROPPED, MESSAGE_IMAGE, MESSAGE_SENT, MESSAGE_VISIBLE, MESSAGES_IMAGE, QUEUED, RETURNED,
    WORKKEY_IMAGE, Message, MessageState, MessageTable, backoff_ms,
)
from .outcome import Outcome, Timer, Space, State, TimerMarker
from .primitive import NOT_COUNTED, Command, Primitive, command, event, operation, timer_kind
from .scopes import ACTIVE, SCOPE_END_REASONS, ScopeTree
from .task_commands import REASON_DEADLINE, task_timers
from .tasks import CANCELLED, EXPIRED, Task, TaskTable, input_hash
from .shapes import Record, View

__all__ = ["WorkCommands", "MESSAGES", "SendMessage", "SentView", "outcome_of", "queue_actor"]

VISIBLE_TIMER = timer_kind("visible")
DEADLINE_TIMER = timer_kind("deadline")


class WorkCommands:
    __slots__ = ("id", "limits", "scopes", "mailboxes", "messages", "tasks", "_commit", "needs_admission", "check_bytes", "check_entities")

    def __init__(
        self,
        space_id: str,
        limits: Limits,
        scopes: ScopeTree,
        mailboxes: MailboxTable,
        messages: MessageTable,
        tasks: TaskTable,
        commit: Callable[..., Outcome],
    ) -> None:
        self.id = space_id
        self.limits = limits
        self.scopes = scopes
        self.mailboxes = mailboxes
        self.messages = messages
        self.tasks = tasks
        self._commit = commit
        # Whether a task waits for admission (it has requirements), never for recv (`capacity.py` sets it).
        self.needs_admission: Callable[[str], bool] = lambda task_id: False
        # The space's payload cap (`caps.check_bytes` over all its tables): (adding, freeing) -> None.
        self.check_bytes: Callable[[int, int], None] = lambda adding, freeing: None
        # The space's cap on the entities it keeps (`caps.py`): adding -> None.
        self.check_entities: Callable[[int], None] = lambda adding: None

    # -- checks ---------------------------------------------------------------------------------

    @staticmethod
    def check_deadline(deadline_ms: int | None, now_ms: int) -> None:
        if deadline_ms is not None and deadline_ms <= now_ms:
            raise KernelError(DEADLINE_EXCEEDED, "the deadline has already passed")

    def check_backlog(self, mailbox: Any) -> None:
        """A mailbox holds at most its own backlogLimit, and never more than `backlog_limit_max`
        (a limit set before the setting was lowered is held to the setting)."""
        cap = self.limits.backlog_limit_max
        backlog = mailbox.backlog
        if mailbox.backlog_limit is not None and mailbox.backlog_limit < cap:
            if backlog >= mailbox.backlog_limit:
                raise KernelError(
                    BACKLOG_FULL,
                    f"mailbox {quote(mailbox.name)} holds {backlog} unsettled messages, its backlogLimit",
                    retry_after_s=RETRY_AFTER_S,
                )
        elif backlog >= cap:
            raise full(f"mailbox {quote(mailbox.name)} holds {backlog} unsettled messages", "backlog_limit_max")

    def backlog_room(self, mailbox: Mailbox) -> int:
        """How many more unsettled messages the mailbox takes (see `check_backlog`)."""
        cap = self.limits.backlog_limit_max
        if mailbox.backlog_limit is not None and mailbox.backlog_limit < cap:
            cap = mailbox.backlog_limit
        return max(0, cap - mailbox.backlog)

    # -- what ends a delivery that did not complete ---------------------------------------------

    def release(self, message: Message, cause: str, error: str | None, jitter: float, now_ms: int) -> Record:
        """What ends a delivery that did not complete (a retry, a lease that ran out, or a delivery
        its holder returned unhandled: cause `RETURNED`).

        In order: a scope that ended cancels the task (nobody may receive there again); a deadline
        that passed expires it; a mailbox whose attempts are used up dead-letters it (FAILED; a
        returned delivery is not an attempt, and deliveries returned before do not count);
        otherwise it goes back on the queue, at once for a lost lease or a return, after a backoff
        for a retry.
        """
        assert message.state == LEASED, "only a delivery under way is released"
        scope_state = self.scopes.effective(self.scopes.get(message.scope_id), now_ms)
        task = None if message.task_id is None else self.tasks.get(message.task_id)
        if scope_state != ACTIVE:
            reason = SCOPE_END_REASONS[scope_state]
            return self._end_undelivered(message, task, CANCELLED, reason, now_ms)
        if message.past_deadline(now_ms):
            return self._end_undelivered(message, task, EXPIRED, REASON_DEADLINE, now_ms)
        max_attempts = self.mailboxes.get(message.mailbox_id).max_attempts
        counted = message.counted_attempts()
        if cause != RETURNED and counted >= max_attempts:
            if error:  # the last attempt's own error says why, and the count follows it
                reason = f"{HANDLER_ERROR}{error} (attempts_exhausted: {counted} of {max_attempts} attempts used)"
            else:
                last = "asked for a retry" if cause == "retry" else "let its lease run out"
                reason = f"attempts_exhausted: {counted} of {max_attempts} attempts used; the last one {last}"
            return decide_dead(message, "attempts", reason, now_ms)
        assert cause == RETURNED or counted < max_attempts, "a requeued delivery has attempts left"
        visible_ms = now_ms + backoff_ms(self.limits, counted, jitter) if cause == "retry" else now_ms
        assert visible_ms >= now_ms, "a requeued message is never visible before now"
        return decide_requeue(message, cause, visible_ms, now_ms)

    def _end_undelivered(self, message: Message, task: Task | None, state: str, reason: str, now_ms: int) -> Record:
        if task is None:
            return self.messages.decide_drop(message, reason, now_ms)
        record = self.tasks.decide_end(task, state, reason, now_ms)
        assert record is not None
        return record

    # -- timers ---------------------------------------------------------------------------------

    def timer_commit(self, record: Record | None, message: Message | None, task: Task | None) -> Outcome:
        """Commit what a timer proposed, with the timers the message and its task need next."""
        if record is None:
            return Outcome()
        outcome = self._commit(Outcome(), record)
        if message is not None:
            outcome.timers.extend(self.message_timers(message))
            if message.task_id is not None:
                task = self.tasks.get(message.task_id)
        if task is not None:
            outcome.timers.extend(task_timers(self.id, self.tasks, task))
        return outcome

    def message_timers(self, message: Message) -> Iterator[Timer]:
        actor = queue_actor(self.id, message.mailbox_id, message.scope_id)
        if message.state == LEASED:
            yield Timer(message.expires_ms, actor, (LEASE_TIMER, message.id), message.token)
        elif message.state == DELAYED:
            yield Timer(message.visible_ms, actor, (VISIBLE_TIMER, message.id), message.gen)
        if message.task_id is None and message.deadline_ms is not None and message.state in (QUEUED, DELAYED):
            yield Timer(message.deadline_ms, actor, (DEADLINE_TIMER, message.id), None)

    def task_timers(self, task: Task) -> Iterator[Timer]:
        return task_timers(self.id, self.tasks, task)

    def on_visible_timer(self, message_id: str, gen: Any, now_ms: int) -> Outcome:
        """A retry's backoff ended: the message is deliverable again (parked receivers wake)."""
        message = self.messages.find(message_id)
        if message is None or message.gen != gen:
            return Outcome()
        return self.timer_commit(self.messages.decide_visible(message, now_ms), message, None)

    def on_deadline_timer(self, message_id: str, _: TimerMarker, now_ms: int) -> Outcome:
        """A plain message's deadline passed before it was delivered: drop it."""
        message = self.messages.find(message_id)
        if message is None or message.state not in (QUEUED, DELAYED) or not message.past_deadline(now_ms):
            return Outcome()
        return self.timer_commit(self.messages.decide_drop(message, REASON_DEADLINE, now_ms), message, None)

    # -- the scope cascade ----------------------------------------------------------------------

    def queue_actors(self, scope_ids: list[str]) -> list[ActorKey]:
        """Every queue actor of these scopes, so parked receivers there hear that the scope ended.

        All mailboxes, not only those with messages: a receiver may be parked on an empty queue.
        """
        return [queue_actor(self.id, mailbox.id, scope_id) for scope_id in scope_ids for mailbox in self.mailboxes.all()]

    def cascade_scope_ended(self, scope_ids: list[str], end_state: str, at_ms: int) -> None:
        """Applied with `scope.ended`: what waits in the subtree ends with it.

        Queued tasks become CANCELLED (reason `scope_cancelled`, or `scope_completed` /
        `scope_expired`), plain messages are dropped. Deliveries under way are ended by explicit
        records in the same turn (`deliveries.end_in_flight`); a journal written before those
        records were made replays as it did then: its later settlements are in it.
        """
        reason = SCOPE_END_REASONS[end_state]
        for message in self.messages.waiting_in_scopes(scope_ids):
            if message.task_id is not None:
                self.tasks.apply_ended(message.task_id, CANCELLED, None, reason, at_ms)
            self.messages.apply_finished(message.id, "DROPPED", reason, at_ms)


# -- sending -----------------------------------------------------------------------------------


@command
class SendMessage(Command):
    """A plain message; with a `workKey`, one message per key and payload for the key's window."""

    space: str = path("space")
    mailbox_id: str = path("mailbox_id")
    scope_id: str = body("scopeId")
    payload: Any = body("payload", JSON, required=False)
    work_key: str | None = body("workKey", required=False, length_max="work_key_len_max")
    deadline_ms: int | None = body("deadline", TIMESTAMP, required=False)
    message_id: str = drawn("ms_")

    def actor(self, state: State) -> ActorKey:
        return queue_actor(self.space, self.mailbox_id, self.scope_id)


def send(work: WorkCommands, command: SendMessage, now_ms: int) -> Outcome:
    """Put a plain message on the queue, or return the one its work key already sent."""
    mailbox_id, scope_id, message_id = command.mailbox_id, command.scope_id, command.message_id
    payload, work_key, deadline_ms = command.payload, command.work_key, command.deadline_ms
    payload_hash = None if work_key is None else input_hash(payload)
    messages = work.messages
    mailbox = work.mailboxes.get(mailbox_id)
    work.scopes.require_active(scope_id, now_ms)
    if work_key is not None:
        assert payload_hash is not None
        entry = messages.work_key(mailbox_id, scope_id, work_key, now_ms)
        if entry is not None:
            if entry.payload_hash != payload_hash:
                raise KernelError(
                    IDEMPOTENCY_CONFLICT,
                    f"workKey {quote(work_key)} was already sent with a different payload (message {entry.message_id})",
                )
            return Outcome(reply=_sent_view(messages, entry.message_id, mailbox_id, scope_id, work_key, replay=True))
    work.check_deadline(deadline_ms, now_ms)
    work.check_backlog(mailbox)
    work.check_bytes(value_bytes(payload), 0)
    work.check_entities(1)
    messages.check_new_id(message_id)
    record = {
        "type": MESSAGE_SENT,
        "id": message_id,
        "mailbox_id": mailbox_id,
        "scope_id": scope_id,
        "payload": payload,
        "payload_hash": payload_hash if work_key is not None else None,
        "work_key": work_key,
        "deadline_ms": deadline_ms,
        "at_ms": now_ms,
    }
    outcome = work._commit(Outcome(), record)
    message = messages.get(message_id)
    outcome.timers.extend(work.message_timers(message))
    outcome.reply = _sent_view(messages, message_id, mailbox_id, scope_id, work_key, replay=False)
    return outcome


class SentView(NamedTuple):
    """What a send answers: the message's id, where it went, its work key, its state now (None
    once it is no longer kept), and whether this send was a `replay` of the work key's earlier one
    (`deduplicated` says the same, under the name 0.3.0 reads)."""

    id: str
    mailbox_id: str
    scope_id: str
    work_key: str | None
    state: MessageState | None
    replay: bool
    deduplicated: bool


def _sent_view(messages: MessageTable, message_id: str, mailbox_id: str, scope_id: str, work_key: str | None, *, replay: bool) -> SentView:
    message = messages.find(message_id)
    assert message is not None or replay, "a message sent now is kept"
    return SentView(message_id, mailbox_id, scope_id, work_key, None if message is None else message.state, replay, replay)


# -- applying ----------------------------------------------------------------------------------


def _apply_sent(messages: MessageTable, record: Record) -> None:
    messages.apply_enqueued(
        record["id"], record["mailbox_id"], record["scope_id"], record["payload"], record["payload_hash"],
        record["work_key"], record["deadline_ms"], None, record["at_ms"],
    )


def _apply_dropped(messages: MessageTable, record: Record) -> None:
    messages.apply_finished(record["message_id"], "DROPPED", record["reason"], record["at_ms"])


def _deadlines(space: Space) -> Iterator[Timer]:
    work = space.work
    for message in space.messages.live():
        yield from work.message_timers(message)


def _scope_ending(space: Space, subtree: list[str]) -> Callable[[Outcome, int], None]:
    """Receivers parked on the subtree's queues hear that the scope ended."""
    return lambda outcome, at_ms: outcome.pokes.extend(space.work.queue_actors(subtree))


def _make(space: Space) -> None:
    space.messages = MessageTable(space.limits, space.mailboxes)
    work = space.work = WorkCommands(space.id, space.limits, space.scopes, space.mailboxes, space.messages, space.tasks, space.commit)
    work.check_bytes = space.check_bytes
    work.check_entities = space.check_entities


MESSAGES = Primitive(
    "messages",
    make=_make,
    state=("messages",),
    parts=("work",),
    commands={SendMessage: ("work", send)},
    records={
        MESSAGE_SENT: ("id", "mailbox_id", "scope_id", "payload", "payload_hash", "work_key", "deadline_ms", "at_ms"),
        MESSAGE_VISIBLE: ("message_id", "gen", "at_ms"),
        MESSAGE_DROPPED: ("message_id", "reason", "at_ms"),
        # Images: the enqueue counter, a message as it stands (its slots, `messages._IMAGED`), a work key.
        MESSAGES_IMAGE: ("seq",),
        MESSAGE_IMAGE: (
            "id", "mailbox_id", "scope_id", "seq", "payload", "payload_hash", "work_key", "deadline_ms", "task_id", "state",
            "attempts", "gen", "visible_ms", "token", "holder", "session", "lease_ms", "expires_ms", "created_ms",
            "finished_ms", "reason", "at_ms", "graced?", "returned?",
        ),
        WORKKEY_IMAGE: ("mailbox_id", "scope_id", "work_key", "message_id", "payload_hash", "at_ms"),
    },
    apply={
        MESSAGE_SENT: ("messages", _apply_sent),
        MESSAGE_VISIBLE: ("messages", "apply_visible"),
        MESSAGE_DROPPED: ("messages", _apply_dropped),
        MESSAGES_IMAGE: ("messages", "apply_image_counter"),
        MESSAGE_IMAGE: ("messages", "apply_image_message"),
        WORKKEY_IMAGE: ("messages", "apply_image_work_key"),
    },
    usage={
        MESSAGE_SENT: operation("messages.send"),
        MESSAGE_VISIBLE: event("messages.backoff_over"),
        MESSAGE_DROPPED: event("messages.drop"),
        MESSAGES_IMAGE: NOT_COUNTED,
        MESSAGE_IMAGE: NOT_COUNTED,
        WORKKEY_IMAGE: NOT_COUNTED,
    },
    timers={VISIBLE_TIMER: ("work", WorkCommands.on_visible_timer), DEADLINE_TIMER: ("work", WorkCommands.on_deadline_timer)},
    derive={MESSAGE_SENT: lambda space, r: ("message.sent", r["scope_id"], "message", r["id"], (r["mailbox_id"],))},
    events={"message.sent": ("mailboxId",)},
    deadlines=_deadlines,
    image=lambda space: space.messages.image(),
    is_empty=lambda space: not len(space.messages),
    entities=lambda space: len(space.messages),
    values_bytes=lambda space: space.messages.payload_bytes,
    scope_ended=lambda space, subtree, state, at_ms: space.work.cascade_scope_ended(subtree, state, at_ms),
    scope_ending=_scope_ending,
    scopes_kept=lambda space, scope_ids: space.messages.live_scopes(scope_ids),
    scopes_removed=lambda space, scope_ids: space.messages.drop_scopes(scope_ids),
)
