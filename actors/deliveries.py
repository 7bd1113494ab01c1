"""Deliveries, declared: receive a message under a lease, renew it, complete, nack or return it, and a lost lease.

A delivery is a message's lease (`leases.py`: the token, holder, session, length, end and grace
every lease carries) while its worker handles it; the message's table is `messages.py`, the queue
part these run on is `work.py`. Receive leases the oldest deliverable message of exactly one queue
(`ReceiveMany`: up to a count, in one turn); complete, nack and renew must carry the current token
while the lease runs (else STALE_CLAIM, or SCOPE_CANCELLED when the delivery ended with its run). A
lease that runs out requeues the message at once, or ends it (`WorkCommands.release`). Return
(our extension: the official clients only nack) gives a delivery its holder never handed to a
handler back at once, its attempt not counted against the mailbox's `maxAttempts`: a worker
cancelled as it received, or stopping with work taken ahead, must not dead-letter a message that
no handler ever saw. A task's
delivery moves its task: RUNNING when leased, QUEUED when requeued, SUCCEEDED or FAILED when settled.

Timers (on the queue's actor):
    ("lease", message_id)   marker token   a lease ran out: requeue at once, or end the message

Pure: no IO, no clock reads, no awaits.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable, NamedTuple

from .actor_keys import ActorKey, queue_actor
from .budgets import ACTIVE as RESERVATION_ACTIVE
from .caps import value_bytes
from .errors import SCOPE_CANCELLED, KernelError
from .fields import BOOLEAN, INTEGER, JSON, body, drawn, path
from .leases import LeaseKind, renewal
from .messages import (
    DELAYED, DELIVERY_COMPLETED, DELIVERY_DEAD, DELIVERY_LEASED, DELIVERY_RENEWED, DELIVERY_REQUEUED, LEASED, RETURNED,
    Message, MessageState, MessageTable,
)
from .events import Change
from .outcome import Outcome, Space, Timer, State
from .quotas import refund_if_kept
from .primitive import EVENT, FREE_OPERATION, OPERATION, Command, Primitive, command, lease_field, operation, reason_field, timer_kind
from .scopes import ACTIVE, SCOPE_END_REASONS
from .task_commands import task_timers
from .tasks import FAILED, SUCCEEDED, TaskState
from .shapes import DurationMs, EpochMs, Json, Record

__all__ = [
    "Receive", "ReceiveMany", "CompleteDelivery", "NackDelivery", "ReturnDelivery", "RenewDelivery", "DELIVERIES", "outcome_of",
    "decide_lease", "decide_requeue", "decide_dead", "delivery_view", "HANDLER_ERROR", "LEASE_TIMER", "DELIVERY_LEASE",
    "DeliveredMessage", "DeliveryView", "DeliveriesView", "RenewedDeliveryView", "SettledView", "DelayedSettledView",
    "TaskSettledView", "DelayedTaskSettledView",
]

LEASE_TIMER = timer_kind("lease")
DELIVERY_LEASE = "delivery"  # the kind of lease a delivery is held under, in the lease table
# A nack's `error` (what the handler raised), as the reason of the task it ends.
HANDLER_ERROR = "handler_error: "
_SCOPE_ENDED = frozenset(SCOPE_END_REASONS.values())


def outcome_of(result: Any) -> Any:
    """A task's outcome from a delivery's `result`: the value of 0.3.0's wrapper, a result whose
    one field is `payload`, else all of it (a 0.2.0 result with `payload` among other fields is
    kept whole)."""
    if isinstance(result, dict) and len(result) == 1 and "payload" in result:
        return result["payload"]
    return result


# -- the records of a delivery ---------------------------------------------------------------------


def decide_lease(message: Message, token: str, holder: str, session: str, lease_ms: int, now_ms: int) -> Record:
    assert lease_ms > 0 and token, "a delivery is held under a lease, with its own token"
    return {
        "type": DELIVERY_LEASED,
        "message_id": message.id,
        "token": token,
        "attempt": message.attempts + 1,
        "holder": holder,
        "session": session,
        "lease_ms": lease_ms,
        "expires_ms": now_ms + lease_ms,
        "at_ms": now_ms,
    }


def decide_renew(message: Message, lease_ms: int | None, now_ms: int) -> Record:
    """The renewal rule (`leases.renewal`) for the delivery `message` is under."""
    assert message.state == LEASED and message.token is not None, "only a delivery under way is renewed"
    return renewed_record(message, *renewal(message, lease_ms, now_ms), now_ms)


def renewed_record(message: Message, lease_ms: int, expires_ms: int, now_ms: int) -> Record:
    return {
        "type": DELIVERY_RENEWED, "message_id": message.id, "token": message.token, "lease_ms": lease_ms,
        "expires_ms": expires_ms, "at_ms": now_ms,
    }


def decide_complete(message: Message, outcome: Any, now_ms: int, keep_input: bool = False) -> Record:
    # Paired with `MessageTable.apply_finished` (a message finishes once) and the task's one outcome.
    assert message.state == LEASED and now_ms < message.expires_ms, "a delivery completes under its running lease"
    assert not keep_input or message.task_id is not None, "only a task keeps its input"
    record = {"type": DELIVERY_COMPLETED, "message_id": message.id, "token": message.token, "at_ms": now_ms}
    if message.task_id is not None:  # a plain message's result is not kept
        record["outcome"] = outcome
    if keep_input:  # (absent: let go, as every completion did before inputs were kept)
        record["input_kept"] = True
    return record


def decide_requeue(message: Message, cause: str, visible_ms: int, now_ms: int) -> Record:
    assert message.state == LEASED and visible_ms >= now_ms, "a delivery under way goes back, visible now or later"
    return {
        "type": DELIVERY_REQUEUED, "message_id": message.id, "token": message.token, "cause": cause,
        "visible_ms": visible_ms, "at_ms": now_ms,
    }


def decide_dead(message: Message, cause: str, reason: str, now_ms: int) -> Record:
    assert message.state == LEASED and reason, "a delivery under way dies with a reason"
    return {
        "type": DELIVERY_DEAD, "message_id": message.id, "token": message.token, "cause": cause, "reason": reason,
        "at_ms": now_ms,
    }


# A delivery's answers are named tuples: one allocation each, on the path of every receive and every
# settle (see `claims.py`). The variants of a settle's answer repeat `SettledView`'s fields first.


class DeliveredMessage(NamedTuple):
    """The message a delivery hands over: its payload, which attempt this is, its work key, its
    deadline, and the task it carries (or None)."""

    id: str
    mailbox_id: str
    scope_id: str
    payload: Json
    attempt: int
    work_key: str | None
    deadline_ms: EpochMs | None
    task_id: str | None


class DeliveryView(NamedTuple):
    """What a receive answers: the message, the lease's token, its end and its length."""

    message: DeliveredMessage
    token: str
    expires_ms: EpochMs
    lease_ms: DurationMs


