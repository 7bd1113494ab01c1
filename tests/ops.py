"""The kernel's commands called as keyword functions, for tests that drive a kernel in process.

Each call builds the command, checks it as the HTTP shell's parse would (`fields.validate`; caller
data is left unchecked, so a test can hand the journal what no request could), draws its random
values from the kernel and submits it. Reads go to `actors.reads`. An answer that is a typed view
(a claim's, a scope's, a task's, a message's, a mailbox's) comes back as the HTTP shell writes it
(`server/wire/`), so that these tests read
every answer as a client does; the kernel's typed views are checked as they are in
`tests/kernel/test_claim_views.py`.
"""

from __future__ import annotations

from typing import Any

from runstate.actors import commands as c
from runstate.actors import reads
from runstate.actors.fields import DRAWN, JSON, specs, validate
from runstate.actors.keys import digest
from runstate.server import wire

__all__ = ["KeyOps", "ScopeOps", "ClaimOps", "MailboxOps", "MessageOps", "TaskOps"]


class _Ops:
    def __init__(self, kernel: Any) -> None:
        self._kernel = kernel

    async def _submit(self, command_class: type, idem: Any = None, **fields: Any) -> Any:
        kernel = self._kernel
        for name, spec in _drawn(command_class):
            fields.setdefault(name, kernel.draw(spec.wire))
        command = validate(command_class(**fields), kernel.limits, skip=(JSON,))
        return wire.encode(await kernel.submit(command, idem=idem, wait_ms=getattr(command, "wait_ms", None)))


def _drawn(command_class: type):
    return [(name, spec) for name, spec in specs(command_class) if spec.source == DRAWN]


class KeyOps(_Ops):
    def spaces_for(self, secret: str) -> frozenset[str]:
        return self._kernel.keys.spaces_for(secret)

    async def register(self, secret: str, spaces: frozenset[str], name: str | None = None) -> dict:
        return await self._submit(c.RegisterKey, key_digest=digest(secret), spaces=frozenset(spaces), name=name)

    async def revoke(self, key_id: str) -> dict:
        return await self._submit(c.RevokeKey, key_id=key_id)


class ScopeOps(_Ops):
    async def create(self, space: str, *, name=None, parent_id=None, deadline_ms=None, child_limit=None, idem=None) -> dict:
        return await self._submit(
            c.CreateScope, idem, space=space, name=name, parent_id=parent_id, deadline_ms=deadline_ms, child_limit=child_limit
        )

    def view(self, space: str, scope_id: str) -> dict:
        return wire.encode(reads.scope(self._kernel, space, scope_id))

    async def cancel(self, space: str, scope_id: str, *, idem=None) -> dict:
        return await self._submit(c.CancelScope, idem, space=space, scope_id=scope_id)

    async def complete(self, space: str, scope_id: str, *, idem=None) -> dict:
        return await self._submit(c.CompleteScope, idem, space=space, scope_id=scope_id)


class ClaimOps(_Ops):
    async def acquire(self, space: str, *, scope_id, key, holder, session, lease_s, wait_ms=None, idem=None) -> dict:
        return await self._submit(
            c.AcquireClaim, idem, space=space, scope_id=scope_id, key=key, holder=holder, session=session, lease_s=lease_s,
            wait_ms=wait_ms,
        )

    async def renew(self, space: str, *, key, token, lease_s=None, idem=None) -> dict:
        return await self._submit(c.RenewClaim, idem, space=space, key=key, token=token, lease_s=lease_s)

    async def release(self, space: str, *, key, token, observation=None, idem=None) -> dict:
        return await self._submit(c.ReleaseClaim, idem, space=space, key=key, token=token, observation=observation)

    async def force_release(self, space: str, *, scope_id, key, reason=None, idem=None) -> dict:
        return await self._submit(c.ForceReleaseClaim, idem, space=space, scope_id=scope_id, key=key, reason=reason)

    def in_scope(self, space: str, scope_id: str) -> list[dict]:
        return [wire.encode(claim) for claim in reads.claims_in_scope(self._kernel, space, scope_id)]


class MailboxOps(_Ops):
    async def create(self, space: str, *, name, mode=None, backlog_limit=None, max_attempts=None, idem=None) -> dict:
        return await self._submit(
            c.CreateMailbox, idem, space=space, name=name, mode=mode, backlog_limit=backlog_limit, max_attempts=max_attempts
        )

    def list(self, space: str) -> list[dict]:
        return wire.encode(reads.mailboxes(self._kernel, space))

    def view(self, space: str, mailbox_id: str) -> dict:
        return wire.encode(reads.mailbox(self._kernel, space, mailbox_id))

    def dead_letters(self, space: str, mailbox_id: str, limit: int) -> dict:
        return wire.encode(reads.dead_letters(self._kernel, space, mailbox_id, limit))


class MessageOps(_Ops):
    async def send(self, space: str, mailbox_id: str, *, scope_id, payload=None, work_key=None, deadline_ms=None, idem=None) -> dict:
        return await self._submit(
            c.SendMessage, idem, space=space, mailbox_id=mailbox_id, scope_id=scope_id, payload=payload,
            work_key=work_key, deadline_ms=deadline_ms,
        )

    async def receive(self, space: str, mailbox_id: str, *, scope_id, holder, session, lease_s, wait_ms=None, idem=None):
        return await self._submit(
            c.Receive, idem, space=space, mailbox_id=mailbox_id, scope_id=scope_id, holder=holder,
            session=session, lease_s=lease_s, wait_ms=wait_ms,
        )

    async def complete(self, space: str, message_id: str, *, token, result=None, idem=None) -> dict:
        return await self._submit(c.CompleteDelivery, idem, space=space, message_id=message_id, token=token, result=result)

    async def nack(self, space: str, message_id: str, *, token, retry, error=None, idem=None) -> dict:
        return await self._submit(c.NackDelivery, idem, space=space, message_id=message_id, token=token, retry=retry, error=error)

    async def give_back(self, space: str, message_id: str, *, token, idem=None) -> dict:
        """`POST /messages/{id}/return`: back unhandled, its attempt not counted."""
        return await self._submit(c.ReturnDelivery, idem, space=space, message_id=message_id, token=token)

    async def renew(self, space: str, message_id: str, *, token, lease_s=None, idem=None) -> dict:
        return await self._submit(c.RenewDelivery, idem, space=space, message_id=message_id, token=token, lease_s=lease_s)


class TaskOps(_Ops):
    async def submit(self, space: str, *, scope_id, mailbox_id, key, task_input=None, deadline_ms=None, subscriber_id=None, idem=None) -> dict:
        return await self._submit(
            c.SubmitTask, idem, space=space, scope_id=scope_id, mailbox_id=mailbox_id, key=key, task_input=task_input,
            deadline_ms=deadline_ms, subscriber_id=subscriber_id,
        )

    def view(self, space: str, task_id: str) -> dict:
        return wire.encode(reads.task(self._kernel, space, task_id))

    async def cancel(self, space: str, task_id: str, *, reason=None, idem=None) -> dict:
        return await self._submit(c.CancelTask, idem, space=space, task_id=task_id, reason=reason)

    async def join(self, space: str, task_id: str, *, subscriber_id, scope_id, idem=None) -> dict:
        return await self._submit(c.JoinTask, idem, space=space, task_id=task_id, subscriber_id=subscriber_id, scope_id=scope_id)

    async def detach(self, space: str, task_id: str, *, subscriber_id, idem=None) -> dict:
        return await self._submit(c.DetachTask, idem, space=space, task_id=task_id, subscriber_id=subscriber_id)
