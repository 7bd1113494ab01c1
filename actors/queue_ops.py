"""The kernel's operations on mailboxes, messages and tasks, as the HTTP shell calls them.

Like `ops.py`: each operation checks its arguments against the limits, draws what must be random
(ids, tokens, the backoff jitter) from the kernel's seeded source, names the actor that owns the
queue and sends it a command; the state machines stay pure because what was drawn comes in as an
argument and goes into the record. Reads answer from the state without a turn.

Every operation on a queue goes to `("queue", space, mailbox_id, scope_id)`. Operations that name
only a message or a task find its queue first; the turn then checks again (a token may have
become stale in between).
"""

from __future__ import annotations

from typing import Any

import trio

from .errors import VALIDATION_FAILED, KernelError
from .kernel import EMPTY, Idem, Kernel
from .ops import check_lease_s, check_text
from .tasks import input_hash
from .work import mailboxes_actor, queue_actor

__all__ = ["MailboxOps", "MessageOps", "TaskOps", "JITTER_LOW", "JITTER_HIGH"]

# The retry backoff is the nominal wait (1 s, 2 s, 4 s...) times a factor drawn in this range.
JITTER_LOW = 0.8
JITTER_HIGH = 1.0

# A nack's error text and a cancel's reason are kept as `outcomeReason`; 0.3.0 sends up to 2000.
REASON_LEN_MAX = 2000


def _check_reason(field: str, value: str | None) -> str | None:
    if value is not None and len(value) > REASON_LEN_MAX:
        raise KernelError(VALIDATION_FAILED, f"{field} is longer than {REASON_LEN_MAX} characters")
    return value


class MailboxOps:
    def __init__(self, kernel: Kernel) -> None:
        self._kernel = kernel

    async def create(
        self,
        space: str,
        *,
        name: str,
        mode: str | None = None,
        backlog_limit: int | None = None,
        max_attempts: int | None = None,
        idem: Idem | None = None,
    ) -> dict:
        check_text("name", name, self._kernel.limits.name_len_max)
        mailbox_id = self._kernel.ids.make("mb_")
        # One actor per space for creation: two creates of one name are decided one after the other.
        return await self._kernel.call(
            mailboxes_actor(space),
            lambda state, now_ms: state.space(space).create_mailbox(
                mailbox_id, name, mode, backlog_limit, max_attempts, now_ms
            ),
            idem=idem,
        )

    def list(self, space: str) -> list[dict]:
        """Every mailbox of the space, in creation order (the client reads the list as complete)."""
        state = self._kernel.state.space(space)
        return [state.mailboxes.view(mailbox) for mailbox in state.mailboxes.all()]

    def view(self, space: str, mailbox_id: str) -> dict:
        state = self._kernel.state.space(space)
        return state.mailboxes.view(state.mailboxes.get(mailbox_id))

    def dead_letters(self, space: str, mailbox_id: str, limit: int) -> dict:
        """The newest `limit` dead letters still kept, newest first, with their payloads."""
        state = self._kernel.state.space(space)
        state.mailboxes.get(mailbox_id)
        letters = state.messages.dead_letters(mailbox_id)
        newest = letters[::-1][:limit]
        return {
            "deadLetters": [state.messages.view(message, payload=True) for message in newest],
            "total": len(letters),
            "truncated": len(letters) > limit,
        }