class DeliveriesView(NamedTuple):
    """What a receive of many answers: the deliveries, oldest first."""

    deliveries: tuple[DeliveryView, ...]


class RenewedDeliveryView(NamedTuple):
    """What a renew answers: the lease's new end and length, and the attempt it belongs to."""

    id: str
    expires_ms: EpochMs
    lease_ms: DurationMs
    attempt: int


class SettledView(NamedTuple):
    """What a complete or a nack answers: where the message is now and the task it carries."""

    id: str
    state: MessageState
    attempt: int
    task_id: str | None


class DelayedSettledView(NamedTuple):
    """A retried message's settle, DELAYED: as `SettledView`, then when it is visible again."""

    id: str
    state: MessageState
    attempt: int
    task_id: str | None
    visible_ms: EpochMs


class TaskSettledView(NamedTuple):
    """A task's delivery settled: as `SettledView`, then the task's state."""

    id: str
    state: MessageState
    attempt: int
    task_id: str | None
    task_state: TaskState


class DelayedTaskSettledView(NamedTuple):
    """A task's delivery retried: as `DelayedSettledView`, then the task's state."""

    id: str
    state: MessageState
    attempt: int
    task_id: str | None
    visible_ms: EpochMs
    task_state: TaskState


def delivery_view(message: Message) -> DeliveryView:
    """What recv answers."""
    assert message.state == LEASED and message.token is not None, "a delivery is a leased message"
    delivered = DeliveredMessage(
        message.id, message.mailbox_id, message.scope_id, message.payload, message.attempts, message.work_key,
        message.deadline_ms, message.task_id,
    )
    return DeliveryView(delivered, message.token, message.expires_ms, message.lease_ms)


