"""Mailboxes, messages and tasks inside a space: the commands, their timers, the cascade.

`WorkCommands` is one part of a `SpaceState`: it is given the tables it uses (the scope tree, and
`mailboxes.py`, `messages.py`, `tasks.py`) and the space's `commit`, and nothing else. Every
command here checks, decides records through the tables, applies them through `commit`, and
returns an `Outcome` with the reply, the records, the timers and the pokes. Effects that cross tables live here: a delivery moves its task, a task's end
drops its message, a scope's end cancels what waits in its subtree.

A scope's end ends what waits in its subtree (the cascade applied with `scope.ended`) and, in the
same turn, the deliveries under way there (`end_in_flight`, explicit records): their tasks are
CANCELLED with the scope's reason, so a worker's later renewal or settlement of one is refused with
SCOPE_CANCELLED (the code that stops a worker), and no result is recorded in a run that has ended.

Everything that touches one queue runs in that queue's actor, `("queue", space, mailbox_id,
scope_id)`: send, submit, recv (and its parked long polls), complete, nack, renew, cancel, join and
detach of its tasks, and every timer of its messages and tasks. So a parked recv is answered in
the same turn that made a message deliverable, without polling, and two deliveries of one message
can never be decided at once.

Timers (tags on the queue actor, each proposing a change the turn checks again; `WORK_TIMERS`
maps each kind to its handler):
    ("lease", message_id)     marker token  a lease ran out: requeue at once, or end the message
    ("visible", message_id)   marker gen    a retry backoff ended: wake parked receivers
    ("deadline", message_id)  -             a plain message's deadline: drop it if not delivered
    ("task-deadline", task_id) -            a task's deadline: EXPIRED if not ended
    ("retention", task_id)    -             a finished task's retention ended: tombstone it

Pure: no IO, no clock reads, no awaits.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any, Callable, Iterator

from . import dead_letters
from .caps import RETRY_AFTER_S, full, value_bytes
from .actor_keys import queue_actor
from .dead_letters import DEAD_LETTERS_DELETED, DEAD_LETTERS_REQUEUED
from .errors import BACKLOG_FULL, DEADLINE_EXCEEDED, IDEMPOTENCY_CONFLICT, SCOPE_CANCELLED, KernelError, quote
from .limits import Limits
from .mailboxes import MailboxTable
from .mailboxes import MAILBOX_CREATED, MAILBOX_DECLARED, MAILBOX_IMAGE, MAILBOX_PURGED
from .messages import DELAYED, LEASED, LIVE, QUEUED, Message, MessageTable, backoff_ms
from .messages import (
    DELIVERY_COMPLETED, DELIVERY_DEAD, DELIVERY_LEASED, DELIVERY_RENEWED, DELIVERY_REQUEUED, MESSAGES_IMAGE,
    MESSAGE_DROPPED, MESSAGE_IMAGE, MESSAGE_SENT, MESSAGE_VISIBLE, WORKKEY_IMAGE,
)
from .leases import LeaseKind
from .outcome import Outcome, Timer
from .scopes import ACTIVE, ScopeTree
from .tasks import CANCELLED, EXPIRED, FAILED, SUCCEEDED, Task, TaskTable, input_hash
from .tasks import TASK_CREATED, TASK_DETACHED, TASK_ENDED, TASK_IMAGE, TASK_JOINED, TASK_TOMBSTONED

if TYPE_CHECKING:
    from .commands import (
        CancelTask, CompleteDelivery, CreateMailbox, DeleteDeadLetters, DetachTask, EnsureMailbox, JoinTask, NackDelivery,
        PurgeMailbox, Receive, ReceiveMany, RenewDelivery, RequeueDeadLetters, SendMessage, SubmitTask, WaitTask,
    )

__all__ = ["WorkCommands", "WORK_APPLY", "WORK_TIMERS", "outcome_of", "DELIVERY_LEASE"]

DELIVERY_LEASE = "delivery"  # the kind of lease a delivery is held under, in the lease table

# Reasons recorded as `outcomeReason` (0.3.0 understands `scope_cancelled`).
REASON_CANCELLED = "cancelled"
# The reason of what an operator's purge ended (then ": " and the reason the operator gave, if any).
REASON_PURGED = "purged"
REASON_DEADLINE = "deadline_exceeded"
# A nack's `error` (what the handler raised), as the reason of the task it ends.
HANDLER_ERROR = "handler_error: "
SCOPE_END_REASONS = {"CANCELLED": "scope_cancelled", "COMPLETED": "scope_completed", "EXPIRED": "scope_expired"}
_SCOPE_ENDED = frozenset(SCOPE_END_REASONS.values())


def outcome_of(result: Any) -> Any:
    """A task's outcome from a delivery's `result`: its `payload` when it has one, else all of it."""
    if isinstance(result, dict) and "payload" in result:
        return result["payload"]
    return result


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
        # -- capacity --: whether a task waits for admission (it has requirements), never for recv.
        self.needs_admission: Callable[[str], bool] = lambda task_id: False
        # The space's payload cap (`caps.check_bytes` over all its tables): (adding, freeing) -> None.
        self.check_bytes: Callable[[int, int], None] = lambda adding, freeing: None
        # The space's cap on the entities it keeps (`caps.py`): adding -> None.
        self.check_entities: Callable[[int], None] = lambda adding: None

    # -- mailboxes ------------------------------------------------------------------------------

    def create_mailbox(self, command: "CreateMailbox", now_ms: int) -> Outcome:
        mailbox_id = command.mailbox_id
        record = self.mailboxes.decide_create(
            mailbox_id, command.name, command.mode, command.backlog_limit, command.max_attempts, now_ms
        )
        outcome = self._commit(Outcome(), record)
        outcome.reply = self.mailboxes.view(self.mailboxes.get(mailbox_id))
        return outcome

    def ensure_mailbox(self, command: "EnsureMailbox", now_ms: int, requirements: dict | None = None) -> Outcome:
        """The mailbox of this name, created with what the put states (defaults for the rest) when
        missing; a setting stated for the first time is declared, one that differs is CONFLICT.
        `requirements` are the command's, resolved to ids by the caller (`transitions.py`)."""
        mailbox = self.mailboxes.by_name(command.name)
        if mailbox is None:
            record = self.mailboxes.decide_create(
                command.mailbox_id, command.name, None, None, command.max_attempts, now_ms,
                declared=command.max_attempts is not None, requirements=requirements,
            )
            outcome = self._commit(Outcome(), record)
            outcome.reply = self.mailboxes.view(self.mailboxes.get(command.mailbox_id))
            return outcome
        record = self.mailboxes.decide_declare(mailbox, command.max_attempts, requirements, now_ms)
        outcome = Outcome() if record is None else self._commit(Outcome(), record)
        outcome.reply = self.mailboxes.view(mailbox)
        return outcome

    # -- sending --------------------------------------------------------------------------------

    def send_message(self, command: "SendMessage", now_ms: int) -> Outcome:
        """Put a plain message on the queue, or return the one its work key already sent."""
        mailbox_id, scope_id, message_id = command.mailbox_id, command.scope_id, command.message_id
        payload, work_key, deadline_ms = command.payload, command.work_key, command.deadline_ms
        payload_hash = None if work_key is None else input_hash(payload)
        mailbox = self.mailboxes.get(mailbox_id)
        self.scopes.require_active(scope_id, now_ms)
        if work_key is not None:
            assert payload_hash is not None
            entry = self.messages.work_key(mailbox_id, scope_id, work_key, now_ms)
            if entry is not None:
                if entry.payload_hash != payload_hash:
                    raise KernelError(
                        IDEMPOTENCY_CONFLICT,
                        f"workKey {quote(work_key)} was already sent with a different payload "
                        f"(message {entry.message_id})",
                    )
                return Outcome(reply=self._sent_view(entry.message_id, mailbox_id, scope_id, work_key, replay=True))
        self._check_deadline(deadline_ms, now_ms)
        self._check_backlog(mailbox)
        self.check_bytes(value_bytes(payload), 0)
        self.check_entities(1)
        self.messages.check_new_id(message_id)
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
        outcome = self._commit(Outcome(), record)
        message = self.messages.get(message_id)
        outcome.timers.extend(self._message_timers(message))
        outcome.reply = self._sent_view(message_id, mailbox_id, scope_id, work_key, replay=False)
        return outcome

    def _sent_view(self, message_id: str, mailbox_id: str, scope_id: str, work_key: str | None, *, replay: bool) -> dict:
        message = self.messages.find(message_id)
        return {
            "id": message_id,
            "messageId": message_id,
            "mailboxId": mailbox_id,
            "scopeId": scope_id,
            "workKey": work_key,
            "state": None if message is None else message.state,
            "replay": replay,
            "deduplicated": replay,
        }

    def _check_deadline(self, deadline_ms: int | None, now_ms: int) -> None:
        if deadline_ms is not None and deadline_ms <= now_ms:
            raise KernelError(DEADLINE_EXCEEDED, "the deadline has already passed")

    def _check_backlog(self, mailbox: Any) -> None:
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

    def _backlog_room(self, mailbox: Any) -> int:
        """How many more unsettled messages the mailbox takes (see `_check_backlog`)."""
        cap = self.limits.backlog_limit_max
        if mailbox.backlog_limit is not None and mailbox.backlog_limit < cap:
            cap = mailbox.backlog_limit
        return max(0, cap - mailbox.backlog)

    # -- dead letters (an operator's actions, `dead_letters.py`) --------------------------------

    def requeue_dead_letters(self, command: "RequeueDeadLetters", now_ms: int) -> Outcome:
        """Put dead letters back on their queues as new messages, oldest first, as many as one
        request may and the mailbox's backlog takes; say how many matched, were skipped and remain."""
        mailbox = self.mailboxes.get(command.mailbox_id)
        chosen = dead_letters.select(self.messages, mailbox.id, command.message_ids, command.where, now_ms)
        skipped = dict.fromkeys(dead_letters.SKIP_REASONS, 0)
        eligible = []
        for message in chosen:
            why = dead_letters.requeue_skip(message, self.scopes, now_ms)
            if why is None:
                eligible.append(message)
            else:
                skipped[why] += 1
        taken = eligible[: min(dead_letters.ACTION_MAX, self._backlog_room(mailbox))]
        reply = {
            "matched": len(chosen), "requeued": len(taken), "skipped": skipped,
            "remaining": len(eligible) - len(taken), "dryRun": bool(command.dry_run), "requeuedAs": {},
        }
        if eligible and not taken and not command.dry_run:
            self._check_backlog(mailbox)  # full: BACKLOG_FULL, as a send would be refused
        if command.dry_run or not taken:
            return Outcome(reply=reply)
        new_ids = [f"{command.id_base}_{index}" for index in range(len(taken))]
        for message_id in new_ids:
            self.messages.check_new_id(message_id)
        record = {
            "type": DEAD_LETTERS_REQUEUED, "mailbox_id": mailbox.id, "message_ids": [m.id for m in taken],
            "new_ids": new_ids, "at_ms": now_ms,
        }
        if command.by is not None:
            record["by"] = command.by
        outcome = self._commit(Outcome(), record)
        scopes: dict[str, None] = {}
        for message_id in new_ids:
            message = self.messages.get(message_id)
            outcome.timers.extend(self._message_timers(message))
            scopes[message.scope_id] = None
        # Receivers parked on those queues look again (the new messages are deliverable now).
        outcome.pokes.extend(queue_actor(self.id, mailbox.id, scope_id) for scope_id in scopes)
        reply["requeuedAs"] = dict(zip(record["message_ids"], new_ids))
        outcome.reply = reply
        return outcome

    def delete_dead_letters(self, command: "DeleteDeadLetters", now_ms: int) -> Outcome:
        """Forget dead letters at once, oldest first, as many as one request may."""
        mailbox = self.mailboxes.get(command.mailbox_id)
        chosen = dead_letters.select(self.messages, mailbox.id, command.message_ids, command.where, now_ms)
        taken = chosen[: dead_letters.ACTION_MAX]
        reply = {
            "matched": len(chosen), "deleted": len(taken), "remaining": len(chosen) - len(taken),
            "dryRun": bool(command.dry_run), "deletedIds": [],
        }
        if command.dry_run or not taken:
            return Outcome(reply=reply)
        record = {"type": DEAD_LETTERS_DELETED, "mailbox_id": mailbox.id, "message_ids": [m.id for m in taken], "at_ms": now_ms}
        if command.by is not None:
            record["by"] = command.by
        outcome = self._commit(Outcome(), record)
        reply["deletedIds"] = record["message_ids"]
        outcome.reply = reply
        return outcome

    def purge_mailbox(self, command: "PurgeMailbox", now_ms: int) -> Outcome:
        """End the mailbox's waiting messages, oldest first, as many as one request may: a task's
        message CANCELS the task (reason `purged`, or `purged: <reason>`), a plain one is dropped.
        One `mailbox.purged` record says who purged and how many, for the event log."""
        mailbox = self.mailboxes.get(command.mailbox_id)
        if command.scope_id is not None:
            self.scopes.get(command.scope_id)
        waiting = self.messages.waiting_in_mailbox(mailbox.id, command.scope_id)
        taken = waiting[: dead_letters.ACTION_MAX]
        reply = {"matched": len(waiting), "purged": len(taken), "remaining": len(waiting) - len(taken), "dryRun": bool(command.dry_run)}
        if command.dry_run or not taken:
            return Outcome(reply=reply)
        reason = REASON_PURGED if not command.reason else f"{REASON_PURGED}: {command.reason}"
        marker = {"type": MAILBOX_PURGED, "mailbox_id": mailbox.id, "scope_id": command.scope_id, "count": len(taken), "at_ms": now_ms}
        if command.reason:
            marker["reason"] = command.reason
        ends = []
        for message in taken:
            if message.task_id is None:
                ends.append(self.messages.decide_drop(message, reason, now_ms))
                continue
            record = self.tasks.decide_end(self.tasks.get(message.task_id), CANCELLED, reason, now_ms)
            assert record is not None, "a task whose message waits has not ended"
            ends.append(record)
        if command.by is not None:
            marker["by"] = command.by
            for record in ends:
                if record["type"] == TASK_ENDED:
                    record["by"] = command.by
        outcome = self._commit(Outcome(), marker, *ends)
        scopes: dict[str, None] = {}
        for message in taken:
            scopes[message.scope_id] = None
            if message.task_id is not None:
                outcome.timers.extend(self.task_timers(self.tasks.get(message.task_id)))
        # Callers waiting on those tasks (their queues' actors) look again.
        outcome.pokes.extend(queue_actor(self.id, mailbox.id, scope_id) for scope_id in scopes)
        outcome.reply = reply
        return outcome

    # -- tasks ----------------------------------------------------------------------------------

    def submit_task(self, command: "SubmitTask", now_ms: int) -> Outcome:
        """Create the task for (scope, key), or return the one it has (joining the subscriber)."""
        task_id, message_id, key, task_input = command.task_id, command.message_id, command.key, command.task_input
        scope_id, mailbox_id, deadline_ms = command.scope_id, command.mailbox_id, command.deadline_ms
        subscriber_id = command.subscriber_id
        digest = input_hash(task_input)
        mailbox = self.mailboxes.get(mailbox_id)
        self.scopes.require_active(scope_id, now_ms)
        task = self.tasks.by_key(scope_id, key)
        if task is not None:
            self.tasks.check_replay(task, mailbox_id, digest)
            outcome = Outcome()
            if subscriber_id is not None:
                record = self.tasks.decide_join(task, subscriber_id, scope_id, now_ms)
                if record is not None:
                    self._commit(outcome, record)
            outcome.reply = {**self.tasks.view(task, now_ms), "created": False, "replay": True}
            return outcome
        self._check_deadline(deadline_ms, now_ms)
        self._check_backlog(mailbox)
        self.check_bytes(value_bytes(task_input), 0)
        self.check_entities(2)  # the task and its message
        self.messages.check_new_id(message_id)
        record = self.tasks.decide_create(
            task_id, key, scope_id, mailbox_id, message_id, task_input, digest, deadline_ms, subscriber_id, now_ms
        )
        outcome = self._commit(Outcome(), record)
        task = self.tasks.get(task_id)
        outcome.timers.extend(self.task_timers(task))
        outcome.reply = {**self.tasks.view(task, now_ms), "created": True, "replay": False}
        return outcome

    def wait_task(self, command: "WaitTask", now_ms: int) -> Outcome:
        """The task's view once it has ended; `empty` (a long poll parks) until then."""
        task = self.tasks.get(command.task_id)
        if not task.terminal:
            return Outcome(empty=True)
        return Outcome(reply=self.tasks.view(task, now_ms))

    def cancel_task(self, command: "CancelTask", now_ms: int) -> Outcome:
        task = self.tasks.get(command.task_id)
        record = self.tasks.decide_end(task, CANCELLED, command.reason or REASON_CANCELLED, now_ms)
        if record is not None and command.by is not None:
            record["by"] = command.by  # who cancelled it, for the event log
        outcome = Outcome() if record is None else self._commit(Outcome(), record)
        outcome.reply = self.tasks.view(task, now_ms)
        return outcome

    def join_task(self, command: "JoinTask", now_ms: int) -> Outcome:
        task = self.tasks.get(command.task_id)
        self.scopes.get(command.scope_id)
        record = self.tasks.decide_join(task, command.subscriber_id, command.scope_id, now_ms)
        outcome = Outcome() if record is None else self._commit(Outcome(), record)
        outcome.reply = self.tasks.view(task, now_ms)
        return outcome

    def detach_task(self, command: "DetachTask", now_ms: int) -> Outcome:
        task = self.tasks.get(command.task_id)
        record = self.tasks.decide_detach(task, command.subscriber_id, now_ms)
        outcome = Outcome() if record is None else self._commit(Outcome(), record)
        outcome.reply = self.tasks.view(task, now_ms)
        return outcome

    # -- deliveries -----------------------------------------------------------------------------

    def receive(self, command: "Receive", now_ms: int) -> Outcome:
        """Lease the oldest deliverable message of this queue; `empty` when there is none.

        An empty outcome writes nothing, so a long poll parks on the queue's actor and is run again
        by the turn that makes a message deliverable (or ends the scope).
        """
        mailbox_id, scope_id = command.mailbox_id, command.scope_id
        holder, session, lease_ms, token = command.holder, command.session, command.lease_s * 1000, command.token
        self.mailboxes.get(mailbox_id)
        self.scopes.require_active(scope_id, now_ms)
        defaults = self.mailboxes.get(mailbox_id).requirements is not None  # every task waits for admission
        message = self.messages.next_deliverable(mailbox_id, scope_id, now_ms)
        if message is not None and message.task_id is not None and (defaults or self.needs_admission(message.task_id)):  # -- capacity --
            needs = (lambda task_id: True) if defaults else self.needs_admission
            message = next(
                (m for m in self.messages.deliverable(mailbox_id, scope_id, now_ms) if m.task_id is None or not needs(m.task_id)), None
            )
        if message is None:
            return Outcome(empty=True)
        outcome = self._commit(Outcome(), self.messages.decide_lease(message, token, holder, session, lease_ms, now_ms))
        outcome.timers.extend(self._message_timers(message))
        outcome.reply = self.messages.delivery_view(message)
        return outcome

    def receive_many(self, command: "ReceiveMany", now_ms: int) -> Outcome:
        """Lease up to `command.count` messages as that many receives would, one after the other,
        in this one turn: `{"deliveries": [...]}`, oldest first; `empty` when there is none."""
        deliveries: list[dict] = []
        outcome = Outcome()
        for index in range(command.count):
            token = command.token if index == 0 else f"{command.token}.{index}"
            one = self.receive(replace(command, token=token), now_ms)
            if one.empty:
                break
            outcome.records.extend(one.records)
            outcome.timers.extend(one.timers)
            outcome.pokes.extend(one.pokes)
            deliveries.append(one.reply)
        if not deliveries:
            return Outcome(empty=True)
        outcome.reply = {"deliveries": deliveries}
        return outcome

    def _held(self, message_id: str, token: str, now_ms: int) -> Message:
        """The message `token` holds a running lease on (`MessageTable.current`), or SCOPE_CANCELLED
        when it was under way in a scope that has ended since: its task ended with the scope."""
        message = self.messages.get(message_id)
        if (message.state == LEASED and message.token == token) or message.reason in _SCOPE_ENDED:
            state = self.scopes.effective(self.scopes.get(message.scope_id), now_ms)
            if state != ACTIVE:
                raise KernelError(
                    SCOPE_CANCELLED, f"scope {message.scope_id} is {state.lower()}: delivery {message_id} ended with it"
                )
        return self.messages.current(message_id, token, now_ms)

    def renew_delivery(self, command: "RenewDelivery", now_ms: int) -> Outcome:
        lease_ms = None if command.lease_s is None else command.lease_s * 1000
        message = self._held(command.message_id, command.token, now_ms)
        outcome = self._commit(Outcome(), self.messages.decide_renew(message, lease_ms, now_ms))
        outcome.timers.extend(self._message_timers(message))
        outcome.reply = {
            "id": message.id,
            "leaseExpiresAt": self.messages.delivery_view(message)["leaseExpiresAt"],
            "leaseSeconds": message.lease_ms // 1000,
            "attempt": message.attempts,
        }
        return outcome

    def complete_delivery(self, command: "CompleteDelivery", now_ms: int) -> Outcome:
        """Settle a delivery as done; a task records its one outcome (SUCCEEDED)."""
        message = self._held(command.message_id, command.token, now_ms)
        if message.task_id is not None:  # the task keeps its outcome, the input is let go
            self.check_bytes(value_bytes(outcome_of(command.result)), value_bytes(message.payload))
        outcome = self._commit(Outcome(), self.messages.decide_complete(message, outcome_of(command.result), now_ms))
        outcome.timers.extend(self._message_timers(message))
        return self._settled(outcome, message, now_ms)

    def nack_delivery(self, command: "NackDelivery", now_ms: int) -> Outcome:
        """`retry`: back on the queue after a backoff (or ended, see `_release`). Else a dead letter."""
        message = self._held(command.message_id, command.token, now_ms)
        error = command.error
        if command.retry:
            record = self._release(message, "retry", error, command.jitter, now_ms)
        else:
            # The handler's own error is the task's reason (the 0.3.0 client shows what follows the prefix).
            reason = "rejected" if not error else f"{HANDLER_ERROR}{error}"
            record = self.messages.decide_dead(message, "rejected", reason, now_ms)
        outcome = self._commit(Outcome(), record)
        outcome.timers.extend(self._message_timers(message))
        return self._settled(outcome, message, now_ms)

    def _settled(self, outcome: Outcome, message: Message, now_ms: int) -> Outcome:
        reply = {"id": message.id, "state": message.state, "attempt": message.attempts, "taskId": message.task_id}
        if message.state == DELAYED:
            reply["visibleAt"] = self.messages.view(message)["visibleAt"]
        if message.task_id is not None:
            task = self.tasks.get(message.task_id)
            reply["taskState"] = task.state
            outcome.timers.extend(self.task_timers(task))
        outcome.reply = reply
        return outcome

    def _release(self, message: Message, cause: str, error: str | None, jitter: float, now_ms: int) -> dict:
        """What ends a delivery that did not complete (a retry, or a lease that ran out).

        In order: a scope that ended cancels the task (nobody may receive there again); a deadline
        that passed expires it; a mailbox whose attempts are used up dead-letters it (FAILED);
        otherwise it goes back on the queue, at once for a lost lease, after a backoff for a retry.
        """
        scope_state = self.scopes.effective(self.scopes.get(message.scope_id), now_ms)
        task = None if message.task_id is None else self.tasks.get(message.task_id)
        if scope_state != ACTIVE:
            reason = SCOPE_END_REASONS[scope_state]
            return self._end_undelivered(message, task, CANCELLED, reason, now_ms)
        if message.past_deadline(now_ms):
            return self._end_undelivered(message, task, EXPIRED, REASON_DEADLINE, now_ms)
        max_attempts = self.mailboxes.get(message.mailbox_id).max_attempts
        if message.attempts >= max_attempts:
            if error:  # the last attempt's own error says why, and the count follows it
                reason = f"{HANDLER_ERROR}{error} (attempts_exhausted: {message.attempts} of {max_attempts} attempts used)"
            else:
                last = "asked for a retry" if cause == "retry" else "let its lease run out"
                reason = f"attempts_exhausted: {message.attempts} of {max_attempts} attempts used; the last one {last}"
            return self.messages.decide_dead(message, "attempts", reason, now_ms)
        if cause == "retry":
            visible_ms = now_ms + backoff_ms(self.limits, message.attempts, jitter)
        else:
            visible_ms = now_ms
        return self.messages.decide_requeue(message, cause, visible_ms, now_ms)

    def _end_undelivered(self, message: Message, task: Task | None, state: str, reason: str, now_ms: int) -> dict:
        if task is None:
            return self.messages.decide_drop(message, reason, now_ms)
        record = self.tasks.decide_end(task, state, reason, now_ms)
        assert record is not None
        return record

    # -- timers ---------------------------------------------------------------------------------

    def on_lease_timer(self, message_id: str, token: Any, now_ms: int) -> Outcome:
        """A delivery's lease ran out: requeue it at once, or end its message (see `_release`)."""
        message = self.messages.find(message_id)
        if message is None or message.state != LEASED or message.token != token or now_ms < message.expires_ms:
            return Outcome()
        return self._timer_commit(self._release(message, "expired", None, 1.0, now_ms), message, None)

    def on_visible_timer(self, message_id: str, gen: Any, now_ms: int) -> Outcome:
        """A retry's backoff ended: the message is deliverable again (parked receivers wake)."""
        message = self.messages.find(message_id)
        if message is None or message.gen != gen:
            return Outcome()
        return self._timer_commit(self.messages.decide_visible(message, now_ms), message, None)

    def on_deadline_timer(self, message_id: str, _: Any, now_ms: int) -> Outcome:
        """A plain message's deadline passed before it was delivered: drop it."""
        message = self.messages.find(message_id)
        if message is None or message.state not in (QUEUED, DELAYED) or not message.past_deadline(now_ms):
            return Outcome()
        return self._timer_commit(self.messages.decide_drop(message, REASON_DEADLINE, now_ms), message, None)

    def on_task_deadline_timer(self, task_id: str, _: Any, now_ms: int) -> Outcome:
        """A task's deadline passed before it ended: EXPIRED."""
        task = self.tasks.find(task_id)
        if task is None or task.terminal or task.deadline_ms is None or now_ms < task.deadline_ms:
            return Outcome()
        return self._timer_commit(self.tasks.decide_end(task, EXPIRED, REASON_DEADLINE, now_ms), None, task)

    def on_retention_timer(self, task_id: str, _: Any, now_ms: int) -> Outcome:
        """A finished task's retention ended: tombstone it."""
        task = self.tasks.find(task_id)
        if task is None:
            return Outcome()
        record = self.tasks.decide_tombstone(task, now_ms)
        return Outcome() if record is None else self._timer_commit(record, None, task)

    def _timer_commit(self, record: dict | None, message: Message | None, task: Task | None) -> Outcome:
        if record is None:
            return Outcome()
        outcome = self._commit(Outcome(), record)
        if message is not None:
            outcome.timers.extend(self._message_timers(message))
            if message.task_id is not None:
                task = self.tasks.get(message.task_id)
        if task is not None:
            outcome.timers.extend(self.task_timers(task))
        return outcome

    def _message_timers(self, message: Message) -> Iterator[Timer]:
        actor = queue_actor(self.id, message.mailbox_id, message.scope_id)
        if message.state == LEASED:
            yield Timer(message.expires_ms, actor, ("lease", message.id), message.token)
        elif message.state == DELAYED:
            yield Timer(message.visible_ms, actor, ("visible", message.id), message.gen)
        if message.task_id is None and message.deadline_ms is not None and message.state in (QUEUED, DELAYED):
            yield Timer(message.deadline_ms, actor, ("deadline", message.id), None)

    def task_timers(self, task: Task) -> Iterator[Timer]:
        actor = queue_actor(self.id, task.mailbox_id, task.scope_id)
        if not task.terminal:
            if task.deadline_ms is not None:
                yield Timer(task.deadline_ms, actor, ("task-deadline", task.id), None)
        elif not task.tombstoned:
            due_ms = self.tasks.tombstone_due_ms(task)
            assert due_ms is not None
            yield Timer(due_ms, actor, ("retention", task.id), None)

    def timers(self) -> Iterator[Timer]:
        """Every timer the queues and tasks need now (after a recovery)."""
        for message in self.messages.live():
            yield from self._message_timers(message)
        for task in self.tasks.all():
            yield from self.task_timers(task)

    # -- restarts and images --------------------------------------------------------------------

    # -- the lease table (`leases.py`: the restart rule is decided there, for every kind at once) --

    def lease_kind(self) -> LeaseKind:
        held = lambda: [message for message in self.messages.live() if message.state == LEASED]  # noqa: E731
        return LeaseKind(DELIVERY_LEASE, held, self._lease_ended, self._lease_graced)

    def _lease_ended(self, message: Message, now_ms: int, outcome: Outcome) -> None:
        """A delivery whose lease ended while the server was down is released as a lost lease
        would be (requeued at once, or ended, see `_release`)."""
        self._commit(outcome, self._release(message, "expired", None, 1.0, now_ms))
        outcome.timers.extend(self._message_timers(message))
        if message.task_id is not None:
            outcome.timers.extend(self.task_timers(self.tasks.get(message.task_id)))

    def _lease_graced(self, message: Message, expires_ms: int, now_ms: int, outcome: Outcome) -> None:
        record = self.messages.renewed_record(message, message.lease_ms, expires_ms, now_ms)
        record["graced"] = True
        self._commit(outcome, record)
        outcome.timers.extend(self._message_timers(message))

    def image(self) -> Iterator[dict]:
        """Records that rebuild the mailboxes, messages and tasks exactly (mailboxes first: the
        messages count themselves on them)."""
        yield from self.mailboxes.image()
        yield from self.messages.image()
        yield from self.tasks.image()

    def is_empty(self) -> bool:
        return not len(self.mailboxes) and not len(self.messages) and not len(self.tasks)

    # -- the scope cascade ----------------------------------------------------------------------

    def queue_actors(self, scope_ids: list[str]) -> list[tuple]:
        """Every queue actor of these scopes, so parked receivers there hear that the scope ended.

        All mailboxes, not only those with messages: a receiver may be parked on an empty queue.
        """
        return [queue_actor(self.id, mailbox.id, scope_id) for scope_id in scope_ids for mailbox in self.mailboxes.all()]

    def cascade_scope_ended(self, scope_ids: list[str], end_state: str, at_ms: int) -> None:
        """Applied with `scope.ended`: what waits in the subtree ends with it.

        Queued tasks become CANCELLED (reason `scope_cancelled`, or `scope_completed` /
        `scope_expired`), plain messages are dropped. Deliveries under way are ended by explicit
        records in the same turn (`end_in_flight`); a journal written before those records were
        made replays as it did then: its later settlements are in it.
        """
        reason = SCOPE_END_REASONS[end_state]
        for message in self.messages.waiting_in_scopes(scope_ids):
            if message.task_id is not None:
                self.tasks.apply_ended(message.task_id, CANCELLED, None, reason, at_ms)
            self.messages.apply_finished(message.id, "DROPPED", reason, at_ms)

    def end_in_flight(self, outcome: Outcome, scope_ids: list[str], now_ms: int) -> None:
        """After a scope's end: every delivery under way in its subtree ends now (`_release` in a
        scope that is no longer active: its task CANCELLED with the scope's reason, a plain message
        dropped), so its worker's renewal or settlement is refused with SCOPE_CANCELLED."""
        for message in self.messages.leased_in_scopes(scope_ids):
            self._commit(outcome, self._release(message, "scope", None, 1.0, now_ms))
            outcome.timers.extend(self._message_timers(message))
            if message.task_id is not None:
                outcome.timers.extend(self.task_timers(self.tasks.get(message.task_id)))

    # -- applying -------------------------------------------------------------------------------

    def _apply_message_sent(self, record: dict) -> None:
        self.messages.apply_enqueued(
            record["id"],
            record["mailbox_id"],
            record["scope_id"],
            record["payload"],
            record["payload_hash"],
            record["work_key"],
            record["deadline_ms"],
            None,
            record["at_ms"],
        )

    def _apply_task_created(self, record: dict) -> None:
        task = self.tasks.apply_created(record)
        self.messages.apply_enqueued(
            task.message_id,
            task.mailbox_id,
            task.scope_id,
            record["input"],
            None,
            None,
            task.deadline_ms,
            task.id,
            record["at_ms"],
        )

    def _apply_leased(self, record: dict) -> None:
        message = self.messages.apply_leased(record)
        if message.task_id is not None:
            self.tasks.apply_running(message.task_id, message.attempts, record["at_ms"])

    def _apply_requeued(self, record: dict) -> None:
        message = self.messages.apply_requeued(record)
        if message.task_id is not None:
            self.tasks.apply_queued(message.task_id, record["at_ms"])

    def _apply_completed(self, record: dict) -> None:
        message = self.messages.apply_finished(record["message_id"], "COMPLETED", None, record["at_ms"])
        if message.task_id is not None:
            self.tasks.apply_ended(message.task_id, SUCCEEDED, record.get("outcome"), None, record["at_ms"])

    def _apply_dead(self, record: dict) -> None:
        message = self.messages.apply_finished(record["message_id"], "DEAD", record["reason"], record["at_ms"])
        if message.task_id is not None:
            self.tasks.apply_ended(message.task_id, FAILED, None, record["reason"], record["at_ms"])

    def _apply_dropped(self, record: dict) -> None:
        self.messages.apply_finished(record["message_id"], "DROPPED", record["reason"], record["at_ms"])

    def _apply_task_ended(self, record: dict) -> None:
        task = self.tasks.apply_ended(record["task_id"], record["state"], None, record["reason"], record["at_ms"])
        message = self.messages.find(task.message_id)
        if message is not None and message.state in LIVE:
            self.messages.apply_finished(message.id, "DROPPED", record["reason"], record["at_ms"])