class MessageOps:
    def __init__(self, kernel: Kernel) -> None:
        self._kernel = kernel

    async def send(
        self,
        space: str,
        mailbox_id: str,
        *,
        scope_id: str,
        payload: Any = None,
        work_key: str | None = None,
        deadline_ms: int | None = None,
        idem: Idem | None = None,
    ) -> dict:
        kernel = self._kernel
        if work_key is not None:
            check_text("workKey", work_key, kernel.limits.work_key_len_max)
        digest = None if work_key is None else input_hash(payload)
        message_id = kernel.ids.make("ms_")
        return await kernel.call(
            queue_actor(space, mailbox_id, scope_id),
            lambda state, now_ms: state.space(space).send_message(
                mailbox_id, scope_id, message_id, payload, digest, work_key, deadline_ms, now_ms
            ),
            idem=idem,
        )

    async def receive(
        self,
        space: str,
        mailbox_id: str,
        *,
        scope_id: str,
        holder: str,
        session: str,
        lease_s: int,
        wait_ms: int | None = None,
        idem: Idem | None = None,
    ) -> dict | None:
        """A delivery, or None when there is nothing (after waiting up to `wait_ms`, capped).

        The wait parks on the queue's actor; a cancelled caller (a client that went away) is
        withdrawn before anything is leased to it.
        """
        kernel = self._kernel
        limits = kernel.limits
        check_text("holder", holder, limits.holder_len_max)
        check_text("holderSession", session, limits.holder_len_max)
        lease_ms = check_lease_s(limits, lease_s) * 1000
        if wait_ms is not None and wait_ms < 0:
            raise KernelError(VALIDATION_FAILED, "waitMs must not be negative")
        token = kernel.ids.make("dt_", 128)
        wait_until = None
        if wait_ms:
            wait_until = trio.current_time() + min(wait_ms, limits.wait_ms_max) / 1000
        reply = await kernel.call(
            queue_actor(space, mailbox_id, scope_id),
            lambda state, now_ms: state.space(space).receive(
                mailbox_id, scope_id, holder, session, lease_ms, token, now_ms
            ),
            idem=idem,
            wait_until=wait_until,
        )
        return None if reply is EMPTY else reply

    async def complete(self, space: str, message_id: str, *, token: str, result: Any = None, idem: Idem | None = None) -> dict:
        return await self._kernel.call(
            self._actor_of(space, message_id),
            lambda state, now_ms: state.space(space).complete_delivery(message_id, token, result, now_ms),
            idem=idem,
        )

    async def nack(
        self,
        space: str,
        message_id: str,
        *,
        token: str,
        retry: bool,
        error: str | None = None,
        idem: Idem | None = None,
    ) -> dict:
        _check_reason("error", error)
        jitter = self._kernel.ids.uniform(JITTER_LOW, JITTER_HIGH)
        return await self._kernel.call(
            self._actor_of(space, message_id),
            lambda state, now_ms: state.space(space).nack_delivery(message_id, token, retry, error, jitter, now_ms),
            idem=idem,
        )

    async def renew(
        self, space: str, message_id: str, *, token: str, lease_s: int | None = None, idem: Idem | None = None
    ) -> dict:
        lease_ms = None if lease_s is None else check_lease_s(self._kernel.limits, lease_s) * 1000
        return await self._kernel.call(
            self._actor_of(space, message_id),
            lambda state, now_ms: state.space(space).renew_delivery(message_id, token, lease_ms, now_ms),
            idem=idem,
        )

    def _actor_of(self, space: str, message_id: str) -> tuple:
        message = self._kernel.state.space(space).messages.get(message_id)
        return queue_actor(space, message.mailbox_id, message.scope_id)


class TaskOps:
    def __init__(self, kernel: Kernel) -> None:
        self._kernel = kernel

    async def submit(
        self,
        space: str,
        *,
        scope_id: str,
        mailbox_id: str,
        key: str,
        task_input: Any = None,
        deadline_ms: int | None = None,
        subscriber_id: str | None = None,
        idem: Idem | None = None,
    ) -> dict:
        kernel = self._kernel
        limits = kernel.limits
        check_text("taskKey", key, limits.task_key_len_max)
        if subscriber_id is not None:
            check_text("subscriberId", subscriber_id, limits.holder_len_max)
        digest = input_hash(task_input)
        task_id = kernel.ids.make("tk_")
        message_id = kernel.ids.make("ms_")
        return await kernel.call(
            queue_actor(space, mailbox_id, scope_id),
            lambda state, now_ms: state.space(space).submit_task(
                task_id, message_id, scope_id, mailbox_id, key, task_input, digest, deadline_ms, subscriber_id, now_ms
            ),
            idem=idem,
        )

    def view(self, space: str, task_id: str) -> dict:
        state = self._kernel.state.space(space)
        return state.tasks.view(state.tasks.get(task_id), self._kernel.clock.now_ms())

    async def cancel(self, space: str, task_id: str, *, reason: str | None = None, idem: Idem | None = None) -> dict:
        _check_reason("reason", reason)
        return await self._kernel.call(
            self._actor_of(space, task_id),
            lambda state, now_ms: state.space(space).cancel_task(task_id, reason, now_ms),
            idem=idem,
        )

    async def join(self, space: str, task_id: str, *, subscriber_id: str, scope_id: str, idem: Idem | None = None) -> dict:
        check_text("subscriberId", subscriber_id, self._kernel.limits.holder_len_max)
        return await self._kernel.call(
            self._actor_of(space, task_id),
            lambda state, now_ms: state.space(space).join_task(task_id, subscriber_id, scope_id, now_ms),
            idem=idem,
        )

    async def detach(self, space: str, task_id: str, *, subscriber_id: str, idem: Idem | None = None) -> dict:
        check_text("subscriberId", subscriber_id, self._kernel.limits.holder_len_max)
        return await self._kernel.call(
            self._actor_of(space, task_id),
            lambda state, now_ms: state.space(space).detach_task(task_id, subscriber_id, now_ms),
            idem=idem,
        )

    def _actor_of(self, space: str, task_id: str) -> tuple:
        task = self._kernel.state.space(space).tasks.get(task_id)
        return queue_actor(space, task.mailbox_id, task.scope_id)