# -- commands ----------------------------------------------------------------------------------


def _message_queue(state: State, space: str, message_id: str) -> ActorKey:
    message = state.space(space).messages.get(message_id)
    return queue_actor(space, message.mailbox_id, message.scope_id)


@command
class Receive(Command):
    """Lease the oldest deliverable message; a long poll waits up to `wait_ms` (capped)."""

    space: str = path("space")
    mailbox_id: str = path("mailbox_id")
    scope_id: str = body("scopeId")
    holder: str = body("holder", length_max="holder_len_max")
    session: str = body("holderSession", length_max="holder_len_max")
    lease_s: int = lease_field(default="lease_s_default")
    wait_ms: int | None = body("waitMs", INTEGER, required=False, minimum=0, description="capped at {wait_ms_max}")
    token: str = drawn("delivery-token")

    def actor(self, state: State) -> ActorKey:
        return queue_actor(self.space, self.mailbox_id, self.scope_id)

    def wait_key(self) -> Any:
        # A parked receive waits for a deliverable message of its queue, whoever asks.
        return ("receive", self.mailbox_id, self.scope_id)


@command
class ReceiveMany(Receive):
    """Lease up to `count` deliverable messages, oldest first, in one turn (a worker's prefetch);
    a long poll waits up to `wait_ms` for the first. Delivery i's token is the drawn one with `.i`
    after it, so each is distinct and as hard to guess."""

    count: int = body("maxMessages", INTEGER, minimum=1, maximum="receive_count_max", description="at most {receive_count_max}")


@command
class CompleteDelivery(Command):
    space: str = path("space")
    message_id: str = path("message_id")
    token: str = body("token")
    result: Any = body("result", JSON, required=False)

    def actor(self, state: State) -> ActorKey:
        return _message_queue(state, self.space, self.message_id)


@command
class NackDelivery(Command):
    """`retry`: back on the queue after a backoff (its jitter drawn here). Else a dead letter."""

    space: str = path("space")
    message_id: str = path("message_id")
    token: str = body("token")
    retry: bool = body("retry", BOOLEAN)
    error: str | None = reason_field("error")
    jitter: float = drawn("jitter")

    def actor(self, state: State) -> ActorKey:
        return _message_queue(state, self.space, self.message_id)


@command
class ReturnDelivery(Command):
    """Give a delivery back unhandled: on the queue again at once, its attempt not counted."""

    space: str = path("space")
    message_id: str = path("message_id")
    token: str = body("token")

    def actor(self, state: State) -> ActorKey:
        return _message_queue(state, self.space, self.message_id)


@command
class RenewDelivery(Command):
    space: str = path("space")
    message_id: str = path("message_id")
    token: str = body("token")
    lease_s: int | None = lease_field()

    def actor(self, state: State) -> ActorKey:
        return _message_queue(state, self.space, self.message_id)


# -- transitions (of the space, on the queue part's helpers) ---------------------------------------