# What each kind of queue timer proposes (see the module docstring for the tags).
WORK_TIMERS: dict[str, Callable[[WorkCommands, Any, Any, int], Outcome]] = {
    "lease": WorkCommands.on_lease_timer,
    "visible": WorkCommands.on_visible_timer,
    "deadline": WorkCommands.on_deadline_timer,
    "task-deadline": WorkCommands.on_task_deadline_timer,
    "retention": WorkCommands.on_retention_timer,
}

WORK_APPLY: dict[str, Callable[[WorkCommands, dict], Any]] = {
    MAILBOX_CREATED: lambda space, record: space.mailboxes.apply_created(record),
    MAILBOX_DECLARED: lambda space, record: space.mailboxes.apply_declared(record),
    MESSAGE_SENT: WorkCommands._apply_message_sent,
    MESSAGE_VISIBLE: lambda space, record: space.messages.apply_visible(record),
    MESSAGE_DROPPED: WorkCommands._apply_dropped,
    DELIVERY_LEASED: WorkCommands._apply_leased,
    DELIVERY_RENEWED: lambda space, record: space.messages.apply_renewed(record),
    DELIVERY_REQUEUED: WorkCommands._apply_requeued,
    DELIVERY_COMPLETED: WorkCommands._apply_completed,
    DELIVERY_DEAD: WorkCommands._apply_dead,
    TASK_CREATED: WorkCommands._apply_task_created,
    TASK_JOINED: lambda space, record: space.tasks.apply_joined(record),
    TASK_DETACHED: lambda space, record: space.tasks.apply_detached(record),
    TASK_ENDED: WorkCommands._apply_task_ended,
    TASK_TOMBSTONED: lambda space, record: space.tasks.apply_tombstoned(record),
    DEAD_LETTERS_REQUEUED: lambda space, record: space.messages.apply_dead_requeued(record),
    DEAD_LETTERS_DELETED: lambda space, record: space.messages.apply_dead_deleted(record),
    # What a purge ended is in the records after this one; this one says who purged, for the log.
    MAILBOX_PURGED: lambda space, record: None,
    # Image-only records (a snapshot's way of saying what a table holds).
    MAILBOX_IMAGE: lambda space, record: space.mailboxes.apply_created(record),
    MESSAGES_IMAGE: lambda space, record: space.messages.apply_image_counter(record),
    MESSAGE_IMAGE: lambda space, record: space.messages.apply_image_message(record),
    WORKKEY_IMAGE: lambda space, record: space.messages.apply_image_work_key(record),
    TASK_IMAGE: lambda space, record: space.tasks.apply_image(record),
}