def receive(space: Space, command: Receive, now_ms: int) -> Outcome:
    """Lease the oldest deliverable message of this queue; `empty` when there is none.

    An empty outcome writes nothing, so a long poll parks on the queue's actor and is run again by
    the turn that makes a message deliverable (or ends the scope). A task with requirements (its
    own, or its mailbox's) is never received: admission delivers it (`admission.py`).
    """
    work, messages = space.work, space.messages
    mailbox_id, scope_id = command.mailbox_id, command.scope_id
    mailbox = space.mailboxes.get(mailbox_id)
    space.scopes.require_active(scope_id, now_ms)
    defaults = mailbox.requirements is not None  # every task waits for admission
    message = messages.next_deliverable(mailbox_id, scope_id, now_ms)
    if message is not None and message.task_id is not None and (defaults or work.needs_admission(message.task_id)):
        needs = (lambda task_id: True) if defaults else work.needs_admission
        message = next((m for m in messages.deliverable(mailbox_id, scope_id, now_ms) if m.task_id is None or not needs(m.task_id)), None)
    if message is None:
        return Outcome(empty=True)
    record = decide_lease(message, command.token, command.holder, command.session, command.lease_s * 1000, now_ms)
    outcome = space.commit(Outcome(), record)
    outcome.timers.extend(work.message_timers(message))
    outcome.reply = delivery_view(message)
    return outcome


def receive_many(space: Space, command: ReceiveMany, now_ms: int) -> Outcome:
    """Lease up to `command.count` messages as that many receives would, one after the other, in
    this one turn: `{"deliveries": [...]}`, oldest first; `empty` when there is none."""
    deliveries: list[DeliveryView] = []
    outcome = Outcome()
    for index in range(command.count):
        token = command.token if index == 0 else f"{command.token}.{index}"
        one = receive(space, replace(command, token=token), now_ms)
        if one.empty:
            break
        outcome.records.extend(one.records)
        outcome.timers.extend(one.timers)
        outcome.pokes.extend(one.pokes)
        deliveries.append(one.reply)
    if not deliveries:
        return Outcome(empty=True)
    outcome.reply = DeliveriesView(tuple(deliveries))
    return outcome


def _held(space: Space, message_id: str, token: str, now_ms: int) -> Message:
    """The message `token` holds a running lease on (`MessageTable.current`), or SCOPE_CANCELLED
    when it was under way in a scope that has ended since: its task ended with the scope."""
    message = space.messages.get(message_id)
    if (message.state == LEASED and message.token == token) or message.reason in _SCOPE_ENDED:
        state = space.scopes.effective(space.scopes.get(message.scope_id), now_ms)
        if state != ACTIVE:
            raise KernelError(SCOPE_CANCELLED, f"scope {message.scope_id} is {state.lower()}: delivery {message_id} ended with it")
    return space.messages.current(message_id, token, now_ms)


def renew(space: Space, command: RenewDelivery, now_ms: int) -> Outcome:
    lease_ms = None if command.lease_s is None else command.lease_s * 1000
    message = _held(space, command.message_id, command.token, now_ms)
    outcome = space.commit(Outcome(), decide_renew(message, lease_ms, now_ms))
    outcome.timers.extend(space.work.message_timers(message))
    outcome.reply = RenewedDeliveryView(message.id, message.expires_ms, message.lease_ms, message.attempts)
    return outcome


def complete(space: Space, command: CompleteDelivery, now_ms: int) -> Outcome:
    """Settle a delivery as done; a task records its one outcome (SUCCEEDED).

    The task keeps its outcome, and its input beside it (to be read with it) when the space has
    room for both; when it has not, the input is let go, so that a completion whose result is no
    larger than its input still passes in a full space (`caps.check_bytes`)."""
    message = _held(space, command.message_id, command.token, now_ms)
    keep_input = False
    if message.task_id is not None:
        adding = value_bytes(outcome_of(command.result))
        keep_input = message.payload is not None and _has_room(space, adding)
        space.work.check_bytes(adding, 0 if keep_input else value_bytes(message.payload))
    outcome = space.commit(Outcome(), decide_complete(message, outcome_of(command.result), now_ms, keep_input))
    outcome.timers.extend(space.work.message_timers(message))
    return _settled(space, outcome, message)


def _has_room(space: Space, adding: int) -> bool:
    """Whether the space's payload cap takes `adding` bytes more, letting nothing go."""
    try:
        space.work.check_bytes(adding, 0)
    except KernelError:
        return False
    return True


def nack(space: Space, command: NackDelivery, now_ms: int) -> Outcome:
    """`retry`: back on the queue after a backoff (or ended, see `WorkCommands.release`). Else a dead letter."""
    message = _held(space, command.message_id, command.token, now_ms)
    error = command.error
    if command.retry:
        record = space.work.release(message, "retry", error, command.jitter, now_ms)
    else:
        # The handler's own error is the task's reason (the 0.3.0 client shows what follows the prefix).
        reason = "rejected" if not error else f"{HANDLER_ERROR}{error}"
        record = decide_dead(message, "rejected", reason, now_ms)
    outcome = space.commit(Outcome(), record)
    outcome.timers.extend(space.work.message_timers(message))
    return _settled(space, outcome, message)


def return_delivery(space: Space, command: ReturnDelivery, now_ms: int) -> Outcome:
    """Back on the queue at once, in its place, the attempt not counted (or ended, as a retry would
    be, when its run ended or its deadline passed: `WorkCommands.release`). Only the current
    holder's token returns it, and only while it is neither settled nor run out (`_held`)."""
    message = _held(space, command.message_id, command.token, now_ms)
    returned = message.returned
    outcome = Outcome()
    _give_back_admitted(space, outcome, message, now_ms)
    space.commit(outcome, space.work.release(message, RETURNED, None, 1.0, now_ms))
    assert message.state != LEASED and message.returned in (returned, returned + 1), "a return ends the delivery"
    outcome.timers.extend(space.work.message_timers(message))
    return _settled(space, outcome, message)


def _give_back_admitted(space: Space, outcome: Outcome, message: Message, now_ms: int) -> None:
    """Into `outcome`: what the admission of this delivery took beside it (`admission._admitted`,
    whose ids are made from the message and its attempt), given back with a return, since no
    handler used it: its budget reservations still active are voided, its quota consumptions
    refunded where the server still can (`refund_if_kept`). Its pool grants share the delivery's
    lease and end with it. A delivery taken by a receive took nothing beside it."""
    if message.task_id is None:
        return
    part = space.capacity
    needs = part.requirements.get(message.task_id, space.work.mailboxes.get(message.mailbox_id).requirements)
    if needs is None:
        return
    stem = f"{message.id.removeprefix('ms_')}_{message.attempts}"
    for index, (allowance_id, _) in enumerate(needs["quotas"]):
        refund_if_kept(part, outcome, part.allowances.get(allowance_id), f"cs_{stem}_{index}", now_ms)
    for index in range(len(needs["budgets"])):
        reservation = part.budgets.find_reservation(f"rs_{stem}_{index}")
        if reservation is not None and reservation.state == RESERVATION_ACTIVE:
            record = part.budgets.decide_void(reservation, f"returned:{message.id}:{message.attempts}", now_ms)
            if record is not None:
                part.commit(outcome, record)


def _settled(space: Space, outcome: Outcome, message: Message) -> Outcome:
    delayed = message.state == DELAYED
    if message.task_id is None:
        outcome.reply = (
            DelayedSettledView(message.id, message.state, message.attempts, None, message.visible_ms) if delayed
            else SettledView(message.id, message.state, message.attempts, None)
        )
        return outcome
    task = space.tasks.get(message.task_id)
    outcome.timers.extend(task_timers(space.id, space.tasks, task))
    outcome.reply = (
        DelayedTaskSettledView(message.id, message.state, message.attempts, task.id, message.visible_ms, task.state) if delayed
        else TaskSettledView(message.id, message.state, message.attempts, task.id, task.state)
    )
    return outcome


def on_lease_timer(space: Space, message_id: str, token: Any, now_ms: int) -> Outcome:
    """A delivery's lease ran out: requeue it at once, or end its message (`WorkCommands.release`)."""
    message = space.messages.find(message_id)
    if message is None or message.state != LEASED or message.token != token or now_ms < message.expires_ms:
        return Outcome()
    return space.work.timer_commit(space.work.release(message, "expired", None, 1.0, now_ms), message, None)


def _end(space: Space, message: Message, cause: str, now_ms: int, outcome: Outcome) -> None:
    """End a delivery that will not complete now (`WorkCommands.release`), with the timers next."""
    space.commit(outcome, space.work.release(message, cause, None, 1.0, now_ms))
    outcome.timers.extend(space.work.message_timers(message))
    if message.task_id is not None:
        outcome.timers.extend(task_timers(space.id, space.tasks, space.tasks.get(message.task_id)))


def end_in_flight(space: Space, outcome: Outcome, scope_ids: list[str], now_ms: int) -> None:
    """After a scope's end: every delivery under way in its subtree ends now (its task CANCELLED
    with the scope's reason, a plain message dropped), so its worker's renewal or settlement is
    refused with SCOPE_CANCELLED."""
    for message in space.messages.leased_in_scopes(scope_ids):
        _end(space, message, "scope", now_ms, outcome)


def _scope_ending(space: Space, subtree: list[str]) -> Callable[[Outcome, int], None]:
    return lambda outcome, at_ms: end_in_flight(space, outcome, subtree, at_ms)


# -- the lease table (`leases.py`: the restart rule is decided there, for every kind at once) -------


def lease_kind(space: Space) -> LeaseKind:
    """A delivery's lease that ended while the server was down is released as a lost lease would
    be (`WorkCommands.release`: requeued at once, or its message ended)."""
    messages: MessageTable = space.messages
    work = space.work

    def timers(message: Message) -> list[Timer]:
        found = list(work.message_timers(message))
        if message.task_id is not None:
            found.extend(task_timers(space.id, space.tasks, space.tasks.get(message.task_id)))
        return found

    return LeaseKind(
        DELIVERY_LEASE, lambda: [message for message in messages.live() if message.state == LEASED],
        lambda message, now_ms: work.release(message, "expired", None, 1.0, now_ms), renewed_record, space.commit, timers,
    )


# -- applying (a delivery moves its task) ----------------------------------------------------------


def _apply_leased(space: Space, record: Record) -> None:
    message = space.messages.apply_leased(record)
    if message.task_id is not None:
        space.tasks.apply_running(message.task_id, message.attempts, record["at_ms"])


def _apply_requeued(space: Space, record: Record) -> None:
    message = space.messages.apply_requeued(record)
    if message.task_id is not None:
        space.tasks.apply_queued(message.task_id, record["at_ms"])


def _apply_completed(space: Space, record: Record) -> None:
    message = space.messages.apply_finished(record["message_id"], "COMPLETED", None, record["at_ms"], record.get("input_kept", False))
    if message.task_id is not None:
        space.tasks.apply_ended(message.task_id, SUCCEEDED, record.get("outcome"), None, record["at_ms"])


def _apply_dead(space: Space, record: Record) -> None:
    message = space.messages.apply_finished(record["message_id"], "DEAD", record["reason"], record["at_ms"])
    if message.task_id is not None:
        space.tasks.apply_ended(message.task_id, FAILED, None, record["reason"], record["at_ms"])


# -- events: a delivery's, or its task's -----------------------------------------------------------

_PAYLOAD = ("messageId", "mailboxId", "attempt", "holder")


def _event(task_type: str, message_type: str, *extra: str) -> Callable[[Space, Record], Any]:
    """A delivery's event: the message, its attempt and its holder (the one it is leased to, or
    the one whose lease this record ends: what a worker's crash took down), then `extra` fields of
    the record. A task's delivery makes its task's event instead."""

    def derive(space: Space, record: Record) -> Any:
        message = space.messages.find(record["message_id"])
        if message is None:
            return None
        # The delivery's attempt, numbered as the task view and recv number it (1 for the first):
        # a lease is the attempt it starts (its record says which; the message, seen before the
        # record applies, still counts the ones before); any other change is about the current one.
        attempt = record["attempt"] if "attempt" in record else message.attempts
        payload: tuple[Any, ...] = (message.id, message.mailbox_id, attempt, record.get("holder", message.holder))
        if extra:
            payload += tuple(record.get(field) for field in extra)
        if message.task_id is not None:
            return (task_type, message.scope_id, "task", message.task_id, payload)
        return (message_type, message.scope_id, "message", message.id, payload)

    return derive


def _dead_event(space: Space, record: Record) -> list[Change]:
    message = space.messages.find(record["message_id"])
    if message is None:
        return []
    payload = {"messageId": message.id, "mailboxId": message.mailbox_id, "reason": record.get("reason"), "holder": message.holder}
    events: list[Change] = [("delivery.dead_lettered", message.scope_id, "message", message.id, payload)]
    if message.task_id is not None:
        events.insert(0, ("task.failed", message.scope_id, "task", message.task_id, payload))
    return events


def _usage_of_requeue(record: Record) -> tuple[int, str]:
    cause = record.get("cause")
    if cause == RETURNED:
        return (OPERATION, "deliveries.return")
    return (OPERATION, "deliveries.nack") if cause == "retry" else (EVENT, "deliveries.expire")


def _usage_of_dead(record: Record) -> tuple[int, str]:
    return (OPERATION, "deliveries.nack") if record.get("cause") == "rejected" else (EVENT, "deliveries.dead")


DELIVERIES = Primitive(
    "deliveries",
    commands={
        Receive: ("", receive),
        ReceiveMany: ("", receive_many),
        CompleteDelivery: ("", complete),
        NackDelivery: ("", nack),
        ReturnDelivery: ("", return_delivery),
        RenewDelivery: ("", renew),
    },
    records={
        DELIVERY_LEASED: ("message_id", "token", "attempt", "holder", "session", "lease_ms", "expires_ms", "at_ms"),
        DELIVERY_RENEWED: ("message_id", "token", "lease_ms", "expires_ms", "at_ms", "graced?"),
        DELIVERY_REQUEUED: ("message_id", "token", "cause", "visible_ms", "at_ms"),
        # `input_kept`: the task's input is kept with its outcome (`complete`).
        DELIVERY_COMPLETED: ("message_id", "token", "at_ms", "outcome?", "input_kept?"),
        DELIVERY_DEAD: ("message_id", "token", "cause", "reason", "at_ms"),
    },
    apply={
        DELIVERY_LEASED: ("", _apply_leased),
        DELIVERY_RENEWED: ("messages", "apply_renewed"),
        DELIVERY_REQUEUED: ("", _apply_requeued),
        DELIVERY_COMPLETED: ("", _apply_completed),
        DELIVERY_DEAD: ("", _apply_dead),
    },
    usage={
        DELIVERY_LEASED: operation("deliveries.receive"),
        DELIVERY_COMPLETED: operation("deliveries.complete"),
        DELIVERY_RENEWED: (FREE_OPERATION, "deliveries.renew"),
        # Judged by the record alone: a nack that ends its task counts as the event it causes.
        DELIVERY_REQUEUED: _usage_of_requeue,
        DELIVERY_DEAD: _usage_of_dead,
    },
    timers={LEASE_TIMER: ("", on_lease_timer)},
    derive={
        DELIVERY_LEASED: _event("task.started", "delivery.leased"),
        DELIVERY_COMPLETED: _event("task.succeeded", "delivery.completed"),
        DELIVERY_REQUEUED: _event("task.retried", "delivery.requeued", "cause"),
        DELIVERY_DEAD: _dead_event,
    },
    events={
        **dict.fromkeys(("task.started", "delivery.leased", "task.succeeded", "delivery.completed"), _PAYLOAD),
        **dict.fromkeys(("task.retried", "delivery.requeued"), (*_PAYLOAD, "cause")),
        "task.failed": None,
        "delivery.dead_lettered": None,
    },
    leases=lease_kind,
    scope_ending=_scope_ending,
)
